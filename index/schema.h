// The on-disk format of a shardfs index. A reader of this one file knows it all.
//
// An index is a RocksDB database (a directory) with one column family and
// bytewise key order. Integers inside keys are big-endian and fixed width, so
// bytewise order is numeric order; integers inside values are little-endian
// and fixed width (they are never compared).
//
//   key                                              value
//   ---------------------------------------------    ---------------------------
//   'M' <name>                                        meta: UTF-8 text (see kMeta*)
//   'S' <shard:u32be>                                 ShardMeta
//   'D' <view:u32be> <parent:u64be> <name bytes>      EntryRecord of the child
//   'I' <view:u32be> <inode:u64be>                    EntryRecord of the inode
//
// The mount's two hot questions are one operation each:
//   lookup(parent, name)  -> one point read of 'D' view parent name
//   readdir(inode)        -> one prefix scan of 'D' view inode
// and getattr/read by inode is one point read of 'I' view inode.
//
// Views. Every tree key carries a view id ahead of the inode, so named views
// and versions (a subset, renames, removed samples) can later be stored next
// to the default view, sharing the 'S' table and the shard bytes. Only the
// default view, kDefaultView = 0, is built today.
//
// Inodes are assigned, not allocated: the builder numbers every path of the
// tree densely in depth-first, name-sorted order, root = 1. The daemon keeps
// no inode map and `forget` has nothing to free. A hard link is one inode with
// several 'D' keys and nlink counting them.
//
// EntryRecord (70 bytes + symlink target):
//   off  size  field
//     0     1  type           1 file, 2 dir, 3 symlink
//     1     1  flags          bit 0: xxh3 is valid (built with checksums)
//     2     4  mode           st_mode, type bits included
//     6     4  uid
//    10     4  gid
//    14     8  inode
//    22     8  parent         inode of the first directory that names it
//    30     8  size           bytes (symlinks: length of the target)
//    38     8  mtime_ns       nanoseconds since the epoch, signed
//    46     4  nlink
//    50     4  shard          files only; ShardId
//    54     8  offset         files only; byte offset of the data in the shard
//    62     8  xxh3           files only; XXH3-64 of the content (sparse files:
//                             of the stored extents' bytes in order; holes,
//                             zeros by construction, are not hashed)
//    70     n  target         symlinks only; the raw target bytes
//    70  24*k  extents        sparse files only (flags bit 1); see below
//
// Sparse files (flags bit 1, schema version 2). A tar member written with
// holes (GNU sparse 0.0/0.1/1.0, old GNU 'S') stores only its data extents.
// `size` is the logical size, `offset` the shard position of the first
// extent as written (0 if there is none; informative only, reads use the
// extents), and the record ends in k >= 0 extents of
// 24 bytes, sorted by logical offset, non-overlapping, each of length > 0
// and inside the logical size; everything between them is a hole of zeros:
//
//     logical file  |####|..........hole..........|##|....|
//                    \  /                          \/
//     shard         ..|####|hdr|##|..   extent = (logical, length, physical)
//
//   off  size  field (per extent, little-endian)
//     0     8  logical        byte offset in the file
//     8     8  length         bytes
//    16     8  physical       byte offset of those bytes in the shard
//
// A file of 8 GiB with three extents costs 72 bytes more, whatever its holes.
//
// ShardMeta:
//     0     8  size           bytes of the shard file when indexed
//     8     8  mtime_ns
//    16     8  fingerprint    see ShardFingerprint() in index/fingerprint.h
//    24     1  flags          bit 0: path is relative to the index's parent dir
//    25     n  path           raw bytes
#ifndef SHARDFS_INDEX_SCHEMA_H_
#define SHARDFS_INDEX_SCHEMA_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs::index {

// Bumped whenever a key or value layout changes. Readers refuse newer
// versions. Version 2 added sparse files (extent lists in file records); an
// index without them is written as version 1, byte for byte as before, so
// older readers keep reading it and refuse only an index they would misread.
inline constexpr uint32_t kSchemaVersion = 1;
inline constexpr uint32_t kSparseSchemaVersion = 2;
// The newest version this code reads.
inline constexpr uint32_t kMaxSchemaVersion = kSparseSchemaVersion;

struct InodeId {
  uint64_t value = 0;
  friend bool operator==(InodeId, InodeId) = default;
  friend auto operator<=>(InodeId, InodeId) = default;
};
struct ShardId {
  uint32_t value = 0;
  friend bool operator==(ShardId, ShardId) = default;
};
struct ViewId {
  uint32_t value = 0;
};

inline constexpr InodeId kRootInode{1};
inline constexpr ViewId kDefaultView{0};
// Longest name of one path component; longer ones cannot be looked up.
inline constexpr size_t kMaxNameLength = 255;

inline constexpr char kMetaPrefix = 'M';
inline constexpr char kShardPrefix = 'S';
inline constexpr char kDirentPrefix = 'D';
inline constexpr char kInodePrefix = 'I';

// Meta names.
inline constexpr std::string_view kMetaSchemaVersion = "schema_version";
inline constexpr std::string_view kMetaBuildOptions = "build_options";
inline constexpr std::string_view kMetaCreatedBy = "created_by";
inline constexpr std::string_view kMetaFiles = "files";
inline constexpr std::string_view kMetaDirs = "dirs";
inline constexpr std::string_view kMetaSymlinks = "symlinks";
inline constexpr std::string_view kMetaBytes = "bytes";
inline constexpr std::string_view kMetaMaxInode = "max_inode";
inline constexpr std::string_view kMetaChecksums = "checksums";

enum class EntryType : uint8_t { kFile = 1, kDir = 2, kSymlink = 3 };

inline constexpr uint8_t kEntryHasChecksum = 1;
inline constexpr uint8_t kEntrySparse = 2;
inline constexpr uint8_t kShardPathRelative = 1;

// One tree entry. `target` points into the buffer it was decoded from.
struct EntryRecord {
  EntryType type = EntryType::kFile;
  uint8_t flags = 0;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  InodeId inode;
  InodeId parent;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t nlink = 1;
  ShardId shard;
  uint64_t offset = 0;
  uint64_t xxh3 = 0;
  std::string_view target;
  // Sparse files: the encoded extent list (see ExtentCount / GetExtent).
  std::string_view extents;

  bool has_checksum() const { return flags & kEntryHasChecksum; }
  bool sparse() const { return flags & kEntrySparse; }
};

inline constexpr size_t kEntryFixedSize = 70;
inline constexpr size_t kExtentSize = 24;

// One data extent of a sparse file: `length` bytes at `logical` in the file
// are at `physical` in the shard.
struct Extent {
  uint64_t logical = 0;
  uint64_t length = 0;
  uint64_t physical = 0;
  friend bool operator==(const Extent&, const Extent&) = default;
};

struct ShardMeta {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t fingerprint = 0;
  uint8_t flags = 0;
  std::string path;  // As stored; see ResolveShardPath in index_reader.h.
};

// Keys. Each encoder writes into a caller's buffer and returns the used
// prefix, so hot paths build keys on the stack (LevelDB's LookupKey).
inline constexpr size_t kDirentKeyHeader = 1 + 4 + 8;
inline constexpr size_t kMaxDirentKeySize = kDirentKeyHeader + kMaxNameLength;
inline constexpr size_t kInodeKeySize = 1 + 4 + 8;
inline constexpr size_t kShardKeySize = 1 + 4;

using DirentKeyBuffer = std::array<char, kMaxDirentKeySize>;
using InodeKeyBuffer = std::array<char, kInodeKeySize>;
using ShardKeyBuffer = std::array<char, kShardKeySize>;

// REQUIRES: name.size() <= kMaxNameLength.
std::string_view EncodeDirentKey(ViewId view, InodeId parent, std::string_view name,
                                 DirentKeyBuffer& buf);
// The prefix shared by every child of `parent`: a readdir is a scan over it.
std::string_view EncodeDirentPrefix(ViewId view, InodeId parent, DirentKeyBuffer& buf);
std::string_view EncodeInodeKey(ViewId view, InodeId inode, InodeKeyBuffer& buf);
std::string_view EncodeShardKey(ShardId shard, ShardKeyBuffer& buf);
std::string EncodeMetaKey(std::string_view name);

// Decoders return false on a key of another shape.
bool DecodeDirentKey(std::string_view key, ViewId* view, InodeId* parent,
                     std::string_view* name);
bool DecodeInodeKey(std::string_view key, ViewId* view, InodeId* inode);
bool DecodeShardKey(std::string_view key, ShardId* shard);

// Values.
// A sparse record (kEntrySparse) takes its extents from rec.extents, as
// EncodeExtents writes them.
void EncodeEntry(const EntryRecord& rec, std::string* out);
// Returns Corruption if `value` is not a well-formed EntryRecord, including
// a sparse file whose extents are not sorted, overlap, are empty or reach
// past its size (whether they lie inside the shard is the reader's check).
Status DecodeEntry(std::string_view value, EntryRecord* rec);
// Appends `extent` in the layout above.
void AppendExtent(const Extent& extent, std::string* out);
// Extents of a decoded sparse record; no allocation.
// REQUIRES: i < ExtentCount(rec).
inline size_t ExtentCount(const EntryRecord& rec) { return rec.extents.size() / kExtentSize; }
Extent GetExtent(const EntryRecord& rec, size_t i);
// Bytes a sparse record stores (the sum of its extents); size for others.
uint64_t StoredBytes(const EntryRecord& rec);
// The index of the first extent of `rec` that ends after logical `offset`
// (ExtentCount(rec) if none): a binary search.
size_t FindExtent(const EntryRecord& rec, uint64_t offset);
void EncodeShardMeta(const ShardMeta& meta, std::string* out);
Status DecodeShardMeta(std::string_view value, ShardMeta* meta);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_SCHEMA_H_
