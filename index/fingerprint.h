// A cheap identity for a shard file, so a mount can tell that a shard was
// replaced after indexing without reading it whole.
#ifndef SHARDFS_INDEX_FINGERPRINT_H_
#define SHARDFS_INDEX_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "base/status.h"

namespace shardfs::index {

// Bytes hashed at each end of the file.
inline constexpr uint64_t kFingerprintSpan = 64 * 1024;

// XXH3-64 over: the first kFingerprintSpan bytes, the last kFingerprintSpan
// bytes (overlapping for small files), and the size as 8 little-endian bytes.
// Reads with pread on `fd`; `size` is the size the caller expects.
// Returns IoError if the reads fail or come up short.
Result<uint64_t> ShardFingerprint(int fd, uint64_t size);

// The same over any reader of the shard's bytes (a remote shard's ranges):
// read_at(buf, len, pos) fills buf with bytes [pos, pos + len).
using ReadAtFn = std::function<Status(char* buf, size_t len, uint64_t pos)>;
Result<uint64_t> ShardFingerprint(uint64_t size, const ReadAtFn& read_at);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_FINGERPRINT_H_
