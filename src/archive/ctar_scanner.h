// Scanning a compressed tar shard (.tar.gz, .tar.zst, .tar.xz, .tar.bz2): the stream
// is decoded once, into a temporary file, while seek points are recorded
// (index/schema.h, "Compressed tar shards"); the decoded bytes are then
// scanned by the tar scanner (src/archive/tar_scanner.h), so member offsets are
// offsets in the decoded stream and checksums cover the members' content
// exactly as for a plain tar.
//
//  - gzip: a point at every member (pigz, concatenated files) and, within a
//    member, at the first deflate block boundary after every `spacing`
//    decoded bytes, with its 32 KiB window (zlib's zran approach).
//  - zstd: a point per frame (skippable frames are skipped).
//  - xz: a point per block, from the file's index (liblzma).
//  - bzip2: a point per block, at the bit where it starts (every stream of
//    a multi-stream file, as pbzip2 writes); see src/codec/bzip2_block.h.
// A shard whose stream is one frame or block larger than
// kSequentialWarnBytes is indexed with a warning: only a sequential decode
// can read it, and the mount refuses random reads of it (EIO) beyond
// kMaxIntervalBytes per interval.
//
// Thread-safe: each call owns its decoder, temporary file and mapping.
#ifndef SHARDFS_SRC_ARCHIVE_CTAR_SCANNER_H_
#define SHARDFS_SRC_ARCHIVE_CTAR_SCANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "index/schema.h"
#include "src/archive/tar_scanner.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::archive {

// Default decoded bytes between gzip seek points (`index build
// --seek-spacing`): see man/shardfs-index.1 for the measurement behind it.
inline constexpr uint64_t kDefaultSeekSpacing = uint64_t{2} << 20;
// The largest: a checkpoint may wait up to twice the spacing for a full
// flush, then one more deflate block, and a mount decodes at most
// kMaxIntervalBytes for a read.
inline constexpr uint64_t kMaxSeekSpacing = codec::kMaxIntervalBytes / 4;

struct CompressedScan {
  index::Codec codec = index::Codec::kNone;
  index::SeekTable table;
  // By point; empty where the point has no window.
  std::vector<std::string> windows;
  // The largest interval, in decoded bytes.
  uint64_t largest_interval = 0;
  // By point: the interval checksums (IntervalChecksum); empty: none.
  std::vector<uint64_t> checksums;
};

// A decoded stream, in an unnamed temporary file ($TMPDIR, /tmp if unset)
// mapped read-only: data() stays readable until this is destroyed.
class DecodedBytes {
 public:
  DecodedBytes() = default;
  ~DecodedBytes();
  DecodedBytes(const DecodedBytes&) = delete;
  DecodedBytes& operator=(const DecodedBytes&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

  // Takes over `size` bytes mapped read-only at `data` (munmap'd here).
  void Adopt(const char* data, size_t size) {
    data_ = data;
    size_ = size;
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Decodes the compressed stream `data` (`size` bytes, codec `codec`, not
// kNone) into *decoded, recording its seek points, windows and interval
// checksums in *out, with compressed offsets from `data`. `spacing` is the
// gzip point spacing; `name` is used in messages. InvalidArgument naming
// `name` and the compressed byte for corrupt or truncated data, a CRC
// mismatch or trailing garbage, for a stream that decodes to nothing, and
// for one that decodes to more than `max_decoded` bytes (the decode stops
// there).
Status DecodeCompressedTar(const std::string& name, const char* data, size_t size,
                           index::Codec codec, uint64_t spacing, CompressedScan* out,
                           DecodedBytes* decoded, uint64_t max_decoded = UINT64_MAX);

// The codec of the file open at `fd`, from its first bytes (DetectCodec,
// src/archive/format_sniff.h).
Result<index::Codec> DetectCodecFd(const std::string& name, int fd);

// Decodes the compressed tar at `fd` (codec `codec`, not kNone) and scans
// it as ScanTarFd scans a plain tar: info->size, mtime_ns and fingerprint
// are the compressed file's. `spacing` is the gzip point spacing. Returns
// InvalidArgument naming the shard and the compressed byte for corrupt or
// truncated data, a CRC mismatch or trailing garbage.
Status ScanCompressedTarFd(const std::string& name, int fd, index::Codec codec, uint64_t spacing,
                           const ScanOptions& options,
                           const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info,
                           CompressedScan* out);

// The 'Z' keys of shard `id` for `scan`.
std::vector<std::pair<std::string, std::string>> SeekKeys(index::ShardId id,
                                                          const CompressedScan& scan);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_CTAR_SCANNER_H_
