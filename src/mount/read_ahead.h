// The kernel's readahead for a FUSE mount: read_ahead_kb of the mount's
// backing device info, /sys/class/bdi/MAJOR:MINOR/read_ahead_kb.
//
// A FUSE mount starts with the kernel's default window (128 KiB), and FUSE's
// INIT can only lower it (the kernel takes the smaller of its window and
// the daemon's max_readahead). So a 150 KB sample read with a 256 KiB buffer
// costs two READs: 128 KiB, then the rest. Raised after INIT, the window
// lets the first read of a file ask for it whole (up to the largest READ,
// 1 MiB with libfuse's default buffer), in one round trip. Only root may
// write the file.
//
// The device comes from /proc/self/mountinfo, not from a stat of the
// mountpoint: the daemon must not send requests to its own mount.
#ifndef SHARDFS_SRC_MOUNT_READ_AHEAD_H_
#define SHARDFS_SRC_MOUNT_READ_AHEAD_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace shardfs::mount {

// The window the mount asks for, in KiB: the largest READ.
inline constexpr uint64_t kMountReadAheadKb = 1024;

// "MAJOR:MINOR" of the newest FUSE mount at `mountpoint` (a resolved
// absolute path) in `mountinfo` (the text of /proc/self/mountinfo). NotFound
// if there is none.
Result<std::string> FindFuseMountDevice(std::string_view mountinfo, std::string_view mountpoint);

// Raises `bdi_dir`/DEVICE/read_ahead_kb to at least `kb` for the FUSE mount
// at `mountpoint` (its device found in `mountinfo_path`). Returns the window
// now in effect in KiB (unchanged if it was already as large), or an error
// naming the file (EACCES, EPERM or EROFS when not root).
Result<uint64_t> RaiseMountReadAhead(const std::string& mountpoint, uint64_t kb,
                                     const std::string& mountinfo_path = "/proc/self/mountinfo",
                                     const std::string& bdi_dir = "/sys/class/bdi");

// The mount's window raised once, on the first request after INIT (INIT
// itself must be answered first: the mount is not in mountinfo before).
// Thread safety: Arm and RaiseIfArmed may be called from any thread;
// set_mount_path before the session starts.
class MountReadAheadOnce {
 public:
  // The mountpoint with its links resolved, as /proc/self/mountinfo shows it.
  void set_mount_path(std::string path) { mount_path_ = std::move(path); }
  // At INIT: the next RaiseIfArmed raises the window.
  void Arm() { armed_.store(true, std::memory_order_release); }
  // On each request: after Arm, the first call raises read_ahead_kb to
  // kMountReadAheadKb (root only; one line in the log when it cannot be);
  // every other call returns at once.
  void RaiseIfArmed() noexcept;

 private:
  std::string mount_path_;
  std::atomic<bool> armed_{false};
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_READ_AHEAD_H_
