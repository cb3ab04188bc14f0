#include "src/reader/storage_plan.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "base/storage.h"
#include "src/reader/cache_dir.h"

namespace shardfs::reader {

namespace fs = std::filesystem;

StorageSurvey SurveyStorage(const index::IndexReader& r, const std::string& index_path,
                            StorageMode mode) {
  StorageSurvey out;
  if (mode == StorageMode::kLocal) return out;
  if (mode == StorageMode::kNetwork) {
    out.network = true;
    out.why = "-o storage=network";
    return out;
  }
  auto on_network = [&](const std::string& what, const std::string& path) {
    Result<StorageInfo> info = DetectStorage(path);
    if (!info.ok() || !info->network) return false;
    out.network = true;
    out.why = fmt::format("{} {} on {}", what, path, info->fstype);
    return true;
  };
  if (on_network("index", index_path)) return out;
  std::set<std::string> dirs;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    if (r.shards()[i].remote()) continue;
    const std::string& path = r.ShardPath(index::ShardId{i});
    std::string dir = fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    if (!dirs.insert(dir).second) continue;
    if (on_network("shard", path)) return out;
  }
  return out;
}

std::vector<std::string> DefaultCacheRoots() {
  std::vector<std::string> roots;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') roots.push_back(fmt::format("{}/shardfs", xdg));
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') roots.push_back(fmt::format("{}/.cache/shardfs", home));
  roots.push_back(fmt::format("/var/tmp/shardfs-{}", ::geteuid()));
  return roots;
}

namespace {

// The nearest existing ancestor of `path` (or `path` itself).
fs::path NearestExisting(fs::path path) {
  std::error_code ec;
  while (!fs::exists(path, ec) && path.has_relative_path()) path = path.parent_path();
  return path;
}

}  // namespace

Result<std::string> PickCacheRoot(const std::vector<std::string>& roots) {
  std::string why;
  for (const std::string& root : roots) {
    Result<StorageInfo> info = DetectStorage(NearestExisting(root).string());
    std::string reason;
    if (!info.ok()) {
      reason = fmt::format("{}: {}", root, info.status().message());
    } else if (info->network) {
      reason = fmt::format("{}: on network storage ({})", root, info->fstype);
    } else if (Result<UniqueFd> dir = OpenCacheRoot(root); !dir.ok()) {
      reason = dir.status().message();  // It names the root.
    } else if (::faccessat(dir->get(), ".", W_OK | X_OK, 0) != 0) {
      reason = fmt::format("{}: not writable", root);
    } else {
      return root;
    }
    why += fmt::format("{}{}", why.empty() ? "" : "; ", reason);
  }
  return Status::NotFound(fmt::format("no node-local cache directory: {}", why));
}

uint64_t AutoCacheSize(const std::string& dir, uint64_t max, uint64_t in_use) {
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) != 0) return 0;
  const double free_bytes =
      static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize) + in_use;
  const uint64_t share = static_cast<uint64_t>(free_bytes * kAutoCacheShare);
  const uint64_t size = std::min(share, max);
  return size < kMinAutoCache ? 0 : size;
}

}  // namespace shardfs::reader
