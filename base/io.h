// Whole reads: the pread loop every layer needs, written once.
#ifndef SHARDFS_BASE_IO_H_
#define SHARDFS_BASE_IO_H_

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace shardfs {

// Reads exactly `len` bytes at `pos`, retrying short reads and EINTR. A file
// that ends first is an IoError naming the byte where it ended; callers add
// which file it was with WithContext.
Status PreadExact(int fd, char* buf, size_t len, uint64_t pos);

}  // namespace shardfs

#endif  // SHARDFS_BASE_IO_H_
