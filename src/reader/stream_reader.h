// Reads of compressed tar shards (.tar.gz, .tar.zst, .tar.xz, .tar.bz2): a file's
// bytes are a range of the shard's DECODED stream (index/schema.h,
// "Compressed tar shards"). A read at decoded offset X decodes the one
// interval that holds X, from the seek point at or before it, through the
// mount's DecodedCache (key: shard, point number), so many readers of one
// interval decode it once and a random read costs at most one interval's
// decode. The compressed bytes are read through the shard's handle
// (ShardHandle::ReadAt: a local pread, or the chunked reader for a remote
// shard or a cache_dir), so decoding sits above the chunk cache.
//
// Where the index has interval checksums, every decode is checked against
// its interval's: data that decodes but differs gives Corruption (EIO).
//
// A read that names its file (FileSpan), where the file lies within one
// interval and the index has its checksum, decodes less on a miss: only
// from the seek point to the file's end (for gzip, zstd and xz; on average
// half an interval), and the file's bytes are checked against its own
// checksum instead of the interval's, on every read served from such a
// prefix. The prefix is cached under the interval's key; a later read that
// needs more of the interval decodes a longer one, which replaces it. So a
// random read of a small file costs at most the decode up to its own end.
//
// An interval longer than kMaxIntervalBytes (a single zstd frame or xz
// block of a large tar) is not decoded: such reads fail (EIO), with one
// warning per shard that says to re-pack it into frames.
//
// Thread safety: every method may be called from any thread; the tables
// loaded so far are guarded by mu_, and immutable once loaded.
#ifndef SHARDFS_SRC_READER_STREAM_READER_H_
#define SHARDFS_SRC_READER_STREAM_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "src/reader/decoded_cache.h"
#include "src/reader/shard_files.h"

namespace shardfs::reader {

// The file a read is part of, in the decoded stream: its bytes are
// [start, start + size), and `xxh3` their XXH3-64 where `has_checksum`.
struct FileSpan {
  uint64_t start = 0;
  uint64_t size = 0;
  uint64_t xxh3 = 0;
  bool has_checksum = false;
};

// What the reads of compressed tar shards decoded, since the mount.
struct StreamStats {
  uint64_t whole = 0;          // Intervals decoded whole.
  uint64_t prefixes = 0;       // Intervals decoded up to a file's end.
  uint64_t bytes = 0;          // Bytes the two made.
  uint64_t files_checked = 0;  // Reads served from a prefix, each checked against its file.
};

class StreamReader {
 public:
  // `reader` and `cache` must outlive this; `cache` may be null (every read
  // then decodes its interval).
  StreamReader(const index::IndexReader& reader, DecodedCache* cache);

  // Reads `len` bytes at decoded offset `pos` of compressed shard `id`,
  // opened as `shard`, into `buf`. Corruption naming the shard and the
  // compressed offset for data that does not decode (truncated, corrupt, a
  // seek table that does not fit the shard or whose interval spans more
  // than codec::kMaxIntervalInputBytes compressed bytes: checked before
  // any is read); IoError for an interval
  // beyond the bound above, or a failed read of the shard.
  // `file`, if not null, is the file the bytes belong to (see above).
  Status Read(index::ShardId id, const ShardHandle& shard, uint64_t pos, size_t len, char* buf,
              const FileSpan* file);

  StreamStats stats() const;

 private:
  struct Table {
    index::SeekTable table;
    std::vector<uint64_t> checksums;  // By point; empty: the index has none.
    std::string name;                 // The shard, as messages name it.
    mutable std::atomic<bool> warned{false};
  };
  Result<std::shared_ptr<const Table>> GetTable(index::ShardId id);
  // Decodes the first `prefix` bytes of interval `point` (all of it if the
  // interval is no longer), checked against the interval's checksum when
  // whole.
  Result<std::string> Decode(index::ShardId id, const Table& t, size_t point, uint64_t prefix,
                             const ShardHandle& shard);

  const index::IndexReader& reader_;
  DecodedCache* const cache_;
  std::atomic<uint64_t> whole_{0}, prefixes_{0}, bytes_{0}, files_checked_{0};
  std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<uint32_t, std::shared_ptr<const Table>> tables_;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_STREAM_READER_H_
