#include "tools/index_manifest.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "base/parse.h"
#include "index/index_reader.h"
#include "index/manifest_builder.h"
#include "tools/view_export.h"  // WriteFileAtomically

namespace shardfs::tools {
namespace fs = std::filesystem;
namespace {

// The meta key `index build --part K/N` records.
constexpr std::string_view kMetaPartition = "partition";

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

// "K/N" of a partition's meta, if it has a well-formed one.
bool ParsePart(const std::string& text, uint64_t* k, uint64_t* n) {
  size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  std::optional<uint64_t> a = ParseDecimal(text.substr(0, slash));
  std::optional<uint64_t> b = ParseDecimal(text.substr(slash + 1));
  if (!a || !b || *a >= *b) return false;
  *k = *a;
  *n = *b;
  return true;
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
    mp.part = reader->Meta(kMetaPartition);
    for (uint32_t s = 0; s < reader->shards().size(); ++s) {
      const std::string& shard = reader->ShardPath(index::ShardId{s});
      auto [it, fresh] = shard_owner.emplace(shard, p);
      if (!fresh) {
        return Status::InvalidArgument(fmt::format(
            "shard {} is in partition {} ({}) and in partition {} ({}); a shard belongs to one "
            "partition",
            shard, it->second, o.parts[it->second], p, path));
      }
    }
    uint64_t k = 0, n = 0;
    if (ParsePart(mp.part, &k, &n)) {
      part_counts.insert(n);
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

}  // namespace shardfs::tools
