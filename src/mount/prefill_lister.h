// The process that lists directories of a mount for DirPrefill.
//
// A listing of the mount is a request to the daemon itself. Made from one
// of the daemon's own threads, it is a hazard when the daemon is killed
// (SIGKILL, the OOM killer): once the kernel has handed the READDIRPLUS to
// the daemon, the listing thread waits for the answer uninterruptibly, it
// keeps the daemon's descriptor table alive, the /dev/fuse descriptor in it
// is never closed, and the connection never ends: the process and every
// reader of the mount hang until someone aborts the connection by hand.
//
// So the listings run in a child process: `shardfs` itself, executed with
// the hidden first argument kPrefillListerArg. It holds no /dev/fuse
// descriptor (all but its socket and stderr are closed at exec), so when the daemon
// dies the connection ends and any listing under way fails with ENOTCONN; the
// lister then sees its parent gone (PR_SET_PDEATHSIG) or its socket closed, and
// exits.
//
// The protocol, on a socket pair (the child's stdin and stdout), native
// byte order:
//   child -> parent at start: Reply{error, st_dev of the mount's root}
//     (error kNotMountRoot if the mountpoint is not a FUSE mount's root)
//   parent -> child: uint32 length, then the directory's path (relative to
//     the mountpoint, empty for the root, no NUL)
//   child -> parent: Reply{error, entries listed}; error kNotOnMount if the
//     path is on another filesystem (something mounted over it)
#ifndef SHARDFS_SRC_MOUNT_PREFILL_LISTER_H_
#define SHARDFS_SRC_MOUNT_PREFILL_LISTER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace shardfs::mount {

inline constexpr char kPrefillListerArg[] = "__prefill-lister";

// Runs the child's loop: argv = {shardfs, kPrefillListerArg, MOUNTPOINT}.
// Returns the process's exit status.
int RunPrefillLister(int argc, char** argv);

// The daemon's side: starts the child on first use and talks to it. Every
// wait is bounded (kReplyTimeoutMs); a child that does not answer in time is
// killed, and the next call starts another.
//
// Thread safety: none; DirPrefill's thread alone uses it.
class PrefillLister {
 public:
  static constexpr int kReplyTimeoutMs = 60'000;

  explicit PrefillLister(std::string mountpoint) : mountpoint_(std::move(mountpoint)) {}
  // Ends the child: closes its pipe, waits up to a second, then kills it.
  ~PrefillLister();
  PrefillLister(const PrefillLister&) = delete;
  PrefillLister& operator=(const PrefillLister&) = delete;

  // Lists `rel` (relative to the mountpoint; empty for the root) to the end;
  // sets `*entries` to the number of entries read. NotSupported if the
  // mountpoint is not a FUSE mount's root or `rel` is not on it.
  Status List(const std::string& rel, uint64_t* entries);

  // The child's process id (its only thread's id), 0 if none runs: requests
  // from it are the prefill's.
  pid_t pid() const { return pid_.load(std::memory_order_acquire); }

 private:
  Status Start();
  void Kill();
  // Reads exactly `size` bytes from the child within the timeout.
  Status ReadReply(void* buf, size_t size);

  const std::string mountpoint_;
  std::atomic<pid_t> pid_{0};  // Read by request workers (DirPrefill::IsListingThread).
  int fd_ = -1;  // Our end of the socket pair; the child has the other as stdin and stdout.
  bool not_mount_root_ = false;  // Said once: the mountpoint is not ours.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_PREFILL_LISTER_H_
