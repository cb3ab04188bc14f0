// What the FUSE edge (src/mount/fuse_adapter.cc) builds its replies in, apart from
// libfuse itself (which only fuse_adapter.cc includes): a buffer per worker
// thread for replies made in user space, and a pipe per worker thread that a
// spliced reply is filled into before anything is sent.
//
// Why the pipe. libfuse, given a file descriptor to reply from, sends
// whatever a short splice brought as the whole reply (a network filesystem
// that stops answering mid-read, a shard cut short), which a reader takes for
// the end of the file. Filling the pipe first sees a short read here, where
// the READ can still be answered from a buffer instead: never a short or
// wrong reply.
//
// Thread safety: both are thread_local; each worker uses its own.
#ifndef SHARDFS_SRC_MOUNT_FUSE_REPLY_H_
#define SHARDFS_SRC_MOUNT_FUSE_REPLY_H_

#include <cstddef>
#include <cstdint>

namespace shardfs::mount {

// The calling thread's reply buffer, of at least `size` bytes (kept and
// grown across calls); null if it cannot be had (the request then gets
// ENOMEM).
char* ThreadBuffer(size_t size) noexcept;

// A pipe that a reply's bytes are spliced into before the reply is sent.
class ReplyPipe {
 public:
  ReplyPipe() = default;
  ~ReplyPipe() { Close(); }
  ReplyPipe(const ReplyPipe&) = delete;
  ReplyPipe& operator=(const ReplyPipe&) = delete;

  // Fills the pipe with exactly `length` bytes of `fd` from `pos`. False,
  // with the pipe emptied, if the file gave fewer (an error, or its end) or
  // the pipe cannot hold them.
  bool Fill(int fd, uint64_t pos, size_t length) noexcept;
  // The end a reply reads the bytes Fill put in from. REQUIRES: Fill
  // returned true.
  int read_fd() const { return fds_[0]; }
  // After a reply from read_fd(): a pipe that still holds bytes (the reply
  // failed part way) is closed, so that they never reach another reply.
  void AfterReply() noexcept;

 private:
  bool Ready(size_t length) noexcept;
  void Close() noexcept;

  int fds_[2] = {-1, -1};
  size_t capacity_ = 0;
};

// The calling worker thread's pipe.
ReplyPipe& WorkerPipe() noexcept;

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_FUSE_REPLY_H_
