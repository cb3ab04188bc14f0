// Compressed tar streams: decoding one interval between seek points
// (index/schema.h, "Compressed tar shards"). The index builder records the
// points; a reader decodes an interval per cache miss.
//
// Thread-safe: every call owns its decoder state.
#ifndef SHARDFS_SRC_CODEC_CTAR_CODEC_H_
#define SHARDFS_SRC_CODEC_CTAR_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::codec {

// The mount decodes at most this much for one read; a longer interval
// (one huge zstd frame or xz block) gives EIO on a random read.
inline constexpr uint64_t kMaxIntervalBytes = uint64_t{64} << 20;

// The most compressed bytes one interval's decode reads. An interval decodes
// to at most kMaxIntervalBytes, and no codec grows incompressible data by
// anywhere near a sixteenth (stored deflate blocks add 5 bytes in 64 KiB, raw
// zstd blocks 3 in 128 KiB, LZMA2 chunks 3 in 64 KiB; bzip2 blocks are
// under 1 MiB): a seek table whose interval spans more is damaged, and a
// read of it would allocate up to the shard's size.
inline constexpr uint64_t kMaxIntervalInputBytes = kMaxIntervalBytes + (kMaxIntervalBytes >> 4);

// The most memory an xz decoder may take, at build (liblzma's memlimit) and
// on a read (the block's filters, checked before its decoder is made). It
// follows the dictionary the stream declares: `xz -9` uses 64 MiB, and a
// header declaring more than this (up to 4 GiB) is refused, naming the shard.
inline constexpr uint64_t kXzMemLimit = uint64_t{256} << 20;

// Where the compressed bytes of interval `i` of `table` start (a deflate
// point with bits starts one byte early) and the offset past which they
// cannot reach (the next point's compressed offset, or `file_size`). The
// last interval's end is the file's, and what follows its stream there (an
// xz index, zero padding) is not read: it ends at most
// kMaxIntervalInputBytes past its start.
uint64_t IntervalInputStart(const index::SeekTable& table, size_t i);
uint64_t IntervalInputEnd(const index::SeekTable& table, size_t i, uint64_t file_size);

// Corruption naming `name` and the seek point unless interval `i`'s
// compressed bytes (as above) lie within the `file_size` bytes of the shard
// and are at most kMaxIntervalInputBytes: checked before they are read.
Status CheckIntervalInput(std::string_view name, const index::SeekTable& table, size_t i,
                          uint64_t file_size);

// Decodes interval `i` of `table`: exactly table.End(i) - point.decoded
// bytes. `input` holds the shard's bytes from IntervalInputStart(table, i)
// on (up to IntervalInputEnd; more is ignored), `window` the point's
// window ('W' value; empty if it has none). Returns InvalidArgument naming
// `name` and the compressed offset if the data is corrupt or ends early,
// and for an interval longer than `max_bytes`; never more or fewer bytes.
Result<std::string> DecodeInterval(std::string_view name, const index::SeekTable& table, size_t i,
                                   std::string_view window, std::string_view input,
                                   uint64_t max_bytes);

// Whether an interval of this kind can be decoded in part, from its point
// up to some byte short of its end (DecodeIntervalPrefix): gzip, zstd and
// xz stream their output; a bzip2 block is decoded whole.
bool CanDecodePrefix(index::SeekKind kind);

// As DecodeInterval, but only the first `prefix` bytes of the interval (all
// of it if it is shorter), for a kind CanDecodePrefix allows. A frame's or
// block's own check, where it has one, is not reached: the caller checks
// what it uses (against the file's checksum).
Result<std::string> DecodeIntervalPrefix(std::string_view name, const index::SeekTable& table,
                                         size_t i, std::string_view window, std::string_view input,
                                         uint64_t max_bytes, uint64_t prefix);

// The checksum of an interval's decoded bytes (XXH3-64; see "Interval
// checksums" in index/schema.h).
uint64_t IntervalChecksum(std::string_view decoded);

// The checksums of every interval of `table`, whose decoded stream is the
// file at `fd` from offset 0 (read with pread). IoError naming `name`.
Result<std::vector<uint64_t>> IntervalChecksumsOfFile(std::string_view name,
                                                      const index::SeekTable& table, int fd);

}  // namespace shardfs::codec

#endif  // SHARDFS_SRC_CODEC_CTAR_CODEC_H_
