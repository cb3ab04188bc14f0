// The directories the kernel has open on a FUSE mount (src/mount/fuse_adapter.cc):
// each an OPENDIR's handle, a cursor streaming the entries from the index,
// so a handle costs the same whatever the directory's size. A handle the
// kernel never released (the daemon stopped while a program or the prefill
// lister had the directory open) is freed by FreeAll once the session loop
// has ended.
//
// Thread safety: Open, Release and FreeAll may be called from any thread;
// the set of handles is guarded by mu_. A handle's cursor by its own mu.
#ifndef SHARDFS_SRC_MOUNT_OPEN_DIRS_H_
#define SHARDFS_SRC_MOUNT_OPEN_DIRS_H_

#include <mutex>
#include <unordered_set>

#include "src/reader/filesystem.h"

namespace shardfs::mount {

// An open directory.
struct DirHandle {
  std::mutex mu;             // readdir calls on one handle may overlap.
  reader::DirCursor cursor;  // Guarded by mu.
  bool prefill = false;      // Opened by DirPrefill's thread: always with attributes.
};

class OpenDirs {
 public:
  OpenDirs() = default;
  ~OpenDirs() { FreeAll(); }
  OpenDirs(const OpenDirs&) = delete;
  OpenDirs& operator=(const OpenDirs&) = delete;

  // A new handle over `cursor`, kept until Release or FreeAll; null if
  // there is no memory for it.
  DirHandle* Open(reader::DirCursor cursor) noexcept;
  // Frees `handle` (the kernel released it, or never got it).
  void Release(DirHandle* handle) noexcept;
  // Frees every handle still open. REQUIRES: no request runs any more.
  void FreeAll() noexcept;

 private:
  std::mutex mu_;
  std::unordered_set<DirHandle*> open_;  // Guarded by mu_.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_OPEN_DIRS_H_
