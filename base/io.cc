#include "base/io.h"

#include <unistd.h>

#include <cerrno>

namespace shardfs {

Status PreadExact(int fd, char* buf, size_t len, uint64_t pos) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(pos + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, fmt::format("read at byte {}", pos + done));
    }
    if (n == 0) {
      return Status::IoError(fmt::format("file ends at byte {}, expected data up to byte {}",
                                         pos + done, pos + len));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace shardfs
