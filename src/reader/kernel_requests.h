// What the kernel asked the daemon: FUSE requests counted by kind, for
// `shardfs stats` (a file's round trips: how many LOOKUP, OPEN, IOCTL, READ,
// GETATTR, FLUSH, RELEASE it cost). Counted by the FUSE adapter as each
// request arrives, the daemon's own (the prefill lister's listings) included.
//
// Also counted: the threads that ever served a request (`workers`), so that
// stats show whether the daemon's worker pool churns (a pool that ends idle
// workers and starts new ones counts every new one).
//
// Thread safety: Count and Snapshot from any thread; one relaxed atomic add
// per request, each kind on its own cache line.
#ifndef SHARDFS_SRC_READER_KERNEL_REQUESTS_H_
#define SHARDFS_SRC_READER_KERNEL_REQUESTS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shardfs::reader {

enum class KernelOp : uint8_t {
  kLookup,
  kForget,
  kGetattr,
  kReadlink,
  kOpen,
  kRead,
  kIoctl,
  kFlush,
  kRelease,
  kOpendir,
  kReaddir,
  kReaddirplus,
  kReleasedir,
  kStatfs,
  kAccess,
  kXattr,    // getxattr, listxattr.
  kRefused,  // Every write-type request (EROFS).
  kCount,
};

// The name stats print ("lookup", ...).
constexpr const char* KernelOpName(KernelOp op) {
  constexpr const char* kNames[] = {"lookup",  "forget",      "getattr",    "readlink", "open",
                                    "read",    "ioctl",       "flush",      "release",  "opendir",
                                    "readdir", "readdirplus", "releasedir", "statfs",   "access",
                                    "xattr",   "refused"};
  static_assert(std::size(kNames) == static_cast<size_t>(KernelOp::kCount));
  return kNames[static_cast<size_t>(op)];
}

class KernelRequests {
 public:
  static constexpr size_t kKinds = static_cast<size_t>(KernelOp::kCount);

  void Count(KernelOp op) noexcept {
    counts_[static_cast<size_t>(op)].n.fetch_add(1, std::memory_order_relaxed);
    // The last KernelRequests this thread counted for (one per daemon).
    thread_local const KernelRequests* counted_for = nullptr;
    if (counted_for != this) {
      counted_for = this;
      workers_.n.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // The threads that have served a request so far.
  uint64_t workers() const noexcept { return workers_.n.load(std::memory_order_relaxed); }
  std::array<uint64_t, kKinds> Snapshot() const noexcept {
    std::array<uint64_t, kKinds> out;
    for (size_t i = 0; i < kKinds; ++i) out[i] = counts_[i].n.load(std::memory_order_relaxed);
    return out;
  }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> n{0};
  };
  std::array<Counter, kKinds> counts_{};
  Counter workers_;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_KERNEL_REQUESTS_H_
