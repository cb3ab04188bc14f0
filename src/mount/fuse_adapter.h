// The FUSE edge: libfuse3's low-level API on top of Filesystem. The only file
// that includes <fuse_lowlevel.h>. Every operation is a noexcept trampoline
// that answers each request exactly once; its replies carry ToErrno (base/status.h).
#ifndef SHARDFS_SRC_MOUNT_FUSE_ADAPTER_H_
#define SHARDFS_SRC_MOUNT_FUSE_ADAPTER_H_

#include <functional>
#include <string>

#include "base/status.h"
#include "src/mount/mount_options.h"
#include "src/reader/filesystem.h"

namespace shardfs::mount {

// Mounts `fs` at `mountpoint` and serves requests until the filesystem is
// unmounted or the process gets SIGINT, SIGTERM or SIGHUP (then it unmounts
// cleanly). `on_mounted` runs once the mount is in place, before serving; if
// it fails, the mount is undone and its status returned. Returns IoError if
// the session cannot be created or mounted.
Status ServeFuse(reader::Filesystem* fs, const mount::MountOptions& options,
                 const std::string& mountpoint, const std::string& fsname,
                 const std::function<Status()>& on_mounted);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_FUSE_ADAPTER_H_
