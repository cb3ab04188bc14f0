#include "base/paths.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "base/fd.h"

namespace shardfs {
namespace fs = std::filesystem;
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Status RenameFailed(int err, const std::string& from, const std::string& to) {
  return Status::FromErrno(err, fmt::format("rename {} to {}", from, to));
}

}  // namespace

Status RenameToMissing(const std::string& fresh, const std::string& target) {
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) {
    return Status::Ok();
  }
  if (errno != EINVAL && errno != ENOSYS) return RenameFailed(errno, fresh, target);
  if (::rename(fresh.c_str(), target.c_str()) != 0) return RenameFailed(errno, fresh, target);
  return Status::Ok();
}

Result<std::string> ResolvePath(const std::string& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (!ec) abs = fs::weakly_canonical(abs, ec);
  if (ec) return Status::IoError(fmt::format("{}: {}", path, ec.message()));
  std::string out = abs.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

bool PathWithin(std::string_view inner, std::string_view outer) {
  while (outer.size() > 1 && outer.back() == '/') outer.remove_suffix(1);
  if (!inner.starts_with(outer)) return false;
  if (inner.size() == outer.size() || outer == "/") return true;
  return inner[outer.size()] == '/';
}

bool IsEmptyDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(path, ec)) && fs::is_empty(path, ec) && !ec;
}

Status SyncPath(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, path);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, fmt::format("fsync {}", path));
  return Status::Ok();
}

Result<Replaced> ReplaceDirectory(const std::string& fresh, const std::string& target) {
  Replaced r;
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    r.old_path = fresh;
  } else if (errno == ENOENT && Exists(fresh) && !Exists(target)) {
    SHARDFS_RETURN_IF_ERROR(RenameToMissing(fresh, target));
  } else if (errno == EINVAL || errno == ENOSYS) {
    // This filesystem (or kernel) cannot swap two names in one step: fall
    // back to two renames, with a moment in which `target` does not exist.
    return ReplaceDirectoryByRenames(fresh, target);
  } else {
    return Status::FromErrno(errno, fmt::format("exchange {} with {}", fresh, target));
  }
  return r;
}

Result<Replaced> ReplaceDirectoryByRenames(const std::string& fresh, const std::string& target) {
  Replaced r;
  r.atomic = false;
  if (!Exists(target)) {
    SHARDFS_RETURN_IF_ERROR(RenameToMissing(fresh, target));
  } else {
    const std::string aside = fresh + ".old";
    SHARDFS_RETURN_IF_ERROR(RenameToMissing(target, aside));
    if (::rename(fresh.c_str(), target.c_str()) != 0) {
      const int err = errno;
      ::rename(aside.c_str(), target.c_str());  // Puts the old one back.
      return RenameFailed(err, fresh, target);
    }
    r.old_path = aside;
  }
  return r;
}

}  // namespace shardfs
