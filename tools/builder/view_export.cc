#include "tools/builder/view_export.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/fd.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/strings.h"
#include "index/index_reader.h"
#include "tools/builder/view_diff.h"

namespace shardfs::builder {
namespace {

using index::EntryRecord;
using index::EntryType;
using index::IndexReader;
using index::InodeId;

// A file of the view still looking for its tar path.
struct WantedFile {
  uint64_t inode = 0;
  uint32_t shard = 0;
  uint64_t offset = 0;
  bool found = false;
};

Result<std::unique_ptr<IndexReader>> OpenView(const std::string& index_path,
                                              const std::string& spec,
                                              const index::PartitionResolver& resolve) {
  index::ReaderOptions options;
  options.view = spec;
  options.resolve_partition = resolve;
  auto reader = IndexReader::Open(index_path, options);
  // Open's messages name the index, and the view when it is the problem.
  if (reader.ok() || spec.empty() || reader.status().message().find(spec) != std::string::npos) {
    return reader;
  }
  return reader.status().WithContext(fmt::format("view {}", spec));
}

// Gives each wanted file still unfound the paths it has in `reader` (a
// version of default) at the same shard and offset.
Status TakeTarPaths(const IndexReader& reader, std::vector<WantedFile>* wanted,
                    std::vector<ShardFile>* files) {
  std::vector<size_t> hit;  // Entries of *wanted found in this version.
  SHARDFS_RETURN_IF_ERROR(WalkTree(reader, [&](std::string_view prefix, std::string_view name,
                                               const EntryRecord& e) {
    if (e.type != EntryType::kFile) return Status::Ok();
    auto it = std::lower_bound(wanted->begin(), wanted->end(), e.inode.value,
                               [](const WantedFile& w, uint64_t inode) { return w.inode < inode; });
    if (it == wanted->end() || it->inode != e.inode.value || it->found) return Status::Ok();
    if (it->shard != e.shard.value || it->offset != e.offset) return Status::Ok();
    files->push_back({it->shard, it->offset, fmt::format("{}{}", prefix, name)});
    hit.push_back(static_cast<size_t>(it - wanted->begin()));
    return Status::Ok();
  }));
  // Marked after the walk: a hard link's every path in this version counts.
  for (size_t k : hit) (*wanted)[k].found = true;
  return Status::Ok();
}

// N of "default@N", 0 if `name` is not one.
uint64_t DefaultVersion(std::string_view name) {
  constexpr std::string_view kPrefix = "default@";
  if (!name.starts_with(kPrefix)) return 0;
  name.remove_prefix(kPrefix.size());
  return ParseDecimal(name).value_or(0);
}

}  // namespace

std::string SampleKey(std::string_view path) {
  size_t base = path.rfind('/');
  base = base == std::string_view::npos ? 0 : base + 1;
  size_t stem = path.find_first_not_of('.', base);
  if (stem == std::string_view::npos) return std::string(path);
  size_t dot = path.find('.', stem);
  return std::string(path.substr(0, dot));
}

std::vector<ExportShard> GroupKeys(std::vector<ShardFile> files) {
  std::sort(files.begin(), files.end(), [](const ShardFile& x, const ShardFile& y) {
    if (x.shard != y.shard) return x.shard < y.shard;
    if (x.offset != y.offset) return x.offset < y.offset;
    return x.tar_path < y.tar_path;
  });
  std::vector<ExportShard> out;
  std::unordered_set<std::string> seen;
  for (const auto& f : files) {
    if (out.empty() || out.back().shard_id != f.shard) {
      out.push_back({f.shard, "", {}});
      seen.clear();
    }
    std::string key = SampleKey(f.tar_path);
    if (seen.insert(key).second) out.back().keys.push_back(std::move(key));
  }
  return out;
}

namespace {

// A slice shard (a compressed tar inside a shard: index/schema.h) names its
// shard's file: the file is listed once, at its first place, with the keys
// of all of them.
void MergeSlices(std::vector<ExportShard>* shards) {
  std::unordered_map<std::string, size_t> at;
  std::vector<ExportShard> merged;
  for (ExportShard& sh : *shards) {
    auto [it, fresh] = at.try_emplace(sh.path, merged.size());
    if (fresh) {
      merged.push_back(std::move(sh));
      continue;
    }
    ExportShard& first = merged[it->second];
    std::unordered_set<std::string> seen(first.keys.begin(), first.keys.end());
    for (std::string& k : sh.keys) {
      if (seen.insert(k).second) first.keys.push_back(std::move(k));
    }
  }
  *shards = std::move(merged);
}

}  // namespace

Result<ViewExport> ExportView(const std::string& index_path, const std::string& spec,
                              const index::PartitionResolver& resolve) {
  SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<IndexReader> view, OpenView(index_path, spec, resolve));
  ViewExport ex;
  ex.view = ViewNameOf(*view);
  auto context = [&](const Status& s) {
    return s.WithContext(fmt::format("index {}: view {}", index_path, ex.view));
  };
  std::vector<ShardFile> files;
  std::vector<WantedFile> wanted;
  // The default view is its own tar layout: one walk.
  bool is_default = DefaultVersion(ex.view) != 0;
  Status s =
      WalkTree(*view, [&](std::string_view prefix, std::string_view name, const EntryRecord& e) {
        if (e.type != EntryType::kFile) return Status::Ok();
        // Records from a listing are range-checked before their shard is used.
        SHARDFS_RETURN_IF_ERROR(view->CheckFileRange(e));
        if (is_default) {
          files.push_back({e.shard.value, e.offset, fmt::format("{}{}", prefix, name)});
        } else {
          wanted.push_back({e.inode.value, e.shard.value, e.offset});
        }
        return Status::Ok();
      });
  if (!s.ok()) return context(s);
  if (!wanted.empty()) {
    std::sort(wanted.begin(), wanted.end(),
              [](const WantedFile& x, const WantedFile& y) { return x.inode < y.inode; });
    // A hard link within the view lists its inode once per path.
    wanted.erase(
        std::unique(wanted.begin(), wanted.end(),
                    [](const WantedFile& x, const WantedFile& y) { return x.inode == y.inode; }),
        wanted.end());
    auto missing = [&] {
      return std::any_of(wanted.begin(), wanted.end(),
                         [](const WantedFile& w) { return !w.found; });
    };
    SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<IndexReader> latest,
                             OpenView(index_path, "", resolve));
    s = TakeTarPaths(*latest, &wanted, &files);
    if (!s.ok()) return context(s.WithContext("reading default"));
    // Earlier versions of default, newest first, for files index add replaced.
    for (uint64_t v = DefaultVersion(ViewNameOf(*latest)); v > 1 && missing(); --v) {
      std::string older = fmt::format("default@{}", v - 1);
      SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<IndexReader> r,
                               OpenView(index_path, older, resolve));
      s = TakeTarPaths(*r, &wanted, &files);
      if (!s.ok()) return context(s.WithContext(fmt::format("reading {}", older)));
    }
    for (const auto& w : wanted) {
      if (!w.found) {
        return context(Status::Corruption(fmt::format(
            "file inode {} (shard {} offset {}) is in no version of default, so its path in "
            "the tar is unknown",
            w.inode, RedactLocation(view->ShardPath(index::ShardId{w.shard})), w.offset)));
      }
    }
  }
  ex.shards = GroupKeys(std::move(files));
  for (auto& sh : ex.shards) sh.path = view->ShardPath(index::ShardId{sh.shard_id});
  MergeSlices(&ex.shards);
  return ex;
}

std::string FormatShardList(const ViewExport& ex) {
  std::string out;
  for (const auto& sh : ex.shards) out.append(sh.path).push_back('\n');
  return out;
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  UniqueFd fd(::mkstemp(tmp.data()));
  if (!fd.valid())
    return Status::FromErrno(errno, fmt::format("create a temporary file for {}", path));
  auto fail = [&](int err, std::string_view what) {
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, fmt::format("{} {}", what, tmp));
  };
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd.get(), 0666 & ~mask) != 0) return fail(errno, "chmod");
  if (!WriteFully(fd.get(), bytes.data(), bytes.size())) return fail(errno, "write");
  if (::fsync(fd.get()) != 0) return fail(errno, "fsync");
  if (::close(fd.release()) != 0) return fail(errno, "close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, fmt::format("rename {} to {}", tmp, path));
  }
  return Status::Ok();
}

}  // namespace shardfs::builder
