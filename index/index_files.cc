#include "index/index_files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <system_error>

#include "base/log.h"
#include "base/temp_dirs.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

bool Digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool IsRocksDbFileName(std::string_view n) {
  if (n == "CURRENT" || n == "IDENTITY" || n == "LOCK" || n == "LOG") return true;
  if (n.starts_with("LOG.old.")) return Digits(n.substr(8));
  if (n.starts_with("MANIFEST-")) return Digits(n.substr(9));
  if (n.starts_with("OPTIONS-")) {
    std::string_view number = n.substr(8);
    if (number.ends_with(".dbtmp")) number.remove_suffix(6);
    return Digits(number);
  }
  const size_t dot = n.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view ext = n.substr(dot + 1);
  return Digits(n.substr(0, dot)) &&
         (ext == "sst" || ext == "log" || ext == "blob" || ext == "ldb" || ext == "dbtmp");
}

// A spill run of index/bounded_build.cc: PREFIX-N or PREFIX-merge-N, PREFIX
// "members-K" (one per scanning thread), "dirents", "inodes" or "dir-inodes";
// merges of the members' runs are "members-merge-N".
bool IsRunFileName(std::string_view n) {
  for (std::string_view prefix : {"members-", "dirents-", "inodes-", "dir-inodes-"}) {
    if (!n.starts_with(prefix)) continue;
    std::string_view rest = n.substr(prefix.size());
    if (rest.starts_with("merge-")) return Digits(rest.substr(6));
    if (prefix == "members-") {
      const size_t dash = rest.find('-');
      return dash != std::string_view::npos && Digits(rest.substr(0, dash)) &&
             Digits(rest.substr(dash + 1));
    }
    return Digits(rest);
  }
  return false;
}

}  // namespace

bool IsOwnFileName(std::string_view name, DirKind kind) {
  if (IsRocksDbFileName(name)) return true;
  if (name.starts_with(kEditTempPrefix) && name.ends_with(".sst")) return true;
  if (kind == DirKind::kIndex) return false;
  // index_publish.h's table parts before their ingest (dirents.sst, ...).
  if (name.ends_with(".sst")) {
    const std::string_view stem = name.substr(0, name.size() - 4);
    if (!stem.empty() && std::all_of(stem.begin(), stem.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
        })) {
      return true;
    }
  }
  return IsRunFileName(name);
}

Result<std::vector<std::string>> ForeignEntries(const std::string& dir, DirKind kind) {
  std::vector<std::string> foreign;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    const fs::file_status st = it->symlink_status(type_ec);
    if (fs::is_regular_file(st) && IsOwnFileName(name, kind)) continue;
    foreign.push_back(fs::is_directory(st) ? name + "/" : name);
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", dir, ec.message()));
  std::sort(foreign.begin(), foreign.end());
  return foreign;
}

Result<std::vector<std::string>> RemoveOwnFiles(const std::string& dir, DirKind kind) {
  std::vector<fs::path> own;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code type_ec;
    if (fs::is_regular_file(it->symlink_status(type_ec)) &&
        IsOwnFileName(it->path().filename().string(), kind)) {
      own.push_back(it->path());
    }
  }
  if (ec == std::errc::no_such_file_or_directory) return std::vector<std::string>();
  if (ec) return Status::IoError(fmt::format("{}: {}", dir, ec.message()));
  for (const fs::path& p : own) {
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno(errno, fmt::format("remove {}", p.string()));
    }
  }
  SHARDFS_ASSIGN_OR_RETURN(std::vector<std::string> left, ForeignEntries(dir, kind));
  if (left.empty() && ::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    if (errno != ENOTEMPTY && errno != EEXIST) return Status::FromErrno(errno, "remove " + dir);
    return ForeignEntries(dir, kind);  // Something appeared meanwhile.
  }
  return left;
}

void RemoveBuildDir(const std::string& dir) {
  Result<std::vector<std::string>> left = RemoveOwnFiles(dir, DirKind::kBuild);
  if (!left.ok()) {
    log::Warning("{}: cannot remove the build's temporary files: {}", dir, left.status().message());
  } else if (!left->empty()) {
    log::Warning("{}: kept: it holds {}, which shardfs did not write", dir, ListNames(*left));
  }
  ForgetTempDir(dir);
}

std::string ListNames(const std::vector<std::string>& names, size_t max) {
  std::string out;
  const size_t shown = std::min(names.size(), max);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == shown && shown == names.size()) ? " and " : ", ";
    out += names[i];
  }
  if (shown < names.size()) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

bool IsStaleBuildDirName(std::string_view name, std::string_view out_name, pid_t* pid) {
  const std::optional<TempDirMaker> maker = ParseTempDirName(name, out_name);
  if (!maker || maker->host != TempHostName() || maker->pid == ::getpid() ||
      !ProcessGone(maker->pid)) {
    return false;
  }
  *pid = maker->pid;
  return true;
}

void RemoveStaleBuildDirs(const fs::path& out_abs) {
  const fs::path parent = out_abs.parent_path();
  const std::string out_name = out_abs.filename().string();
  std::vector<std::pair<fs::path, pid_t>> stale;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    pid_t pid = 0;
    if (!IsStaleBuildDirName(it->path().filename().string(), out_name, &pid)) continue;
    std::error_code type_ec;
    if (fs::is_directory(it->symlink_status(type_ec))) stale.emplace_back(it->path(), pid);
  }
  for (const auto& [dir, pid] : stale) {
    Result<std::vector<std::string>> left = RemoveOwnFiles(dir.string(), DirKind::kBuild);
    if (!left.ok()) {
      log::Warning("{}: left by process {} of this host, which is gone; cannot remove it: {}",
                   dir.string(), pid, left.status().message());
    } else if (!left->empty()) {
      log::Warning(
          "{}: left by process {} of this host, which is gone; its build files are removed, "
          "the rest kept: {}",
          dir.string(), pid, ListNames(*left));
    } else {
      log::Warning("{}: removed: left by process {} of this host, which is gone", dir.string(),
                   pid);
    }
  }
}

}  // namespace shardfs::index
