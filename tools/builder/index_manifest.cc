#include "tools/builder/index_manifest.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "index/index_reader.h"
#include "index/manifest_builder.h"
#include "index/schema.h"
#include "tools/builder/index_build.h"  // ParseShardPart
#include "tools/builder/view_export.h"  // WriteFileAtomically

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

// What the partitions seen so far claim, to refuse overlaps and warn of
// mismatched splits.
struct PartitionClaims {
  std::map<std::string, size_t> shard_owner;
  std::map<uint64_t, size_t> part_owner;
  std::set<uint64_t> part_counts;
  std::set<uint64_t> list_sizes;  // The shard lists the parts were cut from, by size.
};

// InvalidArgument for a partition given as a URL or as a manifest.
Status CheckPartitionPath(const std::string& path) {
  if (path.find("://") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "partition {}: a URL; make the manifest where the partitions are, then upload both", path));
  }
  if (index::IsManifestFile(path)) {
    return Status::InvalidArgument(
        fmt::format("partition {}: a manifest; name its partitions instead", path));
  }
  return Status::Ok();
}

// Records partition p's shards in `claims`; InvalidArgument naming both
// partitions for a shard already in another one.
Status ClaimShards(const ManifestOptions& o, size_t p, const index::IndexReader& reader,
                   PartitionClaims* claims) {
  for (uint32_t s = 0; s < reader.shards().size(); ++s) {
    const std::string& shard = reader.ShardPath(index::ShardId{s});
    auto [it, fresh] = claims->shard_owner.emplace(shard, p);
    // A slice shard (a compressed tar inside a shard) names its shard's
    // file, in the same partition.
    if (!fresh && it->second == p && reader.shards()[s].slice()) continue;
    if (!fresh) {
      return Status::InvalidArgument(fmt::format(
          "shard {} is in partition {} ({}) and in partition {} ({}); a shard belongs to one "
          "partition",
          shard, it->second, o.parts[it->second], p, o.parts[p]));
    }
  }
  return Status::Ok();
}

// Records partition p's "K/N" (mp.part, if it parses) in `claims`:
// InvalidArgument for a K another partition has already, a warning when K is
// not p.
Status ClaimPart(const ManifestOptions& o, size_t p, const index::ManifestPartition& mp,
                 const index::IndexReader& reader, PartitionClaims* claims,
                 ManifestReport* report) {
  ShardPart part;
  if (mp.part.empty() || !ParseShardPart(mp.part, &part).ok()) return Status::Ok();
  const uint64_t k = part.index;
  claims->part_counts.insert(part.count);
  claims->list_sizes.insert(reader.MetaNumber(index::kMetaPartitionShards));
  auto [it, fresh] = claims->part_owner.emplace(k, p);
  if (!fresh) {
    return Status::InvalidArgument(fmt::format("partitions {} and {} are both part {}",
                                               o.parts[it->second], o.parts[p], mp.part));
  }
  if (k != p) {
    report->warnings.push_back(fmt::format(
        "partition {} is part {} but given as partition {}: later partitions win on equal "
        "paths, so the order given is the one used",
        o.parts[p], mp.part, p));
  }
  return Status::Ok();
}

// Opens partition p, checks it against the others (`claims`) and adds it to
// `m` (its path relative to `out_dir`) and to `report`.
Result<std::unique_ptr<index::IndexReader>> AddPartition(const ManifestOptions& o, size_t p,
                                                         const fs::path& out_dir,
                                                         index::Manifest* m,
                                                         PartitionClaims* claims,
                                                         ManifestReport* report) {
  const std::string& path = o.parts[p];
  SHARDFS_RETURN_IF_ERROR(CheckPartitionPath(path));
  SHARDFS_ASSIGN_OR_RETURN(auto reader, index::IndexReader::Open(path));
  index::ManifestPartition& mp = m->partitions.emplace_back();
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("partition {}: {}", path, ec.message()));
  if (abs.filename().empty()) abs = abs.parent_path();
  mp.ref = abs.lexically_relative(out_dir).string();
  if (mp.ref.empty()) mp.ref = abs.string();
  mp.db_identity = reader->db_identity();
  mp.shard_count = static_cast<uint32_t>(reader->shards().size());
  mp.part = reader->Meta(index::kMetaPartition);
  SHARDFS_RETURN_IF_ERROR(ClaimShards(o, p, *reader, claims));
  SHARDFS_RETURN_IF_ERROR(ClaimPart(o, p, mp, *reader, claims, report));
  report->shards += reader->shards().size();
  report->partition_bytes += reader->DiskBytes();
  return reader;
}

// At most one warning about how the partitions' "K/N" parts fit together.
void WarnOfSplit(const PartitionClaims& claims, ManifestReport* report) {
  if (claims.part_counts.size() > 1) {
    report->warnings.push_back("the partitions are parts of different splits (K/N with several N)");
  } else if (claims.list_sizes.size() > 1) {
    report->warnings.push_back(fmt::format(
        "the partitions were cut from shard lists of different lengths ({} shards): were they "
        "built from the same inputs?",
        fmt::join(claims.list_sizes, ", ")));
  } else if (claims.part_counts.size() == 1 &&
             claims.part_owner.size() < *claims.part_counts.begin()) {
    report->warnings.push_back(fmt::format("{} of {} parts given: the manifest covers only those",
                                           claims.part_owner.size(), *claims.part_counts.begin()));
  }
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
  PartitionClaims claims;
  for (size_t p = 0; p < o.parts.size(); ++p) {
    SHARDFS_ASSIGN_OR_RETURN(auto reader, AddPartition(o, p, out_dir, &m, &claims, &report));
    parts.push_back(reader.get());
    readers.push_back(std::move(reader));
  }
  WarnOfSplit(claims, &report);
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

}  // namespace shardfs::builder
