#include "src/mount/fuse_reply.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>

namespace shardfs::mount {

char* ThreadBuffer(size_t size) noexcept {
  // Not zeroed: a worker whose READs are all spliced never touches its
  // pages, so they cost no memory.
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t capacity = 0;
  if (capacity < size || !buf) {
    const size_t want = std::max<size_t>(size, 4096);
    buf.reset(new (std::nothrow) char[want]);
    capacity = buf ? want : 0;
  }
  return buf.get();
}

bool ReplyPipe::Fill(int fd, uint64_t pos, size_t length) noexcept {
  if (!Ready(length)) return false;
  loff_t at = static_cast<loff_t>(pos);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::splice(fd, &at, fds_[1], nullptr, length - done, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Close();  // Whatever is in it must never reach a reply.
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void ReplyPipe::AfterReply() noexcept {
  int left = 0;
  if (fds_[0] >= 0 && (::ioctl(fds_[0], FIONREAD, &left) != 0 || left != 0)) Close();
}

bool ReplyPipe::Ready(size_t length) noexcept {
  if (fds_[0] < 0 && ::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    fds_[0] = fds_[1] = -1;
    return false;
  }
  if (capacity_ < length) {
    int got = ::fcntl(fds_[1], F_SETPIPE_SZ, static_cast<int>(std::max<size_t>(length, 65536)));
    if (got < 0 || static_cast<size_t>(got) < length) return false;
    capacity_ = static_cast<size_t>(got);
  }
  return true;
}

void ReplyPipe::Close() noexcept {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  capacity_ = 0;
}

ReplyPipe& WorkerPipe() noexcept {
  thread_local ReplyPipe pipe;
  return pipe;
}

}  // namespace shardfs::mount
