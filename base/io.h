// Whole reads and writes: the loops every layer needs, written once.
#ifndef SHARDFS_BASE_IO_H_
#define SHARDFS_BASE_IO_H_

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace shardfs {

// The buffer of a pass over a whole file (copy, checksum, compare).
inline constexpr size_t kIoChunk = size_t{1} << 20;

// Nanoseconds per second, for the index's mtimes (int64 ns since the epoch).
inline constexpr int64_t kNanosPerSecond = 1000000000;

// Reads exactly `len` bytes at `pos`, retrying short reads and EINTR. A file
// that ends first is an IoError naming the byte where it ended; callers add
// which file it was with WithContext.
Status PreadExact(int fd, char* buf, size_t len, uint64_t pos);

// Reads exactly `len` bytes from a pipe or socket, retrying short reads and
// EINTR; false at end of file or on an error (errno says which, 0 at EOF).
bool ReadFully(int fd, void* buf, size_t len);

// Writes all `len` bytes, retrying short writes and EINTR; false on an
// error (errno). A socket whose peer is gone is an error (EPIPE), never a
// SIGPIPE.
bool WriteFully(int fd, const void* buf, size_t len);

}  // namespace shardfs

#endif  // SHARDFS_BASE_IO_H_
