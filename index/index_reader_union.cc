// IndexReader over a manifest: the union of its partitions (index/manifest.h),
// answered from the partitions' own readers and the outcome the manifest
// records, so no question costs a scan: a lookup in a union directory is a
// lookup per copy (from the last partition back), a listing one merge of the
// copies' listings, and everything else one partition's answer renumbered.
#include "index/index_reader_union.h"

#include <rocksdb/db.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "index/child_cursor.h"
#include "index/index_reader.h"
#include "index/inode_set.h"
#include "index/manifest.h"
#include "index/rank_partition.h"

namespace shardfs::index {
namespace fs = std::filesystem;

namespace {

Result<std::string> LocalPartition(const std::string& base, const std::string& ref) {
  if (ref.find("://") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "partition {} is a URL; open the manifest by a command that fetches indexes", ref));
  }
  return ref.starts_with('/') ? ref : base + ref;
}

Result<const ManifestTree*> FindTree(const Manifest& m, const std::string& path,
                                     const std::string& view, size_t* index) {
  SHARDFS_ASSIGN_OR_RETURN(ViewSpec spec, ParseViewSpec(view));
  if (!spec.tag.empty()) {
    return Status::NotFound(
        fmt::format("manifest {}: no tag '{}' (a manifest keeps no tags)", path, spec.tag));
  }
  const std::string name = spec.name.empty() ? std::string(kDefaultViewName) : spec.name;
  const ManifestTree* found = nullptr;
  for (size_t i = 0; i < m.trees.size(); ++i) {
    const ManifestTree& t = m.trees[i];
    if (t.name != name || (spec.version != 0 && t.version != spec.version)) continue;
    if (!found || t.version > found->version) {
      found = &t;
      *index = i;
    }
  }
  if (found) return found;
  if (spec.version != 0) {
    return Status::NotFound(fmt::format("manifest {}: no version {}@{}", path, name, spec.version));
  }
  return Status::NotFound(fmt::format("manifest {}: no view '{}'", path, name));
}

}  // namespace

Result<std::unique_ptr<IndexReader>> IndexReader::OpenManifest(const std::string& path,
                                                               const ReaderOptions& options) {
  SHARDFS_ASSIGN_OR_RETURN(Manifest m, ReadManifest(path));
  std::unique_ptr<IndexReader> r(new IndexReader());
  r->path_ = path;
  const std::string encoded = EncodeManifest(m);
  r->db_identity_ = fmt::format("manifest-{:016x}", XXH3_64bits(encoded.data(), encoded.size()));
  auto u = std::make_unique<Union>();
  u->manifest = std::move(m);
  const Manifest& man = u->manifest;
  const size_t nparts = man.partitions.size();
  SHARDFS_ASSIGN_OR_RETURN(const ManifestTree* tree, FindTree(man, path, options.view, &u->tree));
  const ManifestTree& t = *tree;

  u->bases.push_back(0);
  u->shard_bases.push_back(0);
  for (size_t p = 0; p < nparts; ++p) {
    if (t.part_max_inode[p] == 0 || t.part_max_inode[p] >= (uint64_t{1} << 48) ||
        u->bases.back() > (uint64_t{1} << 62)) {
      return Status::Corruption(fmt::format("manifest {}: {}: partition {} has {} inodes", path,
                                            t.label(), p, t.part_max_inode[p]));
    }
    u->bases.push_back(u->bases.back() + t.part_max_inode[p]);
    u->shard_bases.push_back(u->shard_bases.back() + man.partitions[p].shard_count);
  }
  const uint64_t total = u->bases.back();

  // Which partitions this reader needs: with a rank partition, only those
  // holding shards of the rank (all when every directory is kept).
  std::vector<std::vector<uint32_t>> ranks;
  std::vector<bool> open(nparts, true);
  if (options.world != 0) {
    if (options.rank >= options.world) {
      return Status::InvalidArgument(fmt::format("rank {} of world {}: expected a rank below {}",
                                                 options.rank, options.world, options.world));
    }
    u->ranked = true;
    std::vector<std::vector<uint64_t>> bytes = t.shard_bytes;
    for (size_t p = 0; p < nparts; ++p) bytes[p].resize(man.partitions[p].shard_count, 0);
    ranks = AssignPartitionShardsToRanks(bytes, options.world, options.seed);
    for (size_t p = 0; p < nparts; ++p) {
      open[p] = options.rank_keep_dirs ||
                std::find(ranks[p].begin(), ranks[p].end(), options.rank) != ranks[p].end();
      r->shard_ranks_.insert(r->shard_ranks_.end(), ranks[p].begin(), ranks[p].end());
    }
  }

  std::error_code ec;
  fs::path abs = fs::absolute(path, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("manifest {}: {}", path, ec.message()));
  const std::string base = abs.parent_path().string() + "/";
  size_t opened = std::count(open.begin(), open.end(), true);
  u->parts.resize(nparts);
  for (uint32_t p = 0; p < nparts; ++p) {
    const ManifestPartition& mp = man.partitions[p];
    const std::string where = fmt::format("manifest {}: partition {} ({})", path, p, mp.ref);
    if (open[p]) {
      Result<std::string> local = options.resolve_partition
                                      ? options.resolve_partition(base, mp.ref)
                                      : LocalPartition(base, mp.ref);
      if (!local.ok()) return local.status().WithContext(where);
      ReaderOptions po;
      po.block_cache_bytes = std::max<size_t>(options.block_cache_bytes / opened, 1 << 20);
      po.view = t.part_views[p];
      po.preload = options.preload;
      if (options.world != 0) {
        po.rank = options.rank;
        po.world = options.world;
        po.seed = options.seed;
        po.rank_keep_dirs = options.rank_keep_dirs;
        po.shard_ranks = ranks[p];
      }
      Result<std::unique_ptr<IndexReader>> part = Open(*local, po);
      if (!part.ok()) return part.status().WithContext(where);
      const IndexReader& pr = **part;
      if ((!mp.db_identity.empty() && pr.db_identity() != mp.db_identity) ||
          pr.shards().size() != mp.shard_count || pr.max_inode() != t.part_max_inode[p]) {
        return Status::InvalidArgument(fmt::format(
            "{}: the index changed since the manifest was made (identity {}, {} shards, {} "
            "inodes; the manifest says {}, {}, {}); make the manifest again",
            where, pr.db_identity(), pr.shards().size(), pr.max_inode(), mp.db_identity,
            mp.shard_count, t.part_max_inode[p]));
      }
      for (uint32_t s = 0; s < pr.shards().size(); ++s) {
        r->shards_.push_back(pr.shards()[s]);
        r->shard_paths_.push_back(pr.ShardPath(ShardId{s}));
      }
      u->parts[p] = std::move(*part);
    } else {
      // Another rank's: never read, so a placeholder that no record can use.
      r->shards_.resize(r->shards_.size() + mp.shard_count);
      r->shard_paths_.resize(r->shard_paths_.size() + mp.shard_count);
    }
    SHARDFS_ASSIGN_OR_RETURN(InodeSet set, InodeSet::Decode(t.hidden[p]));
    u->hidden.push_back(std::move(set));
  }

  for (size_t i = 0; i < t.union_dirs.size(); ++i) {
    const UnionDir& d = t.union_dirs[i];
    const uint64_t g = d.record.inode.value;
    bool bad = g == 0 || g > total || d.record.parent.value == 0 || d.record.parent.value > total ||
               d.record.nlink < 2 || d.copies.empty() || !u->dirs.emplace(g, i).second;
    for (const auto& [p, local] : d.copies) {
      bad = bad || local == 0 || local > t.part_max_inode[p] ||
            !u->copies.emplace(Union::Key(p, local), g).second;
    }
    if (!bad) bad = u->bases[d.copies.front().first] + d.copies.front().second != g;
    if (bad) {
      return Status::Corruption(fmt::format(
          "manifest {}: {}: union directory {} is not well formed", path, t.label(), g));
    }
  }
  if (!u->dirs.contains(kRootInode.value)) {
    return Status::Corruption(fmt::format("manifest {}: {}: no root", path, t.label()));
  }
  for (const NlinkOverride& n : t.nlinks) {
    u->nlinks[Union::Key(n.partition, n.inode)] = n.nlink;
  }

  r->max_inode_ = total;
  VersionInfo& v = r->version_;
  v.name = t.name;
  v.version = t.version;
  v.record = TreeRecord(t, static_cast<uint32_t>(u->tree));
  v.record.shard_count = static_cast<uint32_t>(r->shards_.size());
  r->meta_[std::string(kMetaSchemaVersion)] = std::to_string(kSchemaVersion);
  r->meta_[std::string(kMetaFiles)] = std::to_string(t.files);
  r->meta_[std::string(kMetaDirs)] = std::to_string(t.dirs);
  r->meta_[std::string(kMetaSymlinks)] = std::to_string(t.symlinks);
  r->meta_[std::string(kMetaBytes)] = std::to_string(t.bytes);
  r->meta_[std::string(kMetaMaxInode)] = std::to_string(total);
  r->meta_["partitions"] = std::to_string(nparts);
  std::string checksums;
  for (const auto& part : u->parts) {
    if (!part) continue;
    std::string c = part->Meta(kMetaChecksums);
    checksums = checksums.empty() || checksums == c ? c : "mixed";
  }
  if (!checksums.empty()) r->meta_[std::string(kMetaChecksums)] = checksums;
  r->union_ = std::move(u);
  r->catalog_ = std::make_unique<Catalog>(&r->union_->manifest, path);
  return r;
}

const Manifest* IndexReader::manifest() const { return union_ ? &union_->manifest : nullptr; }

std::vector<const IndexReader*> IndexReader::partitions() const {
  std::vector<const IndexReader*> out;
  if (union_) {
    for (const auto& p : union_->parts) out.push_back(p.get());
  }
  return out;
}

Result<std::vector<uint64_t>> IndexReader::UnionShardBytes() const {
  std::vector<uint64_t> all;
  const Union& u = *union_;
  for (size_t p = 0; p < u.parts.size(); ++p) {
    std::vector<uint64_t> bytes = u.t().shard_bytes[p];
    bytes.resize(u.manifest.partitions[p].shard_count, 0);
    all.insert(all.end(), bytes.begin(), bytes.end());
  }
  return all;
}

Status IndexReader::UnionGetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  const Union& u = *union_;
  const uint64_t g = inode.value;
  if (g == 0 || g > max_inode_) return Status::NotFound("no such inode");
  if (const UnionDir* d = u.FindDir(g)) {
    if (!u.Visible(*d)) return Status::NotFound("no such inode");
    *rec = d->record;
    return Status::Ok();
  }
  const uint32_t p = u.PartitionOf(g);
  const uint64_t local = g - u.bases[p];
  if (!u.parts[p] || u.hidden[p].Contains(local)) return Status::NotFound("no such inode");
  SHARDFS_RETURN_IF_ERROR(u.parts[p]->GetInode(InodeId{local}, rec, holder));
  u.Translate(p, rec);
  return CheckFileRange(*rec);
}

Status IndexReader::UnionLookup(InodeId parent, std::string_view name, EntryRecord* rec,
                                RecordHolder* holder) const {
  const Union& u = *union_;
  const uint64_t g = parent.value;
  if (g == 0 || g > max_inode_) return Status::NotFound("no such entry");
  if (const UnionDir* d = u.FindDir(g)) {
    for (auto c = d->copies.rbegin(); c != d->copies.rend(); ++c) {
      const auto& [p, local] = *c;
      if (!u.parts[p]) continue;
      Status s = u.parts[p]->Lookup(InodeId{local}, name, rec, holder);
      if (s.code() == Status::Code::kNotFound) continue;
      SHARDFS_RETURN_IF_ERROR(s);
      if (u.Pick(p, rec)) return Status::Ok();
    }
    return Status::NotFound("no such entry");
  }
  const uint32_t p = u.PartitionOf(g);
  const uint64_t local = g - u.bases[p];
  if (!u.parts[p] || u.hidden[p].Contains(local)) return Status::NotFound("no such entry");
  SHARDFS_RETURN_IF_ERROR(u.parts[p]->Lookup(InodeId{local}, name, rec, holder));
  if (!u.Pick(p, rec)) return Status::NotFound("no such entry");
  return Status::Ok();
}

Status IndexReader::UnionForEachChild(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  const Union& u = *union_;
  const uint64_t g = dir.value;
  if (g == 0 || g > max_inode_) return Status::Ok();
  const UnionDir* d = u.FindDir(g);
  if (!d) {
    const uint32_t p = u.PartitionOf(g);
    const uint64_t local = g - u.bases[p];
    if (!u.parts[p] || u.hidden[p].Contains(local)) return Status::Ok();
    return u.parts[p]->ForEachChild(InodeId{local}, start_after,
                                    [&](std::string_view name, const EntryRecord& child) {
                                      EntryRecord rec = child;
                                      return !u.Pick(p, &rec) || fn(name, rec);
                                    });
  }
  std::vector<ChildCursor> cursors;
  for (const auto& [p, local] : d->copies) {
    if (u.parts[p]) cursors.emplace_back(u.parts[p].get(), p, InodeId{local}, start_after);
  }
  std::vector<ChildCursor*> live, same;
  for (;;) {
    const std::string* least = nullptr;
    live.clear();
    for (ChildCursor& c : cursors) {
      SHARDFS_ASSIGN_OR_RETURN(bool valid, c.Valid());
      if (!valid) continue;
      live.push_back(&c);
      if (!least || c.name() < *least) least = &c.name();
    }
    if (!least) return Status::Ok();
    same.clear();
    for (ChildCursor* c : live) {
      if (c->name() == *least) same.push_back(c);
    }
    EntryRecord rec;
    bool found = false;
    for (auto c = same.rbegin(); c != same.rend() && !found; ++c) {
      rec = (*c)->record();
      found = u.Pick((*c)->partition(), &rec);
    }
    if (found && !fn(*least, rec)) return Status::Ok();
    for (ChildCursor* c : same) c->Next();
  }
}

Status IndexReader::UnionForEachInode(InodeId first,
                                      const std::function<bool(const EntryRecord&)>& fn) const {
  const Union& u = *union_;
  if (first.value > max_inode_) return Status::Ok();
  const uint32_t from = first.value == 0 ? 0 : u.PartitionOf(first.value);
  bool stopped = false;
  for (uint32_t p = from; p < u.parts.size() && !stopped; ++p) {
    if (!u.parts[p]) continue;
    const uint64_t start = p == from && first.value > u.bases[p] ? first.value - u.bases[p] : 1;
    SHARDFS_RETURN_IF_ERROR(u.parts[p]->ForEachInode(InodeId{start}, [&](const EntryRecord& child) {
      EntryRecord rec = child;
      const bool canonical =
          rec.type == EntryType::kDir && u.copies.contains(Union::Key(p, rec.inode.value));
      if (!canonical && u.hidden[p].Contains(rec.inode.value)) return true;
      if (canonical && !u.hidden[p].Contains(rec.inode.value)) {
        if (!u.Pick(p, &rec)) return true;
      } else if (canonical) {
        return true;  // Another partition's copy carries it.
      } else {
        u.Translate(p, &rec);
      }
      if (!fn(rec)) stopped = true;
      return !stopped;
    }));
  }
  return Status::Ok();
}

Result<std::pair<const IndexReader*, ShardId>> IndexReader::PartitionOfShard(ShardId shard) const {
  const auto& b = union_->shard_bases;
  auto it = std::upper_bound(b.begin(), b.end(), shard.value);
  if (it == b.begin()) return Status::NotFound("no such shard");
  const size_t p = static_cast<size_t>(it - b.begin()) - 1;
  if (p >= union_->parts.size() || !union_->parts[p]) {
    return Status::NotFound(fmt::format("shard {}: its partition is not open", shard.value));
  }
  return std::pair<const IndexReader*, ShardId>(union_->parts[p].get(),
                                                ShardId{shard.value - b[p]});
}

Status IndexReader::ForEachSeekKey(
    ShardId shard,
    const std::function<bool(std::string_view suffix, std::string_view value)>& fn) const {
  if (union_) {
    SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
    return part.first->ForEachSeekKey(part.second, fn);
  }
  const std::string prefix = EncodeSeekKeyPrefix(shard);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (!fn(std::string_view(it->key().data() + prefix.size(), it->key().size() - prefix.size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  if (!it->status().ok()) {
    return Status::IoError(fmt::format("index {}: {}", path_, it->status().ToString()));
  }
  return Status::Ok();
}

Status IndexReader::GetSeekSums(ShardId shard, std::string* value) const {
  if (union_) {
    SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
    return part.first->GetSeekSums(part.second, value);
  }
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), EncodeSeekSumsKey(shard), value);
  if (s.IsNotFound()) {
    return Status::NotFound(
        fmt::format("index {}: no interval checksums for shard {}", path_, shard.value));
  }
  if (!s.ok()) return Status::IoError(fmt::format("index {}: {}", path_, s.ToString()));
  return Status::Ok();
}

Status IndexReader::GetSeekValue(ShardId shard, bool window, uint32_t point,
                                 std::string* value) const {
  if (union_) {
    SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
    return part.first->GetSeekValue(part.second, window, point, value);
  }
  const std::string key = window ? EncodeSeekWindowKey(shard, point) : EncodeSeekTableKey(shard);
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, value);
  if (s.IsNotFound()) {
    return Status::NotFound(fmt::format("index {}: no seek {} for shard {}", path_,
                                        window ? "window" : "table", shard.value));
  }
  if (!s.ok()) return Status::IoError(fmt::format("index {}: {}", path_, s.ToString()));
  return Status::Ok();
}

}  // namespace shardfs::index
