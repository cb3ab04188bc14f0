// IndexReader over a manifest: the union of its partitions (index/manifest.h),
// answered from the partitions' own readers and the outcome the manifest
// records, so no question costs a scan: a lookup in a union directory is a
// lookup per copy (from the last partition back), a listing one merge of the
// copies' listings, and everything else one partition's answer renumbered.
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "index/child_cursor.h"
#include "index/db_options.h"
#include "index/index_reader.h"
#include "index/inode_set.h"
#include "index/manifest.h"
#include "index/rank_partition.h"

namespace shardfs::index {
namespace fs = std::filesystem;

// Immutable after OpenManifest; shared by every thread without a lock.
struct IndexReader::Union {
  Manifest manifest;
  size_t tree = 0;
  bool ranked = false;
  std::vector<std::unique_ptr<IndexReader>> parts;  // nullptr: not opened (another rank's).
  std::vector<uint64_t> bases;                      // Inodes before partition p; [P] = all.
  std::vector<uint32_t> shard_bases;                // Shards before partition p.
  std::vector<InodeSet> hidden;
  std::unordered_map<uint64_t, size_t> dirs;      // Global inode -> its union_dirs index.
  std::unordered_map<uint64_t, uint64_t> copies;  // Key(p, local) -> global inode.
  std::unordered_map<uint64_t, uint32_t> nlinks;  // Key(p, local) -> link count.

  const ManifestTree& t() const { return manifest.trees[tree]; }

  // The steps of OpenManifest, in order; each returns the Status Open
  // documents. `path` is the manifest's, for messages.
  // Fills bases and shard_bases from the tree's per-partition counts.
  Status LayOut(const std::string& path);
  // With a rank partition: which partitions to open (*open), each
  // partition's shard ranks (*ranks, empty without one) and r->shard_ranks_.
  Status ChooseParts(const ReaderOptions& options, IndexReader* r,
                     std::vector<std::vector<uint32_t>>* ranks, std::vector<bool>* open);
  // Opens the partitions marked in `open` (placeholders for the others),
  // appending their shards to r's shard table, and decodes hidden.
  Status OpenParts(const std::string& path, const ReaderOptions& options,
                   const std::vector<std::vector<uint32_t>>& ranks, const std::vector<bool>& open,
                   IndexReader* r);
  // Fills dirs, copies and nlinks from the tree; Corruption if a union
  // directory is not well formed or the root is missing.
  Status IndexDirs(const std::string& path);
  // The union's version, counts and meta values, as r answers them.
  void Describe(IndexReader* r) const;

  static uint64_t Key(uint32_t p, uint64_t local) { return uint64_t{p} << 48 | local; }
  // REQUIRES: 1 <= global <= bases.back().
  uint32_t PartitionOf(uint64_t global) const {
    auto it = std::lower_bound(bases.begin() + 1, bases.end(), global);
    return static_cast<uint32_t>(it - bases.begin() - 1);
  }
  const UnionDir* FindDir(uint64_t global) const {
    auto it = dirs.find(global);
    return it == dirs.end() ? nullptr : &t().union_dirs[it->second];
  }
  // Renumbers a partition's record into the union's numbers.
  void Translate(uint32_t p, EntryRecord* rec) const {
    if (rec->type == EntryType::kDir) {
      if (auto it = copies.find(Key(p, rec->inode.value)); it != copies.end()) {
        *rec = FindDir(it->second)->record;
        return;
      }
    }
    const uint64_t local = rec->inode.value;
    rec->inode = InodeId{bases[p] + local};
    auto parent = copies.find(Key(p, rec->parent.value));
    rec->parent = InodeId{parent != copies.end() ? parent->second : bases[p] + rec->parent.value};
    if (rec->type != EntryType::kDir) {
      if (auto n = nlinks.find(Key(p, local)); n != nlinks.end()) rec->nlink = n->second;
    }
    if (rec->type == EntryType::kFile) rec->shard = ShardId{shard_bases[p] + rec->shard.value};
  }
  // A union directory is shown if a copy of it is (a rank shows a directory
  // holding something of the rank).
  bool Visible(const UnionDir& d) const {
    if (!ranked || d.record.inode == kRootInode) return true;
    for (const auto& [p, local] : d.copies) {
      EntryRecord rec;
      RecordHolder holder;
      if (parts[p] && parts[p]->GetInode(InodeId{local}, &rec, &holder).ok()) return true;
    }
    return false;
  }
  // The entry a name of a union directory resolves to among candidates in
  // partition order, from the last back: a union directory, or the first
  // entry the union does not hide. False if none.
  bool Pick(uint32_t p, EntryRecord* rec) const {
    if (rec->type == EntryType::kDir && copies.contains(Key(p, rec->inode.value))) {
      const UnionDir* d = FindDir(copies.at(Key(p, rec->inode.value)));
      if (!Visible(*d)) return false;
      *rec = d->record;
      return true;
    }
    if (hidden[p].Contains(rec->inode.value)) return false;
    Translate(p, rec);
    return true;
  }
};

void IndexReader::UnionDeleter::operator()(Union* u) const { delete u; }

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

// InvalidArgument, prefixed by `where`, unless partition `pr` is still the
// index the manifest recorded as `mp` (its identity, shards and inodes).
Status CheckPartition(const std::string& where, const ManifestPartition& mp, uint64_t max_inode,
                      const IndexReader& pr) {
  if ((!mp.db_identity.empty() && pr.db_identity() != mp.db_identity) ||
      pr.shards().size() != mp.shard_count || pr.max_inode() != max_inode) {
    return Status::InvalidArgument(
        fmt::format("{}: the index changed since the manifest was made (identity {}, {} shards, {} "
                    "inodes; the manifest says {}, {}, {}); make the manifest again",
                    where, pr.db_identity(), pr.shards().size(), pr.max_inode(), mp.db_identity,
                    mp.shard_count, max_inode));
  }
  return Status::Ok();
}

}  // namespace

Status IndexReader::Union::LayOut(const std::string& path) {
  const ManifestTree& tr = t();
  bases.push_back(0);
  shard_bases.push_back(0);
  for (size_t p = 0; p < manifest.partitions.size(); ++p) {
    if (tr.part_max_inode[p] == 0 || tr.part_max_inode[p] >= (uint64_t{1} << 48) ||
        bases.back() > (uint64_t{1} << 62)) {
      return Status::Corruption(fmt::format("manifest {}: {}: partition {} has {} inodes", path,
                                            tr.label(), p, tr.part_max_inode[p]));
    }
    bases.push_back(bases.back() + tr.part_max_inode[p]);
    shard_bases.push_back(shard_bases.back() + manifest.partitions[p].shard_count);
  }
  return Status::Ok();
}

Status IndexReader::Union::ChooseParts(const ReaderOptions& options, IndexReader* r,
                                       std::vector<std::vector<uint32_t>>* ranks,
                                       std::vector<bool>* open) {
  const size_t nparts = manifest.partitions.size();
  open->assign(nparts, true);
  if (options.world == 0) return Status::Ok();
  if (options.rank >= options.world) {
    return Status::InvalidArgument(fmt::format("rank {} of world {}: expected a rank below {}",
                                               options.rank, options.world, options.world));
  }
  ranked = true;
  std::vector<std::vector<uint64_t>> bytes = t().shard_bytes;
  for (size_t p = 0; p < nparts; ++p) bytes[p].resize(manifest.partitions[p].shard_count, 0);
  *ranks = AssignPartitionShardsToRanks(bytes, options.world, options.seed);
  for (size_t p = 0; p < nparts; ++p) {
    const std::vector<uint32_t>& rp = (*ranks)[p];
    (*open)[p] =
        options.rank_keep_dirs || std::find(rp.begin(), rp.end(), options.rank) != rp.end();
    r->shard_ranks_.insert(r->shard_ranks_.end(), rp.begin(), rp.end());
  }
  return Status::Ok();
}

Status IndexReader::Union::OpenParts(const std::string& path, const ReaderOptions& options,
                                     const std::vector<std::vector<uint32_t>>& ranks,
                                     const std::vector<bool>& open, IndexReader* r) {
  const ManifestTree& tr = t();
  const size_t nparts = manifest.partitions.size();
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("manifest {}: {}", path, ec.message()));
  const std::string base = abs.parent_path().string() + "/";
  size_t opened = std::count(open.begin(), open.end(), true);
  parts.resize(nparts);
  for (uint32_t p = 0; p < nparts; ++p) {
    const ManifestPartition& mp = manifest.partitions[p];
    const std::string where = fmt::format("manifest {}: partition {} ({})", path, p, mp.ref);
    if (open[p]) {
      Result<std::string> local = options.resolve_partition
                                      ? options.resolve_partition(base, mp.ref)
                                      : LocalPartition(base, mp.ref);
      if (!local.ok()) return local.status().WithContext(where);
      ReaderOptions po;
      // The auto size's cap is shared by the partitions opened.
      po.block_cache_bytes = options.block_cache_bytes != 0
                                 ? std::max<size_t>(options.block_cache_bytes / opened, 1 << 20)
                                 : AutoBlockCacheBytes(*local, AutoBlockCacheCap() / opened);
      po.view = tr.part_views[p];
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
      SHARDFS_RETURN_IF_ERROR(CheckPartition(where, mp, tr.part_max_inode[p], **part));
      const IndexReader& pr = **part;
      for (uint32_t s = 0; s < pr.shards().size(); ++s) {
        r->shards_.push_back(pr.shards()[s]);
        r->shard_paths_.push_back(pr.ShardPath(ShardId{s}));
      }
      parts[p] = std::move(*part);
    } else {
      // Another rank's: never read, so a placeholder that no record can use.
      r->shards_.resize(r->shards_.size() + mp.shard_count);
      r->shard_paths_.resize(r->shard_paths_.size() + mp.shard_count);
    }
    SHARDFS_ASSIGN_OR_RETURN(InodeSet set, InodeSet::Decode(tr.hidden[p]));
    hidden.push_back(std::move(set));
  }
  return Status::Ok();
}

Status IndexReader::Union::IndexDirs(const std::string& path) {
  const ManifestTree& tr = t();
  const uint64_t total = bases.back();
  for (size_t i = 0; i < tr.union_dirs.size(); ++i) {
    const UnionDir& d = tr.union_dirs[i];
    const uint64_t g = d.record.inode.value;
    bool bad = g == 0 || g > total || d.record.parent.value == 0 || d.record.parent.value > total ||
               d.record.nlink < 2 || d.copies.empty() || !dirs.emplace(g, i).second;
    for (const auto& [p, local] : d.copies) {
      bad = bad || local == 0 || local > tr.part_max_inode[p] ||
            !copies.emplace(Key(p, local), g).second;
    }
    if (!bad) bad = bases[d.copies.front().first] + d.copies.front().second != g;
    if (bad) {
      return Status::Corruption(fmt::format(
          "manifest {}: {}: union directory {} is not well formed", path, tr.label(), g));
    }
  }
  if (!dirs.contains(kRootInode.value)) {
    return Status::Corruption(fmt::format("manifest {}: {}: no root", path, tr.label()));
  }
  for (const NlinkOverride& n : tr.nlinks) nlinks[Key(n.partition, n.inode)] = n.nlink;
  return Status::Ok();
}

void IndexReader::Union::Describe(IndexReader* r) const {
  const ManifestTree& tr = t();
  const uint64_t total = bases.back();
  r->max_inode_ = total;
  VersionInfo& v = r->version_;
  v.name = tr.name;
  v.version = tr.version;
  v.record = TreeRecord(tr, static_cast<uint32_t>(tree));
  v.record.shard_count = static_cast<uint32_t>(r->shards_.size());
  r->meta_[std::string(kMetaSchemaVersion)] = std::to_string(kSchemaVersion);
  r->meta_[std::string(kMetaFiles)] = std::to_string(tr.files);
  r->meta_[std::string(kMetaDirs)] = std::to_string(tr.dirs);
  r->meta_[std::string(kMetaSymlinks)] = std::to_string(tr.symlinks);
  r->meta_[std::string(kMetaBytes)] = std::to_string(tr.bytes);
  r->meta_[std::string(kMetaMaxInode)] = std::to_string(total);
  r->meta_["partitions"] = std::to_string(manifest.partitions.size());
  std::string checksums;
  for (const auto& part : parts) {
    if (!part) continue;
    std::string c = part->Meta(kMetaChecksums);
    checksums = checksums.empty() || checksums == c ? c : "mixed";
  }
  if (!checksums.empty()) r->meta_[std::string(kMetaChecksums)] = checksums;
}

Result<std::unique_ptr<IndexReader>> IndexReader::OpenManifest(const std::string& path,
                                                               const ReaderOptions& options) {
  SHARDFS_ASSIGN_OR_RETURN(Manifest m, ReadManifest(path));
  std::unique_ptr<IndexReader> r(new IndexReader());
  r->path_ = path;
  const std::string encoded = EncodeManifest(m);
  r->db_identity_ = fmt::format("manifest-{:016x}", XXH3_64bits(encoded.data(), encoded.size()));
  std::unique_ptr<Union, UnionDeleter> u(new Union());
  u->manifest = std::move(m);
  SHARDFS_RETURN_IF_ERROR(FindTree(u->manifest, path, options.view, &u->tree).status());
  SHARDFS_RETURN_IF_ERROR(u->LayOut(path));
  // Which partitions this reader needs: with a rank partition, only those
  // holding shards of the rank (all when every directory is kept).
  std::vector<std::vector<uint32_t>> ranks;
  std::vector<bool> open;
  SHARDFS_RETURN_IF_ERROR(u->ChooseParts(options, r.get(), &ranks, &open));
  SHARDFS_RETURN_IF_ERROR(u->OpenParts(path, options, ranks, open, r.get()));
  SHARDFS_RETURN_IF_ERROR(u->IndexDirs(path));
  u->Describe(r.get());
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
