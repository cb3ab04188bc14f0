// `pack --compress zstd|gzip`: a complete plain tar shard, cut into groups
// of whole samples, compressed so that each group can be decoded alone, and
// the seek points of those groups (index/schema.h, "Compressed tar shards"),
// so that the index pack writes needs no 32 KiB windows.
//
//  - zstd: one frame per group (with the frame's content size and checksum),
//    then the zstd seekable format's seek table as a skippable frame at the
//    end (contrib/seekable_format in the zstd repository: magic 0x184D2A5E,
//    per frame compressed size u32, decompressed size u32 and the low 32
//    bits of the XXH64 of its decoded bytes; footer: frame count u32,
//    descriptor 0x80 (checksums), magic 0x8F92EAB1). `zstd -d`, `tar -I
//    zstd` and `index build` skip that frame. Seek points: kZstdFrame.
//  - gzip: ONE gzip member (so Python's tarfile in mode "r|*" reads it), a
//    full flush (Z_FULL_FLUSH: an empty stored block, byte aligned, and no
//    back-reference across it) between groups. Seek points: kGzipMember at
//    0, then kDeflate with no window at each flush point.
//
// Groups. A group starts at a sample boundary (the start of a tar member
// that begins a sample; see tools/pack/pack.h) and a group is cut before a
// sample that would take it past `group_bytes`. A sample longer than
// `group_bytes` is cut into pieces of `group_bytes` (its members too):
// otherwise one big file would be a frame too long for a random read
// (codec::kMaxIntervalBytes). The tar's trailer ends the last group.
//
// Groups are compressed in parallel, each on its own (gzip: a raw deflate
// from an empty window, ending in a full flush, between one gzip header and
// a trailer whose CRC-32 combines the groups'), and written in order. Output
// is deterministic: same tar and options, same bytes, whatever the number
// of threads.
//
// Thread-safe: each call owns its compressor.
#ifndef SHARDFS_TOOLS_PACK_SHARD_COMPRESS_H_
#define SHARDFS_TOOLS_PACK_SHARD_COMPRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::pack {

inline constexpr uint64_t kDefaultGroupBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMinGroupBytes = uint64_t{4} << 10;
inline constexpr int kDefaultZstdLevel = 3;
inline constexpr int kDefaultGzipLevel = 6;

struct GroupCompression {
  index::Codec codec = index::Codec::kNone;  // kZstd or kGzip.
  int level = 0;                             // The codec's level.
  uint64_t group_bytes = kDefaultGroupBytes;
  int threads = 0;  // Groups compressed at once; 0: one per core.
};

// InvalidArgument naming the option unless `c` can be written: codec zstd
// or gzip, level in the codec's range (zstd 1..ZSTD_maxCLevel(), gzip
// 0..9), group_bytes in [kMinGroupBytes, kMaxIntervalBytes].
Status CheckGroupCompression(const GroupCompression& c);

// The default level of `codec` (zstd 3, gzip 6).
int DefaultCompressLevel(index::Codec codec);

// Where the groups of a tar of `tar_size` bytes start, from the decoded
// offsets where its samples start (sorted, each < tar_size), by the rule
// above. The first is 0.
std::vector<uint64_t> PlanGroups(const std::vector<uint64_t>& sample_starts, uint64_t tar_size,
                                 uint64_t group_bytes);

// Compresses bytes [0, tar_size) of `tar_fd` (read with pread) into
// `out_fd` (empty; written from its start), a group starting at each of
// `group_starts` (PlanGroups' result), up to c.threads groups at once (each
// held in memory with its output). Fills `table` with one seek point per
// group and decoded_size = tar_size. Returns IoError naming `name` if a read
// or write fails.
Status CompressShard(const std::string& name, int tar_fd, uint64_t tar_size,
                     const std::vector<uint64_t>& group_starts, const GroupCompression& c,
                     int out_fd, index::SeekTable* table);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_SHARD_COMPRESS_H_
