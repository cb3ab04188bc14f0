#include "tools/pack/output_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include "base/paths.h"
#include "index/index_files.h"
#include "index/index_reader.h"
#include "tools/builder/view_export.h"  // WriteFileAtomically

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

std::string RecordPath(const std::string& dir) { return dir + "/" + std::string(kPackRecordName); }

// The files an interrupted pack's record at `path` lists, with their
// NAME.tmp names, into `written`.
void ReadPackRecord(const std::string& path, std::set<std::string>* written) {
  std::ifstream in(path);
  for (std::string name; std::getline(in, name);) {
    if (name.empty()) continue;
    written->insert(name + ".tmp");
    written->insert(std::move(name));
  }
}

// Why the shardfs index at `index_path` is no record of a pack's shards, or
// "" if it is one: then `written` gets the shards it lists in `out_dir`.
std::string ReadPackIndex(const std::string& index_path, const std::string& out_dir,
                          std::set<std::string>* written) {
  Result<std::unique_ptr<index::IndexReader>> r = index::IndexReader::Open(index_path);
  if (!r.ok()) return fmt::format("cannot be read to tell who made it ({})", r.status().message());
  const std::string maker = (*r)->Meta(index::kMetaCreatedBy);
  if (maker.empty()) return "records no maker";
  if (maker != kPackCreatedBy) return fmt::format("was made by {}, not by shardfs pack", maker);
  // `index add` appends shards a pack did not write, as default@2 and on
  // (a default version cannot be removed).
  if ((*r)->version().version != 1) {
    return fmt::format("was made by shardfs pack, then changed by shardfs index add ({})",
                       (*r)->version().label());
  }
  for (size_t i = 0; i < (*r)->shards().size(); ++i) {
    const fs::path p = (*r)->ShardPath(index::ShardId{static_cast<uint32_t>(i)});
    if (p.parent_path().lexically_normal() == fs::path(out_dir)) {
      written->insert(p.filename().string());
    }
  }
  return "";
}

}  // namespace

Status WritePackRecord(const std::string& dir, const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += name + "\n";
  SHARDFS_RETURN_IF_ERROR(builder::WriteFileAtomically(RecordPath(dir), text));
  return SyncPath(dir);
}

Status RemovePackRecord(const std::string& dir) {
  const std::string path = RecordPath(dir);
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  return Status::FromErrno(errno, fmt::format("remove {}", path));
}

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
  std::error_code ec;
  if (fs::exists(fs::symlink_status(RecordPath(out_dir), ec))) {
    return Status::AlreadyExists(
        fmt::format("{}{}: left by an interrupted pack; pack replaces its output only with "
                    "--force (or choose another --out)",
                    out_shown, kPackRecordName));
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
                                                   const std::string& out_shown) {
  std::vector<std::string> names;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out_dir, ec);
  if (!fs::exists(st)) return names;
  if (!fs::is_directory(st)) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a directory; pack --force replaces only an earlier pack output", out_shown));
  }
  // The files a pack's own records say it wrote here (whatever their
  // --name was); a name alone proves nothing.
  std::set<std::string> written;
  const std::string record_path = RecordPath(out_dir);
  const bool has_record = fs::is_regular_file(fs::symlink_status(record_path, ec));
  if (has_record) ReadPackRecord(record_path, &written);
  const std::string index_path = out_dir + "/index";
  const bool has_index = index::IsShardfsIndex(index_path);
  const std::string not_pack_index =
      has_index ? ReadPackIndex(index_path, out_dir, &written) : std::string();
  std::vector<std::string> others;
  for (fs::directory_iterator de(out_dir, ec); !ec && de != fs::directory_iterator();
       de.increment(ec)) {
    const std::string name = de->path().filename().string();
    std::error_code type_ec;
    const bool dir = de->is_directory(type_ec) && !de->is_symlink(type_ec);
    const bool file = de->is_regular_file(type_ec) && !de->is_symlink(type_ec);
    if (name == "index" && has_index && !not_pack_index.empty()) continue;  // Named below.
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
      ours = file && (written.contains(name) || (has_record && name == kPackRecordName));
    }
    (ours ? names : others).push_back(dir && !ours ? name + "/" : name);
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", out_dir, ec.message()));
  if (!others.empty() || !not_pack_index.empty()) {
    constexpr std::string_view kRefusal =
        "pack --force replaces only an earlier pack output and leaves this directory alone "
        "(remove the old output by hand, or choose another --out)";
    const std::string index_why =
        not_pack_index.empty() ? "" : fmt::format("{}index {}", out_shown, not_pack_index);
    if (others.empty()) return Status::InvalidArgument(fmt::format("{}; {}", index_why, kRefusal));
    std::sort(others.begin(), others.end());
    std::string more =
        others.size() > 1
            ? fmt::format(" (nor {})", index::ListNames({others.begin() + 1, others.end()}))
            : "";
    return Status::InvalidArgument(
        fmt::format("{}{}: not written by shardfs pack{}{}; {}", out_shown, others.front(), more,
                    index_why.empty() ? "" : ", and " + index_why, kRefusal));
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
