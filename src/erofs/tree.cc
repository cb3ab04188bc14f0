#include "src/erofs/tree.h"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_map>

#include "base/io.h"
#include "index/index_reader.h"
#include "index/walk_guard.h"

namespace shardfs::erofs {

using index::EntryRecord;
using index::EntryType;
using index::Extent;
using index::InodeId;

namespace {

constexpr uint64_t kBlockBytes = kErofsBlockSize;

// The walk behind ErofsTreeFromIndex.
class TreeCollector {
 public:
  TreeCollector(const index::IndexReader& r, const ShardFdFn& shard_fd)
      : r_(r), shard_fd_(shard_fd) {}

  Result<ErofsTree> Collect() {
    EntryRecord root;
    index::RecordHolder holder;
    SHARDFS_RETURN_IF_ERROR(r_.GetInode(index::kRootInode, &root, &holder));
    device_of_.assign(r_.shards().size(), 0);
    tree_.nodes.push_back(NodeOf(root));
    tree_.nodes[0].parent = 0;
    // Directories still to list, depth first (a directory, then its subtree).
    std::vector<std::pair<uint32_t, InodeId>> stack{{0, index::kRootInode}};
    // Every directory listed once (index/walk_guard.h).
    index::WalkGuard dirs;
    while (!stack.empty()) {
      const uint32_t dir = stack.back().first;  // Not a binding: the lambda takes it.
      const InodeId inode = stack.back().second;
      stack.pop_back();
      std::vector<std::pair<uint32_t, InodeId>> subdirs;
      Status failed;
      Status s = r_.ForEachChild(inode, "", [&](std::string_view name, const EntryRecord& rec) {
        if (rec.type == EntryType::kDir) failed = dirs.Meet(r_, inode, name, rec.inode);
        if (!failed.ok()) return false;
        Result<uint32_t> child = AddChild(dir, rec);
        if (!child.ok()) {
          failed = child.status();
          return false;
        }
        tree_.nodes[dir].children.emplace_back(std::string(name), *child);
        if (rec.type == EntryType::kDir) subdirs.emplace_back(*child, rec.inode);
        return true;
      });
      SHARDFS_RETURN_IF_ERROR(s);
      SHARDFS_RETURN_IF_ERROR(failed);
      stack.insert(stack.end(), subdirs.rbegin(), subdirs.rend());
    }
    return AssignDevices();
  }

 private:
  ErofsNode NodeOf(const EntryRecord& rec) {
    ErofsNode n;
    n.type = rec.type;
    n.mode = rec.mode;
    n.uid = rec.uid;
    n.gid = rec.gid;
    n.nlink = rec.nlink;
    n.size = rec.size;
    n.mtime_ns = rec.mtime_ns;
    n.ino = rec.inode.value;
    if (rec.type == EntryType::kSymlink) n.target = std::string(rec.target);
    return n;
  }

  Result<uint32_t> AddChild(uint32_t dir, const EntryRecord& rec) {
    bool linked = rec.type != EntryType::kDir && rec.nlink > 1;  // Files and symlinks.
    if (linked) {
      auto it = links_.find(rec.inode.value);
      if (it != links_.end()) return it->second;
    }
    ErofsNode n = NodeOf(rec);
    n.parent = dir;
    if (rec.type == EntryType::kFile) SHARDFS_RETURN_IF_ERROR(FileData(rec, &n));
    uint32_t id = static_cast<uint32_t>(tree_.nodes.size());
    tree_.nodes.push_back(std::move(n));
    if (linked) links_.emplace(rec.inode.value, id);
    return id;
  }

  // Where a file's bytes are; the shard's device number is given at the end.
  Status FileData(const EntryRecord& rec, ErofsNode* n) {
    SHARDFS_RETURN_IF_ERROR(r_.CheckFileRange(rec));
    uint64_t stored = index::StoredBytes(rec);
    if (stored == 0 && !rec.sparse()) return Status::Ok();
    const index::ShardMeta& shard = r_.shards()[rec.shard.value];
    auto where = [&] {
      std::string path;
      return r_.PathOf(rec.inode, &path).ok() ? path : fmt::format("inode {}", rec.inode.value);
    };
    if (shard.remote()) {
      return Status::NotSupported(
          fmt::format("{} is in a remote shard ({})", where(), r_.ShardPath(rec.shard)));
    }
    // The kernel cannot inflate a deflated member, and a stored one's data
    // lies wherever its headers end, not on a 512-byte block.
    // (A zip inside a tar shard, index build --recursive, has such members too.)
    if ((shard.flags & index::kShardZip) || rec.encoded()) {
      return Status::NotSupported(fmt::format(
          "{} is {} member of {}{}: zip archives are not supported by the kernel "
          "mount (mount without --kernel)",
          where(), rec.encoded() ? "a deflated" : "a",
          shard.flags & index::kShardZip ? "the zip archive " : "a zip inside the shard ",
          r_.ShardPath(rec.shard)));
    }
    if (shard.codec() != index::Codec::kNone) {
      return Status::NotSupported(fmt::format(
          "{} is in a {}-compressed tar shard ({}): the kernel reads shard bytes as they are, "
          "and only the FUSE mount decodes them",
          where(), index::CodecName(shard.codec()), r_.ShardPath(rec.shard)));
    }
    // Its blocks are numbered in 32 bits, 0xFFFFFFFF meaning none.
    if (ErofsAlignUp(shard.size, kBlockBytes) / kBlockBytes >= kErofsNullAddr) {
      return Status::NotSupported(
          fmt::format("shard {} is 2 TiB or larger (the format's block numbers are 32-bit)",
                      r_.ShardPath(rec.shard)));
    }
    // The kernel reads whole 512-byte blocks: the last one of the file's
    // bytes must be in the shard (a tar is padded to them; a truncated one
    // may not be, and a loop device drops a partial last block).
    uint64_t end = 0;
    if (!rec.sparse()) end = rec.offset + rec.size;
    for (size_t i = 0; rec.sparse() && i < index::ExtentCount(rec); ++i) {
      index::Extent e = GetExtent(rec, i);
      end = std::max(end, e.physical + e.length);
    }
    if (ErofsAlignUp(end, kBlockBytes) > shard.size) {
      return Status::NotSupported(
          fmt::format("{}: shard {} ends inside the 512-byte block that holds its last bytes",
                      where(), r_.ShardPath(rec.shard)));
    }
    n->device = rec.shard.value + 1;  // Renumbered by AssignDevices.
    n->offset = rec.offset;
    n->sparse = rec.sparse();
    if (n->sparse) {
      for (size_t i = 0; i < index::ExtentCount(rec); ++i) n->extents.push_back(GetExtent(rec, i));
      if (n->size > 0 && ErofsChunkBits(*n) < 0) return ComposeBlocks(rec, where, n);
    } else if (rec.offset % kBlockBytes != 0) {
      return Status::NotSupported(
          fmt::format("{}: its data is at byte {} of {}, not at a 512-byte block", where(),
                      rec.offset, r_.ShardPath(rec.shard)));
    }
    return Status::Ok();
  }

  // An unaligned sparse file: reads its stored bytes, checks them against its
  // checksum, and keeps the blocks that are not one aligned block of the
  // shard (or all hole) composed in n->copied.
  template <typename Where>
  Status ComposeBlocks(const EntryRecord& rec, const Where& where, ErofsNode* n) {
    uint64_t stored = index::StoredBytes(rec);
    copied_bytes_ += stored;
    if (copied_bytes_ > kErofsMaxCopiedBytes) {
      return Status::NotSupported(fmt::format(
          "{} is sparse with extents off the 512-byte blocks, and such files hold more than {} "
          "bytes",
          where(), kErofsMaxCopiedBytes));
    }
    // The blocks an extent touches without being one whole aligned block of it.
    std::map<uint64_t, std::string> blocks;
    for (const Extent& e : n->extents) {
      for (uint64_t b = e.logical / kBlockBytes; b * kBlockBytes < e.logical + e.length; ++b) {
        uint64_t lo = b * kBlockBytes, hi = std::min(lo + kBlockBytes, n->size);
        bool whole = e.logical <= lo && e.logical + e.length >= hi &&
                     (e.physical + (lo - e.logical)) % kBlockBytes == 0;
        if (!whole) blocks.emplace(b, std::string(kBlockBytes, '\0'));
      }
    }
    const std::string& path = r_.ShardPath(rec.shard);
    SHARDFS_ASSIGN_OR_RETURN(const int fd, shard_fd_(rec.shard));
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    std::string buf;
    Status s;
    for (const Extent& e : n->extents) {
      buf.resize(e.length);
      s = PreadExact(fd, buf.data(), buf.size(), e.physical);
      if (!s.ok()) break;
      XXH3_64bits_update(state, buf.data(), buf.size());
      for (auto it = blocks.lower_bound(e.logical / kBlockBytes);
           it != blocks.end() && it->first * kBlockBytes < e.logical + e.length; ++it) {
        uint64_t lo = std::max(it->first * kBlockBytes, e.logical);
        uint64_t hi = std::min(it->first * kBlockBytes + kBlockBytes, e.logical + e.length);
        std::memcpy(it->second.data() + (lo - it->first * kBlockBytes),
                    buf.data() + (lo - e.logical), hi - lo);
      }
    }
    uint64_t sum = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    if (!s.ok()) return s.WithContext(fmt::format("shard {} ({})", path, where()));
    if (rec.has_checksum() && sum != rec.xxh3) {
      return Status::Corruption(fmt::format(
          "{}: its bytes in shard {} do not match the index's checksum", where(), path));
    }
    n->copied.assign(std::make_move_iterator(blocks.begin()),
                     std::make_move_iterator(blocks.end()));
    return Status::Ok();
  }

  // Devices 1..N are the shards that hold data, in ascending shard id.
  Result<ErofsTree> AssignDevices() {
    for (const ErofsNode& n : tree_.nodes) {
      if (n.device != 0) device_of_[n.device - 1] = 1;
    }
    for (uint32_t s = 0; s < device_of_.size(); ++s) {
      if (device_of_[s] == 0) continue;
      tree_.device_shards.push_back(index::ShardId{s});
      tree_.device_blocks.push_back(
          static_cast<uint32_t>((r_.shards()[s].size + kBlockBytes - 1) / kBlockBytes));
      device_of_[s] = static_cast<uint32_t>(tree_.device_shards.size());
    }
    if (tree_.device_shards.size() > kErofsMaxDevices) {
      return Status::NotSupported(
          fmt::format("the view's files are in {} shards; the format "
                      "takes at most {}",
                      tree_.device_shards.size(), kErofsMaxDevices));
    }
    for (ErofsNode& n : tree_.nodes) {
      if (n.device != 0) n.device = device_of_[n.device - 1];
    }
    return std::move(tree_);
  }

  const index::IndexReader& r_;
  const ShardFdFn& shard_fd_;
  ErofsTree tree_;
  std::vector<uint32_t> device_of_;
  std::unordered_map<uint64_t, uint32_t> links_;
  uint64_t copied_bytes_ = 0;
};

}  // namespace

Result<ErofsTree> ErofsTreeFromIndex(const index::IndexReader& reader, const ShardFdFn& shard_fd) {
  return TreeCollector(reader, shard_fd).Collect();
}

}  // namespace shardfs::erofs
