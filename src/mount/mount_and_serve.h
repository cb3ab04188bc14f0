// The mount's sequence, for a frontend that has parsed its command line:
// check the mountpoint, resolve the index (a URL or bundle fetched first),
// mount it with the kernel's EROFS driver or with FUSE, and serve until
// unmounted; and the unmount.
//
// Without `foreground` the process forks: the child mounts and serves,
// detached, the parent waits until the mount is in place (or has failed) and
// returns 0 (or the child's failure), so scripts may use the mountpoint as
// soon as the command returns.
#ifndef SHARDFS_SRC_MOUNT_MOUNT_AND_SERVE_H_
#define SHARDFS_SRC_MOUNT_MOUNT_AND_SERVE_H_

#include <string>

#include "src/indexref/index_ref.h"
#include "src/mount/mount_options.h"

namespace shardfs::mount {

// What to mount where, and how.
struct MountArgs {
  bool foreground = false;
  bool check = false;
  bool allow_missing = false;
  // The local index (or manifest) to open, and what messages name: the
  // argument (a URL redacted). `ref` holds a fetched copy in use.
  std::string index;
  std::string shown;
  indexref::IndexRef ref;
  std::string mountpoint;
  MountOptions options;
};

// Mounts `a.index` at `a.mountpoint` as `a.options` say and serves it.
// Returns an exit status: 0 once mounted (in the foreground: once served
// and unmounted), 1 after logging why not.
int Mount(MountArgs a);

// Unmounts `mountpoint`: a kernel mount with umount2, a FUSE one with
// `fusermount3 -u`, each tried again while busy for a few seconds. Returns
// 0, or 1 after logging why not.
int Unmount(const std::string& mountpoint);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_MOUNT_AND_SERVE_H_
