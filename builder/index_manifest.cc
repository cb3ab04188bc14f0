#include "builder/index_manifest.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "builder/index_build.h"  // ParseShardPart
#include "builder/view_export.h"  // WriteFileAtomically
#include "index/index_reader.h"
#include "index/manifest_builder.h"
#include "index/schema.h"

namespace shardfs::builder {
namespace fs = std::filesystem;
namespace {

Status CheckOutput(const ManifestOptions& o) {
  struct stat st;
  if (::lstat(o.out.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::FromErrno(errno, fmt::format("manifest {}", o.out));
  }
  if (!o.force) {
    return Status::InvalidArgument(
        fmt::format("manifest {}: exists; --force replaces a manifest (nothing else)", o.out));
  }
  if (!S_ISREG(st.st_mode) || !index::IsManifestFile(o.out)) {
    return Status::InvalidArgument(fmt::format(
        "manifest {}: exists and is not a shardfs manifest; refusing to replace it", o.out));
  }
  return Status::Ok();
}

}  // namespace

Result<ManifestReport> MakeManifest(const ManifestOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.parts.empty()) return Status::InvalidArgument("index manifest: no partitions given");
  if (o.parts.size() > index::kMaxPartitions) {
    return Status::InvalidArgument(fmt::format("index manifest: {} partitions, at most {}",
                                               o.parts.size(), index::kMaxPartitions));
  }
  SHARDFS_RETURN_IF_ERROR(CheckOutput(o));
  std::error_code ec;
  const fs::path out_dir = fs::absolute(o.out, ec).lexically_normal().parent_path();
  if (ec) return Status::IoError(fmt::format("manifest {}: {}", o.out, ec.message()));

  ManifestReport report;
  index::Manifest m;
  std::vector<std::unique_ptr<index::IndexReader>> readers;
  std::vector<const index::IndexReader*> parts;
  std::map<std::string, size_t> shard_owner;
  std::map<uint64_t, size_t> part_owner;
  std::set<uint64_t> part_counts;
  std::set<uint64_t> list_sizes;  // The shard lists the parts were cut from, by size.
  for (size_t p = 0; p < o.parts.size(); ++p) {
    const std::string& path = o.parts[p];
    if (path.find("://") != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "partition {}: a URL; make the manifest where the partitions are, then upload both",
          path));
    }
    if (index::IsManifestFile(path)) {
      return Status::InvalidArgument(
          fmt::format("partition {}: a manifest; name its partitions instead", path));
    }
    SHARDFS_ASSIGN_OR_RETURN(auto reader, index::IndexReader::Open(path));
    index::ManifestPartition& mp = m.partitions.emplace_back();
    fs::path abs = fs::absolute(path, ec).lexically_normal();
    if (ec) return Status::IoError(fmt::format("partition {}: {}", path, ec.message()));
    if (abs.filename().empty()) abs = abs.parent_path();
    mp.ref = abs.lexically_relative(out_dir).string();
    if (mp.ref.empty()) mp.ref = abs.string();
    mp.db_identity = reader->db_identity();
    mp.shard_count = static_cast<uint32_t>(reader->shards().size());
    mp.part = reader->Meta(index::kMetaPartition);
    for (uint32_t s = 0; s < reader->shards().size(); ++s) {
      const std::string& shard = reader->ShardPath(index::ShardId{s});
      auto [it, fresh] = shard_owner.emplace(shard, p);
      // A slice shard (a compressed tar inside a shard) names its shard's
      // file, in the same partition.
      if (!fresh && it->second == p && reader->shards()[s].slice()) continue;
      if (!fresh) {
        return Status::InvalidArgument(fmt::format(
            "shard {} is in partition {} ({}) and in partition {} ({}); a shard belongs to one "
            "partition",
            shard, it->second, o.parts[it->second], p, path));
      }
    }
    ShardPart part;
    if (!mp.part.empty() && ParseShardPart(mp.part, &part).ok()) {
      const uint64_t k = part.index;
      part_counts.insert(part.count);
      list_sizes.insert(reader->MetaNumber(index::kMetaPartitionShards));
      auto [it, fresh] = part_owner.emplace(k, p);
      if (!fresh) {
        return Status::InvalidArgument(fmt::format("partitions {} and {} are both part {}",
                                                   o.parts[it->second], path, mp.part));
      }
      if (k != p) {
        report.warnings.push_back(fmt::format(
            "partition {} is part {} but given as partition {}: later partitions win on equal "
            "paths, so the order given is the one used",
            path, mp.part, p));
      }
    }
    report.shards += reader->shards().size();
    report.partition_bytes += reader->DiskBytes();
    parts.push_back(reader.get());
    readers.push_back(std::move(reader));
  }
  if (part_counts.size() > 1) {
    report.warnings.push_back("the partitions are parts of different splits (K/N with several N)");
  } else if (list_sizes.size() > 1) {
    report.warnings.push_back(fmt::format(
        "the partitions were cut from shard lists of different lengths ({} shards): were they "
        "built from the same inputs?",
        fmt::join(list_sizes, ", ")));
  } else if (part_counts.size() == 1 && part_owner.size() < *part_counts.begin()) {
    report.warnings.push_back(fmt::format("{} of {} parts given: the manifest covers only those",
                                          part_owner.size(), *part_counts.begin()));
  }
  SHARDFS_ASSIGN_OR_RETURN(index::ManifestTree tree, index::BuildUnionTree(parts, o.parts));
  tree.created_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  tree.message = "index manifest";
  m.trees.push_back(tree);
  const std::string bytes = index::EncodeManifest(m);
  SHARDFS_RETURN_IF_ERROR(
      WriteFileAtomically(o.out, bytes).WithContext(fmt::format("manifest {}", o.out)));
  report.tree = std::move(tree);
  report.manifest_bytes = bytes.size();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Result<ViewCreateReport> CreateManifestView(const ViewCreateOptions& o) {
  const auto start = std::chrono::steady_clock::now();
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

  std::error_code ec;
  const std::string base =
      fs::absolute(o.index, ec).lexically_normal().parent_path().string() + "/";
  std::vector<std::string> paths, labels, refs;
  for (size_t p = 0; p < m.partitions.size(); ++p) {
    const std::string& ref = m.partitions[p].ref;
    paths.push_back(ref.starts_with('/') ? ref : base + ref);
    refs.push_back(ref);
    ViewCreateOptions po = o;
    po.index = paths.back();
    po.from = from.part_views[p];
    po.ignore_missing = true;
    Result<ViewCreateReport> r = CreateView(po);
    if (!r.ok()) {
      return r.status().WithContext(fmt::format("manifest {}: partition {} ({})", o.index, p, ref));
    }
    labels.push_back(r->created.label());
    report.summary.removed += r->summary.removed;
    report.summary.added += r->summary.added;
  }
  std::vector<std::unique_ptr<index::IndexReader>> readers;
  std::vector<const index::IndexReader*> parts;
  for (size_t p = 0; p < paths.size(); ++p) {
    index::ReaderOptions po;
    po.view = labels[p];
    SHARDFS_ASSIGN_OR_RETURN(auto reader, index::IndexReader::Open(paths[p], po));
    parts.push_back(reader.get());
    readers.push_back(std::move(reader));
  }
  SHARDFS_ASSIGN_OR_RETURN(index::ManifestTree tree, index::BuildUnionTree(parts, refs));
  tree.name = o.name;
  tree.version = 1;
  for (const index::ManifestTree& t : m.trees) {
    if (t.name == o.name) tree.version = std::max(tree.version, t.version + 1);
  }
  tree.created_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  tree.from = report.from;
  tree.message = o.message;
  m.trees.push_back(tree);
  SHARDFS_RETURN_IF_ERROR(WriteFileAtomically(o.index, index::EncodeManifest(m))
                              .WithContext(fmt::format("manifest {}", o.index)));
  readers.clear();
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

}  // namespace shardfs::builder
