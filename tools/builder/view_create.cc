#include "tools/builder/view_create.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/log.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/manifest_builder.h"
#include "index/member_path.h"
#include "tools/builder/view_export.h"  // WriteFileAtomically

namespace shardfs::builder {
namespace {

using index::NodeId;
using index::VersionBuilder;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Calls fn(line_number, line) for each line of `file`. Lines keep every byte
// but the newline (and a carriage return before it).
template <typename Fn>
Status ForEachLine(const std::string& file, Fn&& fn) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::FromErrno(errno, fmt::format("{}", file));
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    SHARDFS_RETURN_IF_ERROR(fn(number, line));
  }
  if (in.bad()) return Status::IoError(fmt::format("{}: read error", file));
  return Status::Ok();
}

// Marks each listed path of `file` in `marks`.
Status MarkList(const VersionBuilder& tree, const std::string& file, bool ignore_missing,
                std::vector<uint8_t>* marks) {
  return ForEachLine(file, [&](size_t number, const std::string& line) -> Status {
    if (line.find_first_not_of(" \t") == std::string::npos) return Status::Ok();
    Result<std::string> path = ListPath(line);
    if (!path.ok()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: {}", file, number, path.status().message()));
    }
    NodeId n = tree.Find(*path);
    if (n == VersionBuilder::kNoNode) {
      if (ignore_missing) return Status::Ok();
      return Status::NotFound(
          fmt::format("{}:{}: '{}' is not in the source view (--ignore-missing skips such lines)",
                      file, number, *path));
    }
    (*marks)[n] = 1;
    return Status::Ok();
  });
}

}  // namespace

Status CheckListedPaths(const index::IndexReader& source, const std::string& file) {
  return ForEachLine(file, [&](size_t number, const std::string& line) -> Status {
    if (line.find_first_not_of(" \t") == std::string::npos) return Status::Ok();
    Result<std::string> path = ListPath(line);
    if (!path.ok()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: {}", file, number, path.status().message()));
    }
    index::EntryRecord rec;
    index::RecordHolder holder;
    Status s = source.LookupPath(*path, &rec, &holder);
    if (s.code() == Status::Code::kNotFound) {
      return Status::NotFound(
          fmt::format("{}:{}: '{}' is not in the source view (--ignore-missing skips such lines)",
                      file, number, *path));
    }
    return s;
  });
}

namespace {

// Applies includes, excludes and the emptied-directory rule.
class Filter {
 public:
  Filter(VersionBuilder& tree, const ViewCreateOptions& o) : tree_(tree), o_(o) {
    include_.assign(tree.node_count(), 0);
    exclude_.assign(tree.node_count(), 0);
    includes_ = !o.include_globs.empty() || !o.include_list.empty();
  }

  Status Run() {
    if (!o_.include_list.empty()) {
      SHARDFS_RETURN_IF_ERROR(MarkList(tree_, o_.include_list, o_.ignore_missing, &include_));
    }
    if (!o_.exclude_list.empty()) {
      SHARDFS_RETURN_IF_ERROR(MarkList(tree_, o_.exclude_list, o_.ignore_missing, &exclude_));
    }
    if (!includes_ && o_.exclude_globs.empty() && o_.exclude_list.empty()) return Status::Ok();
    std::string path;
    for (NodeId c : tree_.children(index::kRootNode)) Visit(c, &path, false);
    return Status::Ok();
  }

 private:
  bool Matches(const std::vector<std::string>& globs, const std::string& path,
               std::string_view name) const {
    for (const std::string& g : globs) {
      if (GlobMatches(g, path, name)) return true;
    }
    return false;
  }

  // Returns whether `n` stays.
  bool Visit(NodeId n, std::string* path, bool included_above) {
    const size_t len = path->size();
    if (!path->empty()) path->push_back('/');
    path->append(tree_.name(n));
    bool keep = VisitAt(n, *path, included_above);
    path->resize(len);
    if (!keep) tree_.Remove(n);
    return keep;
  }

  bool VisitAt(NodeId n, std::string& path, bool included_above) {
    std::string_view name = tree_.name(n);
    if (exclude_[n] || Matches(o_.exclude_globs, path, name)) return false;
    const bool included =
        included_above || include_[n] || (includes_ && Matches(o_.include_globs, path, name));
    if (tree_.type(n) != index::EntryType::kDir) return !includes_ || included;
    const std::vector<NodeId> kids = tree_.children(n);
    bool any = false;
    for (NodeId c : kids) any |= Visit(c, &path, included);
    if (any) return true;
    // Emptied by the filters: gone. Empty already: stays unless includes
    // leave it out.
    return kids.empty() && (!includes_ || included);
  }

  VersionBuilder& tree_;
  const ViewCreateOptions& o_;
  bool includes_ = false;
  std::vector<uint8_t> include_;
  std::vector<uint8_t> exclude_;
};

Status ApplyRenames(VersionBuilder& tree, const std::string& file) {
  // OLD paths name the tree before any rename: resolve them all first.
  std::vector<std::tuple<size_t, NodeId, std::string>> moves;
  SHARDFS_RETURN_IF_ERROR(ForEachLine(file, [&](size_t number, const std::string& line) -> Status {
    if (line.find_first_not_of(" \t") == std::string::npos) return Status::Ok();
    size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      return Status::InvalidArgument(fmt::format("{}:{}: expected OLD<TAB>NEW", file, number));
    }
    Result<std::string> from = ListPath(line.substr(0, tab));
    Result<std::string> to = ListPath(line.substr(tab + 1));
    if (!from.ok() || !to.ok() || from->empty() || to->empty()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: expected two paths below the root", file, number));
    }
    NodeId n = tree.Find(*from);
    if (n == VersionBuilder::kNoNode) {
      return Status::NotFound(
          fmt::format("{}:{}: '{}' is not in the view being made", file, number, *from));
    }
    moves.emplace_back(number, n, std::move(*to));
    return Status::Ok();
  }));
  std::vector<uint8_t> moved(tree.node_count(), 0);
  for (const auto& [number, n, to] : moves) {
    if (moved[n]) {
      return Status::InvalidArgument(fmt::format("{}:{}: renamed a second time", file, number));
    }
    moved[n] = 1;
    if (!tree.alive(n)) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: inside a directory an earlier line moved away", file, number));
    }
    Status s = tree.Move(n, to);
    if (!s.ok()) return s.WithContext(fmt::format("{}:{}", file, number));
  }
  return Status::Ok();
}

// A manifest's view: refuses the default view's name and a rename map.
Status CheckManifestViewOptions(const ViewCreateOptions& o) {
  SHARDFS_RETURN_IF_ERROR(index::CheckViewName(o.name, "view"));
  if (o.name == index::kDefaultViewName) {
    return Status::InvalidArgument(
        "view 'default' is the full tree; a manifest's comes from `shardfs index manifest`");
  }
  if (!o.rename_map.empty()) {
    return Status::InvalidArgument(fmt::format(
        "manifest {}: --rename-map is not supported on a manifest (a rename may move a path "
        "between partitions); create the view on a single index",
        o.index));
  }
  return Status::Ok();
}

// The versions a manifest view made in its partitions: their paths, the
// manifest's references to them and the versions' labels, by partition.
struct PartitionViews {
  std::vector<std::string> paths, refs, labels;
};

// Creates the view `o` in every partition of the manifest `m` at o.index,
// each from its version of the manifest tree `from`, adding up their
// summaries in *report.
Result<PartitionViews> CreatePartitionViews(const ViewCreateOptions& o, const index::Manifest& m,
                                            const index::ManifestTree& from,
                                            ViewCreateReport* report) {
  PartitionViews views;
  std::error_code ec;
  const std::string base =
      std::filesystem::absolute(o.index, ec).lexically_normal().parent_path().string() + "/";
  for (size_t p = 0; p < m.partitions.size(); ++p) {
    const std::string& ref = m.partitions[p].ref;
    views.paths.push_back(ref.starts_with('/') ? ref : base + ref);
    views.refs.push_back(ref);
    ViewCreateOptions po = o;
    po.index = views.paths.back();
    po.from = from.part_views[p];
    po.ignore_missing = true;
    Result<ViewCreateReport> r = CreateView(po);
    if (!r.ok()) {
      return r.status().WithContext(fmt::format("manifest {}: partition {} ({})", o.index, p, ref));
    }
    views.labels.push_back(r->created.label());
    report->summary.removed += r->summary.removed;
    report->summary.added += r->summary.added;
  }
  return views;
}

// The union of the partitions' new versions as tree NAME@N of the manifest
// `m` (N one past the view's latest).
Result<index::ManifestTree> UnionTree(const ViewCreateOptions& o, const index::Manifest& m,
                                      const PartitionViews& views) {
  std::vector<std::unique_ptr<index::IndexReader>> readers;
  std::vector<const index::IndexReader*> parts;
  for (size_t p = 0; p < views.paths.size(); ++p) {
    index::ReaderOptions po;
    po.view = views.labels[p];
    SHARDFS_ASSIGN_OR_RETURN(auto reader, index::IndexReader::Open(views.paths[p], po));
    parts.push_back(reader.get());
    readers.push_back(std::move(reader));
  }
  SHARDFS_ASSIGN_OR_RETURN(index::ManifestTree tree, index::BuildUnionTree(parts, views.refs));
  tree.name = o.name;
  tree.version = 1;
  for (const index::ManifestTree& t : m.trees) {
    if (t.name == o.name) tree.version = std::max(tree.version, t.version + 1);
  }
  tree.created_ns = NowNs();
  tree.message = o.message;
  return tree;
}

// `view create` on the manifest at o.index (see CreateView).
Result<ViewCreateReport> CreateManifestView(const ViewCreateOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  SHARDFS_RETURN_IF_ERROR(CheckManifestViewOptions(o));
  SHARDFS_ASSIGN_OR_RETURN(index::Manifest m, index::ReadManifest(o.index));
  index::ReaderOptions ro;
  ro.view = o.from;
  SHARDFS_ASSIGN_OR_RETURN(auto source, index::IndexReader::Open(o.index, ro));
  if (!o.ignore_missing) {
    for (const std::string& list : {o.include_list, o.exclude_list}) {
      if (!list.empty()) SHARDFS_RETURN_IF_ERROR(CheckListedPaths(*source, list));
    }
  }
  const index::ManifestTree& from = m.trees[source->version().record.view.value];
  ViewCreateReport report;
  report.from = source->version().label();
  const uint64_t disk_before = source->DiskBytes();
  source.reset();

  SHARDFS_ASSIGN_OR_RETURN(PartitionViews views, CreatePartitionViews(o, m, from, &report));
  SHARDFS_ASSIGN_OR_RETURN(index::ManifestTree tree, UnionTree(o, m, views));
  tree.from = report.from;
  m.trees.push_back(tree);
  SHARDFS_RETURN_IF_ERROR(WriteFileAtomically(o.index, index::EncodeManifest(m))
                              .WithContext(fmt::format("manifest {}", o.index)));
  report.created.name = tree.name;
  report.created.version = tree.version;
  report.summary.files = tree.files;
  report.summary.dirs = tree.dirs;
  report.summary.symlinks = tree.symlinks;
  report.summary.bytes = tree.bytes;
  SHARDFS_ASSIGN_OR_RETURN(auto after, index::IndexReader::Open(o.index));
  const uint64_t disk_after = after->DiskBytes();
  report.index_bytes_added = disk_after - std::min(disk_after, disk_before);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

Result<std::string> ListPath(std::string_view line) { return index::NormalizeMemberPath(line); }

bool GlobMatches(const std::string& glob, const std::string& path, std::string_view name) {
  if (glob.find('/') == std::string::npos) {
    return ::fnmatch(glob.c_str(), std::string(name).c_str(), 0) == 0;
  }
  std::string_view g = glob;
  while (g.starts_with("/")) g.remove_prefix(1);
  return ::fnmatch(std::string(g).c_str(), path.c_str(), FNM_PATHNAME) == 0;
}

Result<ViewCreateReport> CreateView(const ViewCreateOptions& o) {
  if (index::IsManifestFile(o.index)) return CreateManifestView(o);
  const auto start = std::chrono::steady_clock::now();
  SHARDFS_RETURN_IF_ERROR(index::CheckViewName(o.name, "view"));
  if (o.name == index::kDefaultViewName) {
    return Status::InvalidArgument(
        "view 'default' is the full tree; its versions come from `shardfs index add`");
  }
  // The editor first: it excludes other writers, so the source and the
  // version numbers below stay what they are until the new version is in.
  SHARDFS_ASSIGN_OR_RETURN(auto editor, index::IndexEditor::Open(o.index));
  index::ReaderOptions ro;
  ro.view = o.from;
  SHARDFS_ASSIGN_OR_RETURN(auto source, index::IndexReader::Open(o.index, ro));
  const uint64_t disk_before = source->DiskBytes();
  auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  log::Debug("view create: source open at {:.3f}s", since());
  SHARDFS_ASSIGN_OR_RETURN(auto tree, index::VersionBuilder::Load(*source));
  log::Debug("view create: tree loaded at {:.3f}s", since());
  SHARDFS_RETURN_IF_ERROR(Filter(*tree, o).Run());
  if (!o.rename_map.empty()) SHARDFS_RETURN_IF_ERROR(ApplyRenames(*tree, o.rename_map));
  log::Debug("view create: rules applied at {:.3f}s", since());
  const index::VersionRecord& src = source->version().record;
  SHARDFS_ASSIGN_OR_RETURN(index::BuiltVersion built, tree->Finish(src.shard_count));
  log::Debug("view create: difference worked out at {:.3f}s", since());

  ViewCreateReport report;
  report.from = source->version().label();
  index::VersionInfo& info = report.created;
  info.name = o.name;
  Result<std::vector<index::VersionInfo>> existing = source->catalog().Versions(o.name);
  if (existing.ok()) {
    info.version = existing->back().version + 1;
  } else if (existing.status().code() == Status::Code::kNotFound) {
    info.version = 1;
  } else {
    return existing.status();
  }
  SHARDFS_ASSIGN_OR_RETURN(uint32_t max_view, source->catalog().MaxViewId());
  index::VersionRecord& rec = info.record;
  rec.view = index::ViewId{max_view + 1};
  rec.shard_count = src.shard_count;
  rec.base_max_inode = src.base_max_inode;
  rec.max_inode = built.summary.max_inode;
  rec.files = built.summary.files;
  rec.dirs = built.summary.dirs;
  rec.symlinks = built.summary.symlinks;
  rec.bytes = built.summary.bytes;
  rec.created_ns = NowNs();
  rec.kind = index::VersionKind::kCreate;
  rec.from = report.from;
  rec.message = o.message;
  source.reset();
  SHARDFS_RETURN_IF_ERROR(editor->AddVersion(info, built.table, {}));
  log::Debug("view create: version stored at {:.3f}s", since());
  report.summary = built.summary;
  editor.reset();
  const uint64_t disk_after = index::IndexDiskBytes(o.index);
  report.index_bytes_added = disk_after - std::min(disk_after, disk_before);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace shardfs::builder
