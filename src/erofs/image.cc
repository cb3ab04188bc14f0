#include "src/erofs/image.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "base/coding.h"
#include "base/io.h"

namespace shardfs::erofs {

using index::EntryRecord;
using index::EntryType;
using index::Extent;
using index::InodeId;

namespace {

// On-disk constants (fs/erofs/erofs_fs.h).
constexpr uint32_t kMagic = 0xE0F5E1E2;
constexpr uint64_t kSuperOffset = 1024;
constexpr uint64_t kSuperSize = 128;
constexpr uint32_t kIncompatChunkedFile = 0x4;
constexpr uint32_t kIncompatDeviceTable = 0x8;
constexpr uint64_t kDeviceSlotSize = 128;
constexpr uint64_t kInodeSlot = 32;  // nid = byte offset / 32.
constexpr uint64_t kCompactInodeSize = 32;
constexpr uint64_t kExtendedInodeSize = 64;
constexpr uint64_t kDirentSize = 12;
constexpr uint64_t kChunkIndexSize = 8;
constexpr uint16_t kInodeExtended = 1;  // i_format bit 0; 0 is compact.
constexpr uint16_t kLayoutFlatPlain = 0;
constexpr uint16_t kLayoutFlatInline = 2;
constexpr uint16_t kLayoutChunkBased = 4;
constexpr uint16_t kChunkFormatIndexes = 0x20;
// Chunk = block << bits. The field has 5 bits, but a chunk of 4 GiB or more
// (bits >= 23) overflows the kernel's read length on 32-bit machines
// (erofs_map_blocks shifts an unsigned long): 2 GiB chunks at most.
constexpr uint32_t kMaxChunkBits = 22;
constexpr uint8_t kTypeFile = 1, kTypeDir = 2, kTypeSymlink = 7;

constexpr uint64_t kRootPos = kSuperOffset + kSuperSize;
constexpr uint64_t kBlock = kErofsBlockSize;
// The longest symlink target stored inline: inode and target in one block.
constexpr uint64_t kMaxInlineTarget = kBlock - kExtendedInodeSize;

uint8_t FileType(EntryType t) {
  switch (t) {
    case EntryType::kDir:
      return kTypeDir;
    case EntryType::kSymlink:
      return kTypeSymlink;
    case EntryType::kFile:
      break;
  }
  return kTypeFile;
}

}  // namespace

int ErofsChunkBits(const ErofsNode& n) {
  if (!n.copied.empty()) return 0;
  if (!n.sparse) {
    uint64_t blocks = (n.size + kBlock - 1) / kBlock;
    int bits = blocks <= 1 ? 0 : static_cast<int>(std::bit_width(blocks - 1));
    return std::min<int>(bits, kMaxChunkBits);
  }
  for (int bits = kMaxChunkBits; bits >= 0; --bits) {
    uint64_t chunk = kBlock << bits;
    bool aligned = true;
    for (const Extent& e : n.extents) {
      uint64_t end = e.logical + e.length;
      if (e.logical % chunk != 0 || (end % chunk != 0 && end != n.size) ||
          e.physical % kBlock != 0) {
        aligned = false;
        break;
      }
    }
    if (aligned) return bits;
  }
  return -1;
}

namespace {

int ChunkBits(const ErofsNode& n) { return ErofsChunkBits(n); }

uint64_t ChunkCount(const ErofsNode& n, int bits) {
  uint64_t chunk = kBlock << bits;
  return (n.size + chunk - 1) / chunk;
}

bool InlineTarget(const ErofsNode& n) {
  return n.type == EntryType::kSymlink && n.target.size() <= kMaxInlineTarget;
}

// Where each directory block starts: indices into `names` (the sorted
// entries, "." and ".." included) of each block's first entry.
template <typename NameAt>
std::vector<size_t> PackDirectory(size_t count, const NameAt& name_at, uint64_t* last_used) {
  std::vector<size_t> starts;
  uint64_t used = kBlock;
  for (size_t i = 0; i < count; ++i) {
    uint64_t need = kDirentSize + name_at(i).size();
    if (used + need > kBlock) {
      starts.push_back(i);
      used = 0;
    }
    used += need;
  }
  *last_used = used;
  return starts;
}

// A directory's entries in the kernel's order: by name bytes, "." and ".."
// among the children where they sort.
struct DirEntry {
  std::string_view name;
  uint32_t node;
};
std::vector<DirEntry> SortedEntries(const ErofsTree& tree, uint32_t dir) {
  const ErofsNode& n = tree.nodes[dir];
  std::vector<DirEntry> out;
  out.reserve(n.children.size() + 2);
  out.push_back({".", dir});
  out.push_back({"..", n.parent});
  for (const auto& [name, child] : n.children) out.push_back({name, child});
  std::stable_sort(out.begin(), out.end(),
                   [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

// Positions of everything, computed before a byte is written.
struct Layout {
  std::vector<uint64_t> inode_pos;  // Per node.
  std::vector<int> chunk_bits;      // Per node; files with data.
  // Per node: the first image block of a directory's entries, a long
  // symlink's target or an unaligned sparse file's composed blocks.
  std::vector<uint32_t> data_block;
  std::vector<uint64_t> dir_size;  // Per node: directory bytes.
  // Per node: a compact inode (32 bytes: 16-bit ids and link count, 32-bit
  // size, the superblock's mtime) where the node fits one, else extended.
  std::vector<bool> compact;
  // The superblock's time, which every compact inode has: the most common
  // mtime of the tree.
  int64_t build_time_ns = 0;
  uint64_t devices_pos = 0;
  uint64_t data_pos = 0;
  uint64_t total = 0;
};

int64_t CommonMtime(const ErofsTree& tree) {
  std::unordered_map<int64_t, uint64_t> count;
  for (const ErofsNode& n : tree.nodes) ++count[n.mtime_ns];
  int64_t best = 0;
  uint64_t most = 0;
  for (const auto& [t, c] : count) {
    if (c > most || (c == most && t < best)) {
      best = t;
      most = c;
    }
  }
  return best;
}

bool FitsCompact(const ErofsNode& n, int64_t build_time_ns) {
  return n.mtime_ns == build_time_ns && n.uid <= UINT16_MAX && n.gid <= UINT16_MAX &&
         n.nlink <= UINT16_MAX && n.size <= UINT32_MAX && n.mode <= UINT16_MAX;
}

// Seconds rounded down and nanoseconds (so -1.5 s is -2 s + 500,000,000 ns),
// as the kernel adds them.
std::pair<int64_t, uint32_t> SplitTime(int64_t ns) {
  int64_t sec = ns / 1'000'000'000;
  int64_t nsec = ns % 1'000'000'000;
  if (nsec < 0) {
    sec -= 1;
    nsec += 1'000'000'000;
  }
  return {sec, static_cast<uint32_t>(nsec)};
}

Result<Layout> ComputeLayout(const ErofsTree& tree) {
  Layout l;
  size_t count = tree.nodes.size();
  l.inode_pos.resize(count);
  l.chunk_bits.assign(count, -1);
  l.data_block.assign(count, 0);
  l.dir_size.assign(count, 0);
  if (tree.device_blocks.size() > kErofsMaxDevices) {
    return Status::InvalidArgument(fmt::format("{} devices: the format names at most {}",
                                               tree.device_blocks.size(), kErofsMaxDevices));
  }
  l.build_time_ns = CommonMtime(tree);
  l.compact.assign(count, false);
  l.inode_pos[0] = kRootPos;  // Extended: the device table follows at a fixed place.
  uint64_t pos = ErofsAlignUp(kRootPos + kExtendedInodeSize, kDeviceSlotSize);
  l.devices_pos = pos;
  pos += kDeviceSlotSize * tree.device_blocks.size();
  for (size_t i = 1; i < count; ++i) {
    const ErofsNode& n = tree.nodes[i];
    uint64_t tail = 0;
    if (n.type == EntryType::kFile && n.size > 0) {
      int bits = ChunkBits(n);
      if (bits < 0) {
        return Status::InvalidArgument(
            fmt::format("inode {}: sparse extents off the 512-byte blocks", n.ino));
      }
      l.chunk_bits[i] = bits;
      tail = kChunkIndexSize * ChunkCount(n, bits);
    } else if (InlineTarget(n)) {
      tail = n.target.size();
    }
    l.compact[i] = FitsCompact(n, l.build_time_ns) &&
                   (n.type != EntryType::kDir || n.children.size() < (1u << 23));
    uint64_t isize = l.compact[i] ? kCompactInodeSize : kExtendedInodeSize;
    pos = ErofsAlignUp(pos, kInodeSlot);
    // The inode, and an inline target with it, never crosses a block.
    uint64_t keep = InlineTarget(n) ? isize + tail : isize;
    if (pos % kBlock + keep > kBlock) pos = ErofsAlignUp(pos, kBlock);
    l.inode_pos[i] = pos;
    pos += isize + tail;
  }
  pos = ErofsAlignUp(pos, kBlock);
  l.data_pos = pos;
  for (size_t i = 0; i < count; ++i) {
    const ErofsNode& n = tree.nodes[i];
    uint64_t bytes = 0;
    if (n.type == EntryType::kDir) {
      std::vector<DirEntry> entries = SortedEntries(tree, static_cast<uint32_t>(i));
      uint64_t last = 0;
      std::vector<size_t> starts = PackDirectory(
          entries.size(), [&](size_t k) { return entries[k].name; }, &last);
      l.dir_size[i] = (starts.size() - 1) * kBlock + last;
      bytes = starts.size() * kBlock;
    } else if (n.type == EntryType::kSymlink && !InlineTarget(n)) {
      bytes = ErofsAlignUp(n.target.size(), kBlock);
    } else if (!n.copied.empty()) {
      bytes = n.copied.size() * kBlock;
    } else {
      continue;
    }
    l.data_block[i] = static_cast<uint32_t>(pos / kBlock);
    pos += bytes;
  }
  l.total = pos;
  if (l.total / kBlock > UINT32_MAX) {
    return Status::InvalidArgument("image larger than 2 TiB of 512-byte blocks");
  }
  return l;
}

// Sequential output with zero padding up to each next position.
class Output {
 public:
  explicit Output(int fd) : fd_(fd) { buf_.reserve(kFlushAt + kBlock); }
  void PadTo(uint64_t pos) {
    if (pos > pos_) Append(std::string(pos - pos_, '\0'));
  }
  void Append(std::string_view bytes) {
    buf_.append(bytes);
    pos_ += bytes.size();
    if (buf_.size() >= kFlushAt) (void)Flush();  // A failure is kept for the last Flush.
  }
  uint64_t pos() const { return pos_; }
  Status Flush() {
    if (!status_.ok()) return status_;
    if (!WriteFully(fd_, buf_.data(), buf_.size())) status_ = Status::FromErrno(errno, "write");
    buf_.clear();
    return status_;
  }

 private:
  static constexpr size_t kFlushAt = 4 << 20;
  int fd_;
  uint64_t pos_ = 0;
  std::string buf_;
  Status status_;
};

std::string Superblock(const ErofsTree& tree, const Layout& l, const std::array<uint8_t, 16>& uuid,
                       bool chunked) {
  std::string sb(kSuperSize, '\0');
  char* p = sb.data();
  EncodeFixed32(p + 0, kMagic);
  p[12] = static_cast<char>(kErofsBlockBits);
  EncodeFixed16(p + 14, static_cast<uint16_t>(l.inode_pos[0] / kInodeSlot));
  EncodeFixed64(p + 16, tree.nodes.size());
  auto [sec, nsec] = SplitTime(l.build_time_ns);
  EncodeFixed64(p + 24, static_cast<uint64_t>(sec));  // build_time: compact inodes' mtime
  EncodeFixed32(p + 32, nsec);
  EncodeFixed32(p + 36, static_cast<uint32_t>(l.total / kBlock));
  EncodeFixed32(p + 40, 0);  // meta_blkaddr: nids count from byte 0.
  std::memcpy(p + 48, uuid.data(), uuid.size());
  std::memcpy(p + 64, "shardfs", 7);  // volume_name
  uint32_t incompat = chunked ? kIncompatChunkedFile : 0;
  if (!tree.device_blocks.empty()) incompat |= kIncompatDeviceTable;
  EncodeFixed32(p + 80, incompat);
  EncodeFixed16(p + 86, static_cast<uint16_t>(tree.device_blocks.size()));
  EncodeFixed16(p + 88, static_cast<uint16_t>(l.devices_pos / kDeviceSlotSize));
  return sb;
}

// An inode of `n` with data layout `layout`, size `size` and the i_u word `u`.
std::string Inode(const ErofsNode& n, bool compact, uint16_t layout, uint64_t size, uint32_t u) {
  if (compact) {
    std::string in(kCompactInodeSize, '\0');
    char* p = in.data();
    EncodeFixed16(p + 0, static_cast<uint16_t>(layout << 1));
    EncodeFixed16(p + 4, static_cast<uint16_t>(n.mode));
    EncodeFixed16(p + 6, static_cast<uint16_t>(n.nlink));
    EncodeFixed32(p + 8, static_cast<uint32_t>(size));
    EncodeFixed32(p + 16, u);
    EncodeFixed32(p + 20, static_cast<uint32_t>(n.ino));
    EncodeFixed16(p + 24, static_cast<uint16_t>(n.uid));
    EncodeFixed16(p + 26, static_cast<uint16_t>(n.gid));
    return in;
  }
  std::string in(kExtendedInodeSize, '\0');
  char* p = in.data();
  EncodeFixed16(p + 0, static_cast<uint16_t>(kInodeExtended | (layout << 1)));
  EncodeFixed16(p + 4, static_cast<uint16_t>(n.mode));
  EncodeFixed64(p + 8, size);
  EncodeFixed32(p + 16, u);
  EncodeFixed32(p + 20, static_cast<uint32_t>(n.ino));
  EncodeFixed32(p + 24, n.uid);
  EncodeFixed32(p + 28, n.gid);
  auto [sec, nsec] = SplitTime(n.mtime_ns);
  EncodeFixed64(p + 32, static_cast<uint64_t>(sec));
  EncodeFixed32(p + 40, nsec);
  EncodeFixed32(p + 44, n.nlink);
  return in;
}

std::string ChunkIndex(uint32_t device, uint32_t block) {
  std::string ci(kChunkIndexSize, '\0');
  EncodeFixed16(ci.data() + 2, static_cast<uint16_t>(device));
  EncodeFixed32(ci.data() + 4, block);
  return ci;
}

// The chunk indexes of file `n`, chunks of (block << bits) bytes.
Status AppendChunks(const ErofsNode& n, int bits, uint32_t copied_block, Output* out) {
  uint64_t chunk = kBlock << bits;
  uint64_t chunks = ChunkCount(n, bits);
  auto block_of = [&](uint64_t physical) -> Result<uint32_t> {
    uint64_t block = physical / kBlock;
    // Block 0xFFFFFFFF is the null address (a hole); a device holds fewer.
    if (physical % kBlock != 0 || block >= kErofsNullAddr) {
      return Status::InvalidArgument(
          fmt::format("inode {}: data at byte {} of its shard is not a 512-byte block below 2 TiB",
                      n.ino, physical));
    }
    return static_cast<uint32_t>(block);
  };
  if (!n.sparse) {
    SHARDFS_ASSIGN_OR_RETURN(uint32_t first, block_of(n.offset));
    for (uint64_t c = 0; c < chunks; ++c) {
      out->Append(ChunkIndex(n.device, first + static_cast<uint32_t>(c * (chunk / kBlock))));
    }
    return Status::Ok();
  }
  size_t e = 0;
  size_t k = 0;  // The next composed block.
  for (uint64_t c = 0; c < chunks; ++c) {
    uint64_t logical = c * chunk;
    if (k < n.copied.size() && n.copied[k].first == c) {
      out->Append(ChunkIndex(0, copied_block + static_cast<uint32_t>(k++)));  // In the image.
      continue;
    }
    while (e < n.extents.size() && n.extents[e].logical + n.extents[e].length <= logical) ++e;
    if (e == n.extents.size() || n.extents[e].logical > logical) {
      out->Append(ChunkIndex(0, kErofsNullAddr));  // A hole.
      continue;
    }
    const Extent& x = n.extents[e];
    SHARDFS_ASSIGN_OR_RETURN(uint32_t block, block_of(x.physical + (logical - x.logical)));
    out->Append(ChunkIndex(n.device, block));
  }
  return Status::Ok();
}

Status WriteInode(const ErofsTree& tree, const Layout& l, size_t i, Output* out) {
  const ErofsNode& n = tree.nodes[i];
  out->PadTo(l.inode_pos[i]);
  auto inode = [&](uint16_t layout, uint64_t size, uint32_t u) {
    out->Append(Inode(n, l.compact[i], layout, size, u));
  };
  switch (n.type) {
    case EntryType::kDir:
      inode(kLayoutFlatPlain, l.dir_size[i], l.data_block[i]);
      return Status::Ok();
    case EntryType::kSymlink:
      if (InlineTarget(n)) {
        inode(kLayoutFlatInline, n.target.size(), 0);
        out->Append(n.target);
      } else {
        inode(kLayoutFlatPlain, n.target.size(), l.data_block[i]);
      }
      return Status::Ok();
    case EntryType::kFile:
      break;
  }
  if (n.size == 0) {
    inode(kLayoutFlatPlain, 0, 0);
    return Status::Ok();
  }
  int bits = l.chunk_bits[i];
  uint32_t format = kChunkFormatIndexes | static_cast<uint32_t>(bits);
  inode(kLayoutChunkBased, n.size, format);
  return AppendChunks(n, bits, l.data_block[i], out);
}

void WriteDirectory(const ErofsTree& tree, const Layout& l, uint32_t dir, Output* out) {
  std::vector<DirEntry> entries = SortedEntries(tree, dir);
  uint64_t last = 0;
  std::vector<size_t> starts = PackDirectory(
      entries.size(), [&](size_t k) { return entries[k].name; }, &last);
  out->PadTo(uint64_t{l.data_block[dir]} * kBlock);
  for (size_t b = 0; b < starts.size(); ++b) {
    size_t first = starts[b];
    size_t end = b + 1 < starts.size() ? starts[b + 1] : entries.size();
    std::string block(kBlock, '\0');
    uint64_t name_off = kDirentSize * (end - first);
    for (size_t k = first; k < end; ++k) {
      char* d = block.data() + kDirentSize * (k - first);
      const ErofsNode& child = tree.nodes[entries[k].node];
      EncodeFixed64(d, l.inode_pos[entries[k].node] / kInodeSlot);
      EncodeFixed16(d + 8, static_cast<uint16_t>(name_off));
      d[10] = static_cast<char>(FileType(child.type));
      std::memcpy(block.data() + name_off, entries[k].name.data(), entries[k].name.size());
      name_off += entries[k].name.size();
    }
    out->Append(block);
  }
}

}  // namespace

Result<ErofsImageInfo> WriteErofsImage(const ErofsTree& tree, int fd,
                                       const std::array<uint8_t, 16>& uuid) {
  if (tree.nodes.empty() || tree.nodes[0].type != EntryType::kDir) {
    return Status::InvalidArgument("the tree has no root directory");
  }
  SHARDFS_ASSIGN_OR_RETURN(Layout l, ComputeLayout(tree));
  bool chunked =
      std::any_of(l.chunk_bits.begin(), l.chunk_bits.end(), [](int b) { return b >= 0; });
  Output out(fd);
  out.PadTo(kSuperOffset);
  out.Append(Superblock(tree, l, uuid, chunked));
  SHARDFS_RETURN_IF_ERROR(WriteInode(tree, l, 0, &out));
  out.PadTo(l.devices_pos);
  for (uint32_t blocks : tree.device_blocks) {
    std::string slot(kDeviceSlotSize, '\0');
    EncodeFixed32(slot.data() + 64, blocks);  // mapped_blkaddr (68) stays 0.
    out.Append(slot);
  }
  for (size_t i = 1; i < tree.nodes.size(); ++i) {
    SHARDFS_RETURN_IF_ERROR(WriteInode(tree, l, i, &out));
  }
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const ErofsNode& n = tree.nodes[i];
    if (n.type == EntryType::kDir) {
      WriteDirectory(tree, l, static_cast<uint32_t>(i), &out);
    } else if (n.type == EntryType::kSymlink && !InlineTarget(n)) {
      out.PadTo(uint64_t{l.data_block[i]} * kBlock);
      out.Append(n.target);
    } else if (!n.copied.empty()) {
      out.PadTo(uint64_t{l.data_block[i]} * kBlock);
      for (const auto& [block, bytes] : n.copied) out.Append(bytes);
    }
  }
  out.PadTo(l.total);
  SHARDFS_RETURN_IF_ERROR(out.Flush());
  ErofsImageInfo info;
  info.bytes = l.total;
  info.inodes = tree.nodes.size();
  info.shards = tree.device_shards;
  return info;
}

}  // namespace shardfs::erofs
