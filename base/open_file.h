// Opening a file a path names for reading, only if it is a regular file, and
// without opening anything else: a FIFO's open blocks, a device's open can
// have side effects (a tape rewinds, a terminal becomes the controlling one).
// Every path an index names (a shard) is opened this way, by every command.
//
// How: the path is opened with O_PATH (which opens nothing: no open method of
// a driver runs), checked with fstat, and only a regular file is then opened
// for reading, through /proc/self/fd/N, which reopens that very inode.
#ifndef SHARDFS_BASE_OPEN_FILE_H_
#define SHARDFS_BASE_OPEN_FILE_H_

#include <sys/stat.h>

#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace shardfs {

struct OpenFileOptions {
  // O_NOATIME where the caller may use it (the file's owner, or root);
  // quietly without it elsewhere.
  bool noatime = false;
  // With `beneath` set: `path` is relative to the directory `beneath` and
  // must resolve inside it with no symbolic link on the way, the last
  // component included, and no ".." leading out (openat2 RESOLVE_BENEATH |
  // RESOLVE_NO_SYMLINKS). For paths an untrusted index names. NotSupported
  // if the kernel has no openat2 (before 5.6).
  std::string beneath;
};

// Opens `path` read-only (O_CLOEXEC | O_NONBLOCK | O_NOCTTY) if it is a
// regular file; fills *st from the descriptor returned. Errors name `path`
// (or beneath/path): the errno's Status if it cannot be opened;
// InvalidArgument ("is a FIFO, expected a regular file") for anything but a
// regular file, which is never opened for reading.
Result<UniqueFd> OpenRegularFile(const std::string& path, struct stat* st,
                                 const OpenFileOptions& options = {});

}  // namespace shardfs

#endif  // SHARDFS_BASE_OPEN_FILE_H_
