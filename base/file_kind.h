// What a file that is not a regular file is, for messages ("shard x.tar:
// is a FIFO, expected a regular file"). Every layer that opens a shard
// refuses such files; this is their one wording.
#ifndef SHARDFS_BASE_FILE_KIND_H_
#define SHARDFS_BASE_FILE_KIND_H_

#include <sys/stat.h>

namespace shardfs {

inline const char* FileKind(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFIFO:
      return "is a FIFO";
    case S_IFDIR:
      return "is a directory";
    case S_IFCHR:
      return "is a character device";
    case S_IFBLK:
      return "is a block device";
    case S_IFSOCK:
      return "is a socket";
    case S_IFLNK:
      return "is a symbolic link";
    default:
      return "is not a regular file";
  }
}

}  // namespace shardfs

#endif  // SHARDFS_BASE_FILE_KIND_H_
