#include "pack/output_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "index/index_files.h"
#include "index/index_reader.h"

namespace shardfs::pack {
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

// An index publish's temporary directory (index.tmp-*, with its ".old"
// aside), or an older shardfs's index.old-*.
bool IsIndexTempName(const std::string& name) {
  return name.starts_with("index.tmp-") || name.starts_with("index.old-");
}

// Which of its own files a directory ListEarlierOutput may accept holds.
index::DirKind IndexDirKind(const std::string& name) {
  return name == "index" ? index::DirKind::kIndex : index::DirKind::kBuild;
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
      pid_t pid = 0;
      // The publish removes it, and says so (index::RemoveStaleBuildDirs).
      if (index::IsStaleBuildDirName(p.filename().string(), "index", &pid)) continue;
      warnings->push_back(
          fmt::format("{}{}: left by an interrupted index publish; kept (--force removes it)",
                      out_shown, p.filename().string()));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ListEarlierOutput(const std::string& out_dir,
                                                   const ShardNamePattern& pattern,
                                                   const std::string& out_shown) {
  std::vector<std::string> names;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out_dir, ec);
  if (!fs::exists(st)) return names;
  if (!fs::is_directory(st)) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a directory; pack --force replaces only an earlier pack output", out_shown));
  }
  // The shards the earlier index names in this directory, whatever their
  // --name was.
  std::set<std::string> listed;
  const std::string index_path = out_dir + "/index";
  const bool has_index = index::IsShardfsIndex(index_path);
  if (has_index) {
    if (auto r = index::IndexReader::Open(index_path); r.ok()) {
      for (size_t i = 0; i < (*r)->shards().size(); ++i) {
        const fs::path p = (*r)->ShardPath(index::ShardId{static_cast<uint32_t>(i)});
        if (p.parent_path().lexically_normal() == fs::path(out_dir)) {
          listed.insert(p.filename().string());
        }
      }
    }
  }
  std::vector<std::string> others;
  for (fs::directory_iterator de(out_dir, ec); !ec && de != fs::directory_iterator();
       de.increment(ec)) {
    const std::string name = de->path().filename().string();
    std::error_code type_ec;
    const bool dir = de->is_directory(type_ec) && !de->is_symlink(type_ec);
    const bool file = de->is_regular_file(type_ec) && !de->is_symlink(type_ec);
    bool ours;
    if ((name == "index" && has_index) || (dir && IsIndexTempName(name))) {
      // Ours only if it holds nothing but what an index build writes: a
      // subdirectory or a file of the user's in it is named, not removed.
      SHARDFS_ASSIGN_OR_RETURN(std::vector<std::string> foreign,
                               index::ForeignEntries(de->path().string(), IndexDirKind(name)));
      for (const std::string& f : foreign) others.push_back(name + "/" + f);
      ours = foreign.empty();
      if (!ours) continue;
    } else {
      ours = file && (listed.contains(name) || pattern.Matches(name, true));
    }
    (ours ? names : others).push_back(dir && !ours ? name + "/" : name);
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", out_dir, ec.message()));
  if (!others.empty()) {
    std::sort(others.begin(), others.end());
    std::string more =
        others.size() > 1
            ? fmt::format(" (nor {})", index::ListNames({others.begin() + 1, others.end()}))
            : "";
    return Status::InvalidArgument(fmt::format(
        "{}{}: not written by shardfs pack{}; pack --force replaces only an earlier pack output "
        "and leaves this directory alone (choose another --out)",
        out_shown, others.front(), more));
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status RemoveEarlierOutput(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::string p = dir + "/" + name;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(p, ec);
    if (!fs::exists(st)) continue;
    if (fs::is_directory(st)) {
      if (name == "index" && !index::IsShardfsIndex(p)) continue;  // Kept: no longer an index.
      if (name != "index" && !IsIndexTempName(name)) continue;     // A file was listed: kept.
      // Its own files only: anything else stays, and so does `dir`, below.
      Result<std::vector<std::string>> left = index::RemoveOwnFiles(p, IndexDirKind(name));
      if (!left.ok()) return left.status();
    } else if (fs::is_regular_file(st)) {
      fs::remove(p, ec);
    }
    if (ec) return Status::IoError(fmt::format("remove {}: {}", p, ec.message()));
  }
  if (::rmdir(dir.c_str()) == 0) return Status::Ok();
  std::vector<std::string> left;
  std::error_code ec;
  for (fs::directory_iterator de(dir, ec); !ec && de != fs::directory_iterator();
       de.increment(ec)) {
    std::error_code type_ec;
    const std::string name = de->path().filename().string();
    left.push_back(de->is_directory(type_ec) && !de->is_symlink(type_ec) ? name + "/" : name);
  }
  std::sort(left.begin(), left.end());
  return Status::IoError(
      fmt::format("{}: holds {}, which no earlier pack wrote (they appeared during the pack); "
                  "kept there",
                  dir, index::ListNames(left)));
}

}  // namespace shardfs::pack
