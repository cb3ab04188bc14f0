#include "index/tree_emitter.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "index/member_path.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

// The non-root nodes of `nodes` ordered by their parent's inode, siblings in
// tree (name) order: the order of the 'D' keys. A stable counting sort.
std::vector<uint32_t> ByParentInode(const HugeVector<TreeNode>& nodes, uint64_t max_inode) {
  std::vector<uint32_t> start(max_inode + 2, 0);
  for (size_t i = 1; i < nodes.size(); ++i) ++start[nodes[nodes[i].parent_node].inode + 1];
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<uint32_t> by_parent(start.back());
  for (size_t i = 1; i < nodes.size(); ++i) {
    by_parent[start[nodes[nodes[i].parent_node].inode]++] = static_cast<uint32_t>(i);
  }
  return by_parent;
}

}  // namespace

TreeEmitter::TreeEmitter(const Tree& tree, std::span<const MemberEntry> members,
                         const SparseExtents& extents)
    : tree_(tree), members_(members), extents_(extents) {}

const std::string* TreeEmitter::SparseExtentsOf(const TreeNode& n) const {
  if (extents_.empty() || n.member == kImplied || n.type != EntryType::kFile) return nullptr;
  auto it = extents_.find(static_cast<uint32_t>(n.member));
  return it == extents_.end() ? nullptr : &it->second;
}

EntryRecord TreeEmitter::Record(const TreeNode& node) const {
  const HugeVector<TreeNode>& nodes = tree_.nodes;
  const TreeNode& n = node.hardlink ? nodes[node.link_node] : node;
  EntryRecord rec;
  rec.type = n.type;
  rec.inode = InodeId{n.inode};
  rec.parent = InodeId{n.inode == kRootInode.value ? kRootInode.value : nodes[n.parent_node].inode};
  rec.mtime_ns = n.mtime_ns;
  rec.nlink = n.nlink;
  if (n.member == kImplied) {
    rec.mode = S_IFDIR | 0755;
    rec.flags = kEntryImplied;
    return rec;
  }
  const MemberEntry& m = members_[n.member];
  // A symlink's own mode bits mean nothing on Linux and tar makes every
  // symlink 0777, whatever its header says: show what tar -x shows.
  rec.mode = ModeTypeBits(n.type) | (n.type == EntryType::kSymlink ? 0777 : m.mode & 07777);
  rec.uid = m.uid;
  rec.gid = m.gid;
  if (n.type == EntryType::kFile) {
    rec.size = m.size;
    rec.shard = m.shard;
    rec.offset = m.offset;
    rec.xxh3 = m.xxh3;
    if (m.has_checksum) rec.flags |= kEntryHasChecksum;
    if (const std::string* extents = SparseExtentsOf(n)) {
      if (extents->size() == kEncodedTrailerSize) {
        rec.flags |= kEntryEncoded;
        DecodeEncodedTrailer(*extents, &rec.encoding);
      } else {
        rec.flags |= kEntrySparse;
        rec.extents = *extents;
      }
    }
  } else if (n.type == EntryType::kSymlink) {
    rec.target = m.link_target;
    rec.size = m.link_target.size();
  }
  return rec;
}

bool TreeEmitter::AllChecksummed() const {
  return std::all_of(tree_.nodes.begin(), tree_.nodes.end(), [&](const TreeNode& n) {
    return n.hardlink || n.type != EntryType::kFile || n.member == kImplied ||
           members_[n.member].has_checksum;
  });
}

bool TreeEmitter::AnySparse() const {
  return std::any_of(tree_.nodes.begin(), tree_.nodes.end(), [&](const TreeNode& n) {
    const std::string* tail = n.hardlink ? nullptr : SparseExtentsOf(n);
    return tail != nullptr && tail->size() != kEncodedTrailerSize;
  });
}

bool TreeEmitter::AnyEncoded() const {
  return std::any_of(tree_.nodes.begin(), tree_.nodes.end(), [&](const TreeNode& n) {
    const std::string* tail = n.hardlink ? nullptr : SparseExtentsOf(n);
    return tail != nullptr && tail->size() == kEncodedTrailerSize;
  });
}

Status TreeEmitter::EmitDirents(const KvSink& put) const {
  const HugeVector<TreeNode>& nodes = tree_.nodes;
  DirentKeyBuffer key;
  std::string value;
  for (uint32_t i : ByParentInode(nodes, tree_.counts.max_inode)) {
    const TreeNode& n = nodes[i];
    EncodeEntry(Record(n), &value);
    InodeId parent{nodes[n.parent_node].inode};
    SHARDFS_RETURN_IF_ERROR(
        put(EncodeDirentKey(kDefaultView, parent, BaseName(n.path), key), value));
  }
  return Status::Ok();
}

Status TreeEmitter::EmitInodes(const KvSink& put) const {
  InodeKeyBuffer key;
  std::string value;
  for (const TreeNode& n : tree_.nodes) {
    if (n.hardlink) continue;
    EncodeEntry(Record(n), &value);
    SHARDFS_RETURN_IF_ERROR(put(EncodeInodeKey(kDefaultView, InodeId{n.inode}, key), value));
  }
  return Status::Ok();
}

KeyValues TreeEmitter::MetaKeys(const MetaText& text) const {
  return MetaKeysOf(tree_.counts, AllChecksummed(), AnySparse(), text, AnyEncoded());
}

KeyValues MetaKeysOf(const TreeCounts& c, bool all_checksummed, bool any_sparse,
                     const MetaText& text, bool any_encoded) {
  KeyValues kvs;
  auto meta = [&](std::string_view name, std::string value) {
    kvs.emplace_back(EncodeMetaKey(name), std::move(value));
  };
  // Version 2 only when a sparse file made it into the tree: older readers
  // keep reading every other index.
  // Version 3 likewise only with an encoded member (a deflated zip member),
  // and 4 only with a compressed tar shard.
  meta(kMetaSchemaVersion, std::to_string(text.any_slice   ? kSliceSchemaVersion
                                          : text.any_bzip2 ? kBzip2SchemaVersion
                                          : text.any_codec ? kCodecSchemaVersion
                                          : any_encoded    ? kZipSchemaVersion
                                          : any_sparse     ? kSparseSchemaVersion
                                                           : kSchemaVersion));
  meta(kMetaBuildOptions, text.build_options);
  meta(kMetaCreatedBy, text.created_by);
  meta(kMetaFiles, std::to_string(c.files));
  meta(kMetaDirs, std::to_string(c.dirs));
  meta(kMetaSymlinks, std::to_string(c.symlinks));
  meta(kMetaBytes, std::to_string(c.bytes));
  meta(kMetaMaxInode, std::to_string(c.max_inode));
  // Checksums "xxh3" only if every file that made it into the tree has one.
  meta(kMetaChecksums, all_checksummed ? "xxh3" : "none");
  if (!text.partition.empty()) {
    meta(kMetaPartition, text.partition);
    meta(kMetaPartitionShards, std::to_string(text.partition_shards));
  }
  std::sort(kvs.begin(), kvs.end());
  return kvs;
}

Result<ShardMeta> StoredShardMeta(ShardMeta meta, const std::string& base) {
  if (meta.remote()) return meta;  // A URL is stored as given.
  std::error_code ec;
  fs::path abs = fs::absolute(meta.path, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("shard {}: {}", meta.path, ec.message()));
  fs::path rel = abs.lexically_relative(base);
  if (!rel.empty() && *rel.begin() != "..") {
    meta.path = rel.string();
    meta.flags |= kShardPathRelative;
  } else {
    meta.path = abs.string();
  }
  return meta;
}

Result<KeyValues> ShardKeys(std::span<const ShardMeta> shards, const std::string& base) {
  KeyValues kvs;
  ShardKeyBuffer key;
  for (size_t i = 0; i < shards.size(); ++i) {
    SHARDFS_ASSIGN_OR_RETURN(ShardMeta meta, StoredShardMeta(shards[i], base));
    std::string value;
    EncodeShardMeta(meta, &value);
    kvs.emplace_back(std::string(EncodeShardKey(ShardId{static_cast<uint32_t>(i)}, key)),
                     std::move(value));
  }
  return kvs;
}

bool AnyCodec(std::span<const ShardMeta> shards, const KeyValues& seek) {
  if (!seek.empty()) return true;
  for (const ShardMeta& m : shards) {
    if (m.codec() != Codec::kNone) return true;
  }
  return false;
}

bool AnyBzip2(std::span<const ShardMeta> shards) {
  for (const ShardMeta& m : shards) {
    if (m.codec() == Codec::kBzip2) return true;
  }
  return false;
}

bool AnySlice(std::span<const ShardMeta> shards) {
  for (const ShardMeta& m : shards) {
    if (m.slice()) return true;
  }
  return false;
}

}  // namespace shardfs::index
