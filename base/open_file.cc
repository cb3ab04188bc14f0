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

FileStamp FileStamp::Of(const struct stat& st) {
  auto ns = [](const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_size), ns(st.st_mtim), ns(st.st_ctim)};
}

Status CheckStamp(int fd, const FileStamp& was, int64_t* ctime_ns) {
  *ctime_ns = 0;
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat");
  const FileStamp now = FileStamp::Of(st);
  if (now == was) return Status::Ok();
  std::string what;
  if (now.dev != was.dev || now.ino != was.ino) {
    what = "another file";
  } else if (now.size != was.size) {
    what = fmt::format("size {} bytes, {} when checked", now.size, was.size);
  } else if (now.mtime_ns != was.mtime_ns) {
    what = fmt::format("modified at {} ns, {} when checked", now.mtime_ns, was.mtime_ns);
  } else {
    *ctime_ns = now.ctime_ns;
    return Status::Ok();
  }
  return Status::Corruption(fmt::format("changed since it was checked: {}", what));
}

}  // namespace shardfs
