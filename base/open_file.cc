#include "base/open_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "base/file_kind.h"

namespace shardfs {

namespace {

// The O_PATH descriptor of what `options` and `path` name.
Result<UniqueFd> OpenPath(const std::string& path, const OpenFileOptions& options,
                          const std::string& shown) {
  if (options.beneath.empty()) {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, shown);
    return fd;
  }
  UniqueFd dir(::open(options.beneath.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno(errno, options.beneath);
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, dir.get(), path.c_str(), &how, sizeof how);
  if (fd >= 0) return UniqueFd(static_cast<int>(fd));
  int err = errno;
  if (err == ENOSYS) {
    return Status::NotSupported(
        fmt::format("{}: the kernel cannot confine the path to its directory (no openat2)", shown));
  }
  if (err == ELOOP || err == EXDEV) {
    return Status::InvalidArgument(
        fmt::format("{}: leads through a symbolic link or out of {}, which is not allowed here",
                    shown, options.beneath));
  }
  return Status::FromErrno(err, shown);
}

}  // namespace

Result<UniqueFd> OpenRegularFile(const std::string& path, struct stat* st,
                                 const OpenFileOptions& options) {
  const std::string shown =
      options.beneath.empty() ? path : fmt::format("{}/{}", options.beneath, path);
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd at, OpenPath(path, options, shown));
  if (::fstat(at.get(), st) != 0) return Status::FromErrno(errno, shown);
  if (!S_ISREG(st->st_mode)) {
    return Status::InvalidArgument(
        fmt::format("{}: {}, expected a regular file", shown, FileKind(st->st_mode)));
  }
  // The same inode, opened for reading now that it is known to be a file.
  const std::string self = fmt::format("/proc/self/fd/{}", at.get());
  constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  int fd = ::open(self.c_str(), kFlags | (options.noatime ? O_NOATIME : 0));
  if (fd < 0 && errno == EPERM && options.noatime) fd = ::open(self.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT && ::access("/proc/self/fd", F_OK) != 0) {
    return Status::NotSupported(
        fmt::format("{}: /proc is not mounted, and a shard is only opened through it", shown));
  }
  if (fd < 0) return Status::FromErrno(errno, shown);
  UniqueFd file(fd);
  struct stat now;
  if (::fstat(file.get(), &now) != 0) return Status::FromErrno(errno, shown);
  if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
    return Status::IoError(fmt::format("{}: changed while opened", shown));
  }
  *st = now;
  return file;
}

}  // namespace shardfs
