#include "base/io.h"

#include <sys/socket.h>
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
      return Status::IoError(
          fmt::format("file ends at byte {}, expected data up to byte {}", pos + done, pos + len));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

bool ReadFully(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteFully(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  bool socket = true;
  while (len > 0) {
    ssize_t n = socket ? ::send(fd, p, len, MSG_NOSIGNAL) : ::write(fd, p, len);
    if (n < 0 && socket && errno == ENOTSOCK) {
      socket = false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace shardfs
