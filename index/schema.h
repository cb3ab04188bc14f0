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
//   'C' <name> 0x00 <version:u32be>                   VersionRecord (the view catalog)
//   'C' <name> 0x01 <tag>                             version:u32le (a tag)
//   'V' <view:u32be> 'B'                              u64le per shard: view bytes in it
//   'V' <view:u32be> 'D' <parent:u64be> <name bytes>  EntryRecord: an overlay name
//   'V' <view:u32be> 'I' <inode:u64be>                EntryRecord: an overlay inode
//   'V' <view:u32be> 'S' <set:1>                      InodeSet (index/inode_set.h)
//
// The mount's two hot questions are one operation each:
//   lookup(parent, name)  -> one point read of 'D' view parent name
//   readdir(inode)        -> one prefix scan of 'D' view inode
// and getattr/read by inode is one point read of 'I' view inode.
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
//                             bit 1: sparse (below); bit 2: an implied
//                             directory (no member describes it); bit 3:
//                             an encoded member (below)
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
//    70    21  encoded        encoded members only (flags bit 3); see below
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
// Encoded members (flags bit 3, schema version 3): a file whose bytes are
// stored compressed in the shard, one member at a time (a deflated zip
// member). `size` is the uncompressed size, `offset` the shard position of
// the compressed bytes, `xxh3` (when valid) is of the uncompressed content,
// and the record ends in a trailer (little-endian):
//
//   off  size  field
//     0     1  method         8: raw deflate (the only one so far)
//     1     8  comp_offset    shard position of the compressed bytes (= offset)
//     9     8  comp_size      compressed bytes
//    17     4  crc32          CRC-32 (zip's, ISO 3309) of the uncompressed content
//
// A read inflates the whole member (sizes are known) and serves from the
// inflated copy; it is never a byte range of the shard. Not with bit 1.
//
// Views and versions. The 'D' and 'I' keys, always with view id 0
// (kDefaultView), are default@1: the tree `index build` wrote, the first
// version of the view "default". Every other version of every view (later
// default versions too) is stored as a difference from default@1, never as a
// copy, and never as a difference from another version, so opening one reads
// the same few keys however many versions exist:
//
//   hidden    'V' v 'S' 'h'  inodes of default@1 whose names there ('D' 0 keys) are
//                            not in the version: removed, renamed, or with a
//                            changed record
//   overlay   'V' v 'I' i    the record of each inode of the version that is
//                            not default@1's: a changed record (a directory's
//                            link count, a new name's parent) or an inode
//                            default@1 does not have (index add, directories
//                            made by renames), numbered above its max_inode
//             'V' v 'D' p n  every name of an overlay inode
//   overlaid  'V' v 'S' 'o'  the inodes with an overlay record
//   parents   'V' v 'S' 'p'  the directories with overlay names
//   bytes     'V' v 'B'      view bytes per shard (per-rank partitions)
//
// so for a version with view id v:
//   lookup(p, n)  -> if p in parents: 'V' v 'D' p n; then 'D' 0 p n unless
//                    its inode is hidden (overlaid: its 'V' v 'I' record)
//   readdir(p)    -> 'D' 0 p* minus hidden names, merged by name with
//                    'V' v 'D' p* when p is in parents
//   getattr(i)    -> 'V' v 'I' i if i is overlaid, else 'I' 0 i unless hidden
// Inodes are numbered depth-first, so a hidden subtree is one run of the
// set: excluding a directory of 10,000 files costs a few bytes, excluding
// 100,000 scattered files about 200 KB. Directories that a view leaves empty
// are hidden with their contents (ImageFolder refuses empty class folders).
//
// A version is found through the catalog: 'C' name 0x00 version. Its view id
// v is allocated once (never reused, the largest 'V' key's plus one) and its
// 'V' v keys are one table file of their own, ingested beside default@1's
// (key ranges never overlap, so nothing is rewritten). A `view create` or
// `index add` ingests the version's table and its catalog key in one atomic
// step: killed before, nothing changed; after, the version exists whole.
// `index add` appends 'S' keys for its shards in the same step. Mounts open
// the database read-only and keep the files they opened: a running mount
// never changes. "default" versions after 1 come from `index add`; a catalog
// without a 'C' "default" key has the implicit default@1 alone.
//
// VersionRecord (little-endian):
//     0     4  view           view id v (0: default@1 itself)
//     4     4  shard_count    shards 0..n-1 of the 'S' table belong to it
//     8     8  base_max_inode default@1's max_inode (inodes above it: overlay)
//    16     8  max_inode      largest inode of the version
//    24     8  files          counts of the version's inodes
//    32     8  dirs
//    40     8  symlinks
//    48     8  bytes          content bytes of its files
//    56     8  created_ns     nanoseconds since the epoch
//    64     1  kind           1 view create, 2 index add
//    65     2  from length f, then f bytes: the source "NAME@N"
//  67+f     4  message length m, then m bytes
//
// ShardMeta:
//     0     8  size           bytes of the shard file when indexed
//     8     8  mtime_ns       the file's; a remote shard's Last-Modified, 0 if it had none
//    16     8  fingerprint    see ShardFingerprint() in index/fingerprint.h
//    24     1  flags          bit 0: path is relative to the index's parent dir
//                             bit 1: remote: path is a URL (http, https, s3)
//                             bit 2: a zip archive (members are stored byte
//                             ranges or encoded members), not a tar
//                             bit 6: a slice shard (below)
//    25     n  path           raw bytes                 (bit 1 clear)
//    25     2  etag length e  little-endian             (bit 1 set)
//    27     e  etag           as the server sent it, quotes included; may be empty
//  27+e     n  url            raw bytes
// A slice shard (bit 6, schema version 6) has 16 more bytes after the flags,
// before the rest (etag, path) moves down by 16:
//    25     8  base           byte offset of the slice's bytes in the file
//    33     8  length         bytes of the slice (base + length <= size)
//
// Slice shards (schema version 6). A compressed tar found inside a tar shard
// by `index build --recursive` (a .tar.gz member) is a shard of its own: its
// ShardMeta names the SAME file as the outer shard (path, size, mtime,
// fingerprint, etag: every check of that file applies to it unchanged), with
// bit 6 set and the member's data range as base and length, and its codec
// in bits 3..5. Its 'Z' keys (below) are its own, with compressed offsets
// relative to base, exactly as if the member were a top-level compressed
// shard; its files' offsets are in its decoded stream. Only the layer that
// reads a shard's bytes adds base (and refuses reads past length). Slices
// get ids after every top-level shard of their build. An index without a
// slice is written as before.
//
// Compressed tar shards (schema version 4). ShardMeta.flags bits 3..5 name
// the codec of a shard that is a compressed tar stream (0 none, 1 gzip,
// 2 zstd, 3 bzip2, 4 xz); the `offset` of its file records is then a byte
// offset in the DECODED stream, and ShardMeta.size stays the compressed
// file's size. A read decodes from the last seek point at or before it:
//
//   'Z' <shard:u32be> 'T'                    SeekTable of the shard
//   'Z' <shard:u32be> 'W' <point:u32be>      the window of point `point`
//   'Z' <shard:u32be> 'C'                    interval checksums (optional)
//
// SeekTable (little-endian):
//     0     8  decoded_size   bytes of the decoded stream
//     8     4  n              points, sorted by decoded offset, the first at 0
//    12  24*n  points:
//        0  8  decoded        offset in the decoded stream
//        8  8  compressed     byte offset in the shard where decoding starts
//       16  1  bits           deflate: bits of the byte before `compressed`
//                             that belong to this point (0..7)
//       17  1  kind           1 gzip member header, 2 raw deflate (with a
//                             window), 3 zstd frame, 4 xz block, 5 bzip2
//                             block
//       18  1  check          xz: the stream's check type; bzip2: bits 0..3
//                             the stream's level (1..9), bit 4 set if the
//                             block is the last of its stream
//       19  1  reserved       0
//       20  4  window         bytes of its 'W' value (deflate: up to 32 KiB
//                             of decoded bytes before `decoded`; 0: none)
// Interval checksums: one u64 (little-endian) per point, the XXH3-64 of its
// interval's decoded bytes, checked after every decode: a corrupt byte that
// still decodes gives EIO, never wrong bytes. Readers that predate the key
// ignore it; an index without it is read unchecked, as before.
// An interval (point i to point i+1, or to decoded_size) is what one read
// decodes at most: a gzip stream gets a point every `--seek-spacing` decoded
// bytes (at a deflate block boundary) and at every member; zstd one per
// frame; xz one per block.
//
// A bzip2 block (kind 5) starts at a bit: its 48-bit magic begins at bit
// `bits` (0 = the most significant) of byte `compressed`. Its bits end at
// the next point's when the next point is in the same stream, else at the
// stream's end-of-stream magic, which the reader finds by searching back
// from the next point. No window.
#ifndef SHARDFS_INDEX_SCHEMA_H_
#define SHARDFS_INDEX_SCHEMA_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// Bumped whenever a key or value layout changes. Readers refuse newer
// versions. Version 2 added sparse files (extent lists in file records); an
// index without them is written as version 1, byte for byte as before, so
// older readers keep reading it and refuse only an index they would misread.
inline constexpr uint32_t kSchemaVersion = 1;
inline constexpr uint32_t kSparseSchemaVersion = 2;
// Version 3 added encoded members (zip archives' deflated members); an index
// without one is written as before.
inline constexpr uint32_t kZipSchemaVersion = 3;
// The newest version this code reads.
// Version 4: compressed tar shards (codec flags and 'Z' seek points); an
// index without one is written as before. A reader of 4 reads 3 (zip) too.
inline constexpr uint32_t kCodecSchemaVersion = 4;
// Version 5: bzip2 seek points (SeekKind::kBzip2Block), which readers of 4
// would refuse only at a read; an index without a bzip2 shard is written as
// before.
inline constexpr uint32_t kBzip2SchemaVersion = 5;
// Version 6: slice shards (ShardMeta bit 6 and its base and length, which
// older readers would take for the path); an index without one is written
// as before.
inline constexpr uint32_t kSliceSchemaVersion = 6;
inline constexpr uint32_t kMaxSchemaVersion = kSliceSchemaVersion;

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
  friend bool operator==(ViewId, ViewId) = default;
};

inline constexpr InodeId kRootInode{1};
// The view id of default@1's keys ('D' 0, 'I' 0): what `index build` wrote.
inline constexpr ViewId kDefaultView{0};
// Longest name of one path component; longer ones cannot be looked up.
inline constexpr size_t kMaxNameLength = 255;

inline constexpr char kMetaPrefix = 'M';
inline constexpr char kShardPrefix = 'S';
inline constexpr char kDirentPrefix = 'D';
inline constexpr char kInodePrefix = 'I';
inline constexpr char kCatalogPrefix = 'C';
inline constexpr char kViewPrefix = 'V';
inline constexpr char kSeekPrefix = 'Z';
inline constexpr char kSeekTable = 'T';
inline constexpr char kSeekWindow = 'W';
inline constexpr char kSeekSums = 'C';
// Second bytes of 'V' keys, after the view id.
inline constexpr char kViewBytes = 'B';
inline constexpr char kViewDirent = 'D';
inline constexpr char kViewInode = 'I';
inline constexpr char kViewSet = 'S';
// Sets of a version ('V' v 'S' <set>).
inline constexpr char kSetHidden = 'h';
inline constexpr char kSetOverlaid = 'o';
inline constexpr char kSetParents = 'p';
// The separators of catalog keys after the name.
inline constexpr char kCatalogVersion = 0;
inline constexpr char kCatalogTag = 1;

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
// Only in a part of a partitioned build (`index build --part K/N`): "K/N",
// and the count n of shards in the whole list it was cut from (decimal). The
// part holds shards [floor(K*n/N), floor((K+1)*n/N)) of that list as its
// shards 0.. (default@1's; `index add` appends later ones), so parts 0..N-1
// of one n together hold every shard once. A part written by `pack --part
// K/N` records "K/N" and, as n, the count of units (samples and other
// leaves) of the whole source it was cut from.
inline constexpr std::string_view kMetaPartition = "partition";
inline constexpr std::string_view kMetaPartitionShards = "partition_shards";

enum class EntryType : uint8_t { kFile = 1, kDir = 2, kSymlink = 3 };

// The S_IFMT bits an EntryRecord's mode carries for its type.
uint32_t ModeTypeBits(EntryType type);

inline constexpr uint8_t kEntryHasChecksum = 1;
inline constexpr uint8_t kEntrySparse = 2;
// Directories: no member describes it (implied: 0755, owner 0, the mtime of
// its newest child). Readers before it ignore the bit.
inline constexpr uint8_t kEntryImplied = 4;
// Files: an encoded member (the trailer above).
inline constexpr uint8_t kEntryEncoded = 8;
inline constexpr uint8_t kShardPathRelative = 1;
inline constexpr uint8_t kShardRemote = 2;
inline constexpr uint8_t kShardZip = 4;
inline constexpr uint8_t kShardSlice = 0x40;

// The methods of encoded members.
inline constexpr uint8_t kMethodDeflate = 8;
inline constexpr size_t kEncodedTrailerSize = 21;

// Where and how an encoded member's bytes are stored.
struct EncodedMember {
  uint8_t method = 0;
  uint64_t comp_offset = 0;
  uint64_t comp_size = 0;
  uint32_t crc32 = 0;
  friend bool operator==(const EncodedMember&, const EncodedMember&) = default;
};

inline constexpr uint8_t kShardCodecShift = 3;
inline constexpr uint8_t kShardCodecMask = 7 << kShardCodecShift;

// The encoding of a tar stream (ShardMeta.flags bits 3..5).
enum class Codec : uint8_t { kNone = 0, kGzip = 1, kZstd = 2, kBzip2 = 3, kXz = 4 };
// "gzip", "zstd", "bzip2", "xz"; "tar" for kNone.
const char* CodecName(Codec codec);

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
  // Encoded members (flags bit 3).
  EncodedMember encoding;

  bool has_checksum() const { return flags & kEntryHasChecksum; }
  bool sparse() const { return flags & kEntrySparse; }
  bool encoded() const { return flags & kEntryEncoded; }
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
  int64_t mtime_ns = 0;  // Remote: Last-Modified when indexed (0: none); held to if no etag.
  uint64_t fingerprint = 0;
  uint8_t flags = 0;
  std::string path;  // As stored; see ResolveShardPath in index_reader.h. A URL if remote.
  std::string etag;  // Remote shards: the object's ETag when indexed ("" if none).
  // Slice shards (flags bit 6): the slice's bytes are [base, base + length)
  // of the file; 0 otherwise.
  uint64_t base = 0;
  uint64_t length = 0;
  bool remote() const { return flags & kShardRemote; }
  bool slice() const { return flags & kShardSlice; }
  // Where the shard's own bytes lie in the file, and how many there are:
  // the slice's range, or the whole file.
  uint64_t data_base() const { return slice() ? base : 0; }
  uint64_t data_size() const { return slice() ? length : size; }
  Codec codec() const { return static_cast<Codec>((flags & kShardCodecMask) >> kShardCodecShift); }
  void set_codec(Codec c) {
    flags = static_cast<uint8_t>((flags & ~kShardCodecMask) |
                                 (static_cast<uint8_t>(c) << kShardCodecShift));
  }
};

// Seek points of a compressed tar shard (see "Compressed tar shards").
enum class SeekKind : uint8_t {
  kGzipMember = 1,
  kDeflate = 2,
  kZstdFrame = 3,
  kXzBlock = 4,
  kBzip2Block = 5
};
// SeekPoint.check of a kBzip2Block point.
inline constexpr uint8_t kBzip2LevelMask = 0x0f;
inline constexpr uint8_t kBzip2LastInStream = 0x10;
inline constexpr size_t kSeekPointSize = 24;
inline constexpr uint32_t kMaxSeekWindow = 32768;

struct SeekPoint {
  uint64_t decoded = 0;
  uint64_t compressed = 0;
  uint8_t bits = 0;
  SeekKind kind = SeekKind::kGzipMember;
  uint8_t check = 0;
  uint32_t window = 0;
  friend bool operator==(const SeekPoint&, const SeekPoint&) = default;
};

struct SeekTable {
  uint64_t decoded_size = 0;
  std::vector<SeekPoint> points;
  // The index of the last point at or before decoded offset `offset`.
  // REQUIRES: !points.empty().
  size_t Find(uint64_t offset) const;
  // Where interval `i` ends in the decoded stream.
  uint64_t End(size_t i) const {
    return i + 1 < points.size() ? points[i + 1].decoded : decoded_size;
  }
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
bool DecodeDirentKey(std::string_view key, ViewId* view, InodeId* parent, std::string_view* name);
bool DecodeInodeKey(std::string_view key, ViewId* view, InodeId* inode);
bool DecodeShardKey(std::string_view key, ShardId* shard);

// Values.
// A sparse record (kEntrySparse) takes its extents from rec.extents, as
// EncodeExtents writes them; an encoded one (kEntryEncoded) gets the trailer
// of rec.encoding.
void EncodeEntry(const EntryRecord& rec, std::string* out);
// Returns Corruption if `value` is not a well-formed EntryRecord, including
// a sparse file whose extents are not sorted, overlap, are empty or reach
// past its size (whether they lie inside the shard is the reader's check),
// and an encoded record that is not a file, is sparse, has an unknown method
// or a trailer of the wrong size or whose offset differs from comp_offset.
Status DecodeEntry(std::string_view value, EntryRecord* rec);
// Appends `extent` in the layout above.
void AppendExtent(const Extent& extent, std::string* out);
// All of `extents`, in order, in that layout.
std::string EncodeExtents(const std::vector<Extent>& extents);
// Extents of a decoded sparse record; no allocation.
// REQUIRES: i < ExtentCount(rec).
inline size_t ExtentCount(const EntryRecord& rec) { return rec.extents.size() / kExtentSize; }
Extent GetExtent(const EntryRecord& rec, size_t i);
// Bytes a sparse record stores (the sum of its extents); an encoded
// member's compressed size; size for others.
uint64_t StoredBytes(const EntryRecord& rec);
// The shard range a non-sparse file's bytes come from: its data, or an
// encoded member's compressed bytes (logical 0).
inline Extent StoredRange(const EntryRecord& rec) {
  return rec.encoded() ? Extent{0, rec.encoding.comp_size, rec.encoding.comp_offset}
                       : Extent{0, rec.size, rec.offset};
}
// The trailer of an encoded member (the layout above), and its decoder
// (false if `tail` is not kEncodedTrailerSize bytes).
std::string EncodeEncodedTrailer(const EncodedMember& m);
bool DecodeEncodedTrailer(std::string_view tail, EncodedMember* m);
// The index of the first extent of `rec` that ends after logical `offset`
// (ExtentCount(rec) if none): a binary search.
size_t FindExtent(const EntryRecord& rec, uint64_t offset);
void EncodeShardMeta(const ShardMeta& meta, std::string* out);
// 'Z' shard 'T' and 'Z' shard 'W' point.
std::string EncodeSeekTableKey(ShardId shard);
std::string EncodeSeekWindowKey(ShardId shard, uint32_t point);
// 'Z' shard: the prefix of every seek key of `shard`.
std::string EncodeSeekKeyPrefix(ShardId shard);
// 'Z' shard 'C', and its value: the interval checksums.
std::string EncodeSeekSumsKey(ShardId shard);
std::string EncodeSeekSums(const std::vector<uint64_t>& sums);
// Corruption unless `value` holds exactly `points` checksums.
Status DecodeSeekSums(std::string_view value, size_t points, std::vector<uint64_t>* sums);
void EncodeSeekTable(const SeekTable& table, std::string* out);
// Corruption unless `value` is a well-formed table: points sorted by
// decoded offset (strictly), the first at 0, all below decoded_size (or
// none and decoded_size 0), compressed offsets not decreasing, bits < 8,
// windows of at most kMaxSeekWindow bytes, kinds known.
Status DecodeSeekTable(std::string_view value, SeekTable* table);
// Corruption for a record too short for its flags, and a slice whose range
// is not inside its file's size.
Status DecodeShardMeta(std::string_view value, ShardMeta* meta);

enum class VersionKind : uint8_t { kCreate = 1, kAdd = 2 };

struct VersionRecord {
  ViewId view;
  uint32_t shard_count = 0;
  uint64_t base_max_inode = 0;
  uint64_t max_inode = 0;
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  int64_t created_ns = 0;
  VersionKind kind = VersionKind::kCreate;
  std::string from;
  std::string message;
};

// View keys (see "Views and versions").
std::string EncodeCatalogKey(std::string_view name, uint32_t version);
// The prefix of every version key of `name`.
std::string EncodeCatalogPrefix(std::string_view name);
std::string EncodeTagKey(std::string_view name, std::string_view tag);
std::string EncodeTagPrefix(std::string_view name);
// 'V' v, then `sub` (kViewBytes, ...); the prefix of a version's keys with
// sub = 0 and nothing after.
std::string EncodeViewKeyPrefix(ViewId view, char sub);
std::string EncodeViewDirentKey(ViewId view, InodeId parent, std::string_view name);
std::string EncodeViewInodeKey(ViewId view, InodeId inode);
std::string EncodeViewSetKey(ViewId view, char set);
// Decoders return false on a key of another shape.
bool DecodeCatalogKey(std::string_view key, std::string_view* name, uint32_t* version);
bool DecodeTagKey(std::string_view key, std::string_view* name, std::string_view* tag);
bool DecodeViewKey(std::string_view key, ViewId* view);
void EncodeVersionRecord(const VersionRecord& rec, std::string* out);
Status DecodeVersionRecord(std::string_view value, VersionRecord* rec);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_SCHEMA_H_
