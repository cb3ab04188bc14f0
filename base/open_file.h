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

#include <cstdint>
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

// What says that an open file is still the bytes it was: its inode, size,
// mtime and ctime. Writing the file changes its mtime and ctime; setting the
// mtime back (utime) changes the ctime again, which no call can set back; a
// rename of another file over the path leaves the open descriptor's inode
// as it was. So a reader that takes a stamp when it checks a file and
// compares it, on the same descriptor, before each use (one fstat) sees
// every write since the check: as a new size or mtime, or as a ctime alone.
// A ctime alone also moves for a chmod, a chown, a new hard link or an
// unlink (a shard deleted while open still holds its bytes): such a file is
// to be checked again, not refused.
struct FileStamp {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  static FileStamp Of(const struct stat& st);
  bool operator==(const FileStamp&) const = default;
};

// Compares open file `fd` with stamp `was` (one fstat). Ok with *ctime_ns
// left 0 if nothing moved; Ok with *ctime_ns set to the file's ctime now if
// only the ctime moved (check the file again, then take that ctime as the
// stamp's); Corruption saying what differs if the size or mtime did (the
// file was written or truncated), for the caller to name the file
// (Status::WithContext); the errno's Status if fstat fails. Allocates
// nothing unless it fails.
Status CheckStamp(int fd, const FileStamp& was, int64_t* ctime_ns);

}  // namespace shardfs

#endif  // SHARDFS_BASE_OPEN_FILE_H_
