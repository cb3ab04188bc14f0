#include "tools/output_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace shardfs::tools {
namespace fs = std::filesystem;
namespace {

// What an earlier pack into `out_dir` with this pattern may have left: files
// named like a shard or NAME.tmp (`files`, whoever wrote them) and
// unpublished index directories (`index_tmps`). A missing `out_dir` holds
// nothing.
Status ListLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                     std::vector<fs::path>* files, std::vector<fs::path>* index_tmps) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out_dir, ec))) return Status::Ok();
  for (fs::directory_iterator de(out_dir, ec); !ec && de != fs::directory_iterator();
       de.increment(ec)) {
    std::string name = de->path().filename().string();
    std::error_code type_ec;
    if (pattern.Matches(name, true)) {
      files->push_back(de->path());
    } else if (name.rfind("index.tmp-", 0) == 0 && de->is_directory(type_ec)) {
      index_tmps->push_back(de->path());
    }
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", out_dir, ec.message()));
  std::sort(files->begin(), files->end());
  std::sort(index_tmps->begin(), index_tmps->end());
  return Status::Ok();
}

}  // namespace

Status RefuseLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                       const std::string& out_shown, std::vector<std::string>* warnings) {
  std::vector<fs::path> taken, index_tmps;
  SHARDFS_RETURN_IF_ERROR(ListLeftovers(out_dir, pattern, &taken, &index_tmps));
  if (!taken.empty()) {
    std::string more =
        taken.size() > 1 ? fmt::format(" (and {} more such files)", taken.size() - 1) : "";
    return Status::AlreadyExists(fmt::format(
        "{}{}: already exists and was not written by this pack{}; pack replaces a file named "
        "like a shard only with --force (or choose another --out or --name)",
        out_shown, taken.front().filename().string(), more));
  }
  if (warnings) {
    for (const fs::path& p : index_tmps) {
      warnings->push_back(
          fmt::format("{}{}: left by an interrupted index publish; kept (--force removes it)",
                      out_shown, p.filename().string()));
    }
  }
  return Status::Ok();
}

Status CleanOutput(const std::string& out_dir, const ShardNamePattern& pattern,
                   const std::string& index_path) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(index_path, ec))) {
    fs::remove_all(index_path, ec);
    if (ec) return Status::IoError(fmt::format("remove {}: {}", index_path, ec.message()));
  }
  std::vector<fs::path> stale, index_tmps;
  SHARDFS_RETURN_IF_ERROR(ListLeftovers(out_dir, pattern, &stale, &index_tmps));
  stale.insert(stale.end(), index_tmps.begin(), index_tmps.end());
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) return Status::IoError(fmt::format("remove {}: {}", p.string(), ec.message()));
  }
  return Status::Ok();
}

}  // namespace shardfs::tools
