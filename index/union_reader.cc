// UnionReader (index/union_reader.h): opening a manifest, then each
// question answered from the partitions that hold its answer.
#include "index/union_reader.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "index/child_cursor.h"
#include "index/db_options.h"
#include "index/rank_share.h"

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

Status UnionReader::LayOut() {
  const ManifestTree& tr = tree();
  bases_.push_back(0);
  shard_bases_.push_back(0);
  for (size_t p = 0; p < manifest_.partitions.size(); ++p) {
    if (tr.part_max_inode[p] == 0 || tr.part_max_inode[p] >= (uint64_t{1} << 48) ||
        bases_.back() > (uint64_t{1} << 62)) {
      return Status::Corruption(fmt::format("manifest {}: {}: partition {} has {} inodes", path_,
                                            tr.label(), p, tr.part_max_inode[p]));
    }
    bases_.push_back(bases_.back() + tr.part_max_inode[p]);
    shard_bases_.push_back(shard_bases_.back() + manifest_.partitions[p].shard_count);
  }
  return Status::Ok();
}

Status UnionReader::LoadRanks(const ReaderOptions& options) {
  // The share's walks must see every file of the union: share_ is set
  // after, and its listings are the raw ones.
  ChildLister list = [this](InodeId dir, const auto& fn) {
    return ForEachChildIn(dir, "", fn, /*ranked=*/false);
  };
  SHARDFS_ASSIGN_OR_RETURN(share_,
                           RankShare::Make(*this, std::move(list), shards_.size(), options));
  shard_ranks_ = share_->ShardRanks();
  return Status::Ok();
}

Status UnionReader::OpenParts(const ReaderOptions& options) {
  const ManifestTree& tr = tree();
  const size_t nparts = manifest_.partitions.size();
  std::error_code ec;
  fs::path abs = fs::absolute(path_, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("manifest {}: {}", path_, ec.message()));
  const std::string base = abs.parent_path().string() + "/";
  parts_.resize(nparts);
  for (uint32_t p = 0; p < nparts; ++p) {
    const ManifestPartition& mp = manifest_.partitions[p];
    const std::string where = fmt::format("manifest {}: partition {} ({})", path_, p, mp.ref);
    Result<std::string> local = options.resolve_partition ? options.resolve_partition(base, mp.ref)
                                                          : LocalPartition(base, mp.ref);
    if (!local.ok()) return local.status().WithContext(where);
    ReaderOptions po;
    // The auto size's cap is shared by the partitions.
    po.block_cache_bytes = options.block_cache_bytes != 0
                               ? std::max<size_t>(options.block_cache_bytes / nparts, 1 << 20)
                               : AutoBlockCacheBytes(*local, AutoBlockCacheCap() / nparts);
    po.view = tr.part_views[p];
    po.preload = options.preload;
    Result<std::unique_ptr<IndexReader>> part = IndexReader::Open(*local, po);
    if (!part.ok()) return part.status().WithContext(where);
    SHARDFS_RETURN_IF_ERROR(CheckPartition(where, mp, tr.part_max_inode[p], **part));
    const IndexReader& pr = **part;
    for (uint32_t s = 0; s < pr.shards().size(); ++s) {
      shards_.push_back(pr.shards()[s]);
      shard_paths_.push_back(pr.ShardPath(ShardId{s}));
    }
    parts_[p] = std::move(*part);
    SHARDFS_ASSIGN_OR_RETURN(InodeSet set, InodeSet::Decode(tr.hidden[p]));
    hidden_.push_back(std::move(set));
  }
  return Status::Ok();
}

Status UnionReader::IndexDirs() {
  const ManifestTree& tr = tree();
  const uint64_t total = bases_.back();
  for (size_t i = 0; i < tr.union_dirs.size(); ++i) {
    const UnionDir& d = tr.union_dirs[i];
    const uint64_t g = d.record.inode.value;
    bool bad = g == 0 || g > total || d.record.parent.value == 0 || d.record.parent.value > total ||
               d.record.nlink < 2 || d.copies.empty() || !dirs_.emplace(g, i).second;
    for (const auto& [p, local] : d.copies) {
      bad = bad || local == 0 || local > tr.part_max_inode[p] ||
            !copies_.emplace(Key(p, local), g).second;
    }
    if (!bad) bad = bases_[d.copies.front().first] + d.copies.front().second != g;
    if (bad) {
      return Status::Corruption(fmt::format(
          "manifest {}: {}: union directory {} is not well formed", path_, tr.label(), g));
    }
  }
  if (!dirs_.contains(kRootInode.value)) {
    return Status::Corruption(fmt::format("manifest {}: {}: no root", path_, tr.label()));
  }
  for (const NlinkOverride& n : tr.nlinks) nlinks_[Key(n.partition, n.inode)] = n.nlink;
  return Status::Ok();
}

void UnionReader::Describe() {
  const ManifestTree& tr = tree();
  const uint64_t total = bases_.back();
  VersionInfo& v = version_;
  v.name = tr.name;
  v.version = tr.version;
  v.record = TreeRecord(tr, static_cast<uint32_t>(tree_));
  v.record.shard_count = static_cast<uint32_t>(shards_.size());
  meta_[std::string(kMetaSchemaVersion)] = std::to_string(kSchemaVersion);
  meta_[std::string(kMetaFiles)] = std::to_string(tr.files);
  meta_[std::string(kMetaDirs)] = std::to_string(tr.dirs);
  meta_[std::string(kMetaSymlinks)] = std::to_string(tr.symlinks);
  meta_[std::string(kMetaBytes)] = std::to_string(tr.bytes);
  meta_[std::string(kMetaMaxInode)] = std::to_string(total);
  meta_["partitions"] = std::to_string(manifest_.partitions.size());
  std::string checksums;
  for (const auto& part : parts_) {
    if (!part) continue;
    std::string c = part->Meta(kMetaChecksums);
    checksums = checksums.empty() || checksums == c ? c : "mixed";
  }
  if (!checksums.empty()) meta_[std::string(kMetaChecksums)] = checksums;
}

Result<std::unique_ptr<UnionReader>> UnionReader::Open(const std::string& path,
                                                       const ReaderOptions& options) {
  SHARDFS_ASSIGN_OR_RETURN(Manifest m, ReadManifest(path));
  std::unique_ptr<UnionReader> r(new UnionReader());
  r->path_ = path;
  const std::string encoded = EncodeManifest(m);
  r->db_identity_ = fmt::format("manifest-{:016x}", XXH3_64bits(encoded.data(), encoded.size()));
  r->manifest_ = std::move(m);
  SHARDFS_RETURN_IF_ERROR(FindTree(r->manifest_, path, options.view, &r->tree_).status());
  SHARDFS_RETURN_IF_ERROR(r->LayOut());
  SHARDFS_RETURN_IF_ERROR(r->OpenParts(options));
  SHARDFS_RETURN_IF_ERROR(r->IndexDirs());
  r->Describe();
  if (options.world != 0) SHARDFS_RETURN_IF_ERROR(r->LoadRanks(options));
  r->catalog_ = std::make_unique<Catalog>(&r->manifest_, path);
  return r;
}

UnionReader::UnionReader() = default;
UnionReader::~UnionReader() = default;

std::vector<const IndexReader*> UnionReader::partitions() const {
  std::vector<const IndexReader*> out;
  for (const auto& p : parts_) out.push_back(p.get());
  return out;
}

uint64_t UnionReader::DiskBytes() const {
  struct stat st;
  uint64_t total = ::stat(path_.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  for (const auto& part : parts_) total += part ? part->DiskBytes() : 0;
  return total;
}

const UnionDir* UnionReader::FindDir(uint64_t global) const {
  auto it = dirs_.find(global);
  return it == dirs_.end() ? nullptr : &tree().union_dirs[it->second];
}

void UnionReader::Translate(uint32_t p, EntryRecord* rec) const {
  if (rec->type == EntryType::kDir) {
    if (auto it = copies_.find(Key(p, rec->inode.value)); it != copies_.end()) {
      *rec = FindDir(it->second)->record;
      return;
    }
  }
  const uint64_t local = rec->inode.value;
  rec->inode = InodeId{bases_[p] + local};
  auto parent = copies_.find(Key(p, rec->parent.value));
  rec->parent = InodeId{parent != copies_.end() ? parent->second : bases_[p] + rec->parent.value};
  if (rec->type != EntryType::kDir) {
    if (auto n = nlinks_.find(Key(p, local)); n != nlinks_.end()) rec->nlink = n->second;
  }
  if (rec->type == EntryType::kFile) rec->shard = ShardId{shard_bases_[p] + rec->shard.value};
}

bool UnionReader::Shown(const EntryRecord& rec) const { return !share_ || share_->Holds(rec); }

bool UnionReader::Pick(uint32_t p, EntryRecord* rec) const {
  if (rec->type == EntryType::kDir && copies_.contains(Key(p, rec->inode.value))) {
    *rec = FindDir(copies_.at(Key(p, rec->inode.value)))->record;
    return true;
  }
  if (hidden_[p].Contains(rec->inode.value)) return false;
  Translate(p, rec);
  return true;
}

Result<std::vector<uint64_t>> UnionReader::ShardBytes() const {
  std::vector<uint64_t> all;
  for (size_t p = 0; p < parts_.size(); ++p) {
    std::vector<uint64_t> bytes = tree().shard_bytes[p];
    bytes.resize(manifest_.partitions[p].shard_count, 0);
    all.insert(all.end(), bytes.begin(), bytes.end());
  }
  return all;
}

Status UnionReader::GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  const uint64_t g = inode.value;
  if (g == 0 || g > bases_.back()) return Status::NotFound("no such inode");
  if (const UnionDir* d = FindDir(g)) {
    if (!Shown(d->record)) return Status::NotFound("no such inode");
    *rec = d->record;
    return Status::Ok();
  }
  const uint32_t p = PartitionOf(g);
  const uint64_t local = g - bases_[p];
  if (!parts_[p] || hidden_[p].Contains(local)) return Status::NotFound("no such inode");
  SHARDFS_RETURN_IF_ERROR(parts_[p]->GetInode(InodeId{local}, rec, holder));
  Translate(p, rec);
  if (!Shown(*rec)) return Status::NotFound("no such inode");
  return CheckFileRange(*rec);
}

Status UnionReader::Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                           RecordHolder* holder) const {
  const uint64_t g = parent.value;
  if (g == 0 || g > bases_.back()) return Status::NotFound("no such entry");
  if (const UnionDir* d = FindDir(g)) {
    for (auto c = d->copies.rbegin(); c != d->copies.rend(); ++c) {
      const auto& [p, local] = *c;
      if (!parts_[p]) continue;
      Status s = parts_[p]->Lookup(InodeId{local}, name, rec, holder);
      if (s.code() == Status::Code::kNotFound) continue;
      SHARDFS_RETURN_IF_ERROR(s);
      if (!Pick(p, rec)) continue;
      return Shown(*rec) ? Status::Ok() : Status::NotFound("no such entry");
    }
    return Status::NotFound("no such entry");
  }
  const uint32_t p = PartitionOf(g);
  const uint64_t local = g - bases_[p];
  if (!parts_[p] || hidden_[p].Contains(local)) return Status::NotFound("no such entry");
  SHARDFS_RETURN_IF_ERROR(parts_[p]->Lookup(InodeId{local}, name, rec, holder));
  if (!Pick(p, rec) || !Shown(*rec)) return Status::NotFound("no such entry");
  return Status::Ok();
}

Status UnionReader::ForEachChild(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  return ForEachChildIn(dir, start_after, fn, share_ != nullptr);
}

Status UnionReader::ForEachChildIn(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn, bool ranked) const {
  const uint64_t g = dir.value;
  if (g == 0 || g > bases_.back()) return Status::Ok();
  const UnionDir* d = FindDir(g);
  if (!d) {
    const uint32_t p = PartitionOf(g);
    const uint64_t local = g - bases_[p];
    if (!parts_[p] || hidden_[p].Contains(local)) return Status::Ok();
    return parts_[p]->ForEachChild(
        InodeId{local}, start_after, [&](std::string_view name, const EntryRecord& child) {
          EntryRecord rec = child;
          return !Pick(p, &rec) || (ranked && !Shown(rec)) || fn(name, rec);
        });
  }
  std::vector<ChildCursor> cursors;
  for (const auto& [p, local] : d->copies) {
    if (parts_[p]) cursors.emplace_back(parts_[p].get(), p, InodeId{local}, start_after);
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
      found = Pick((*c)->partition(), &rec);
    }
    if (found && (!ranked || Shown(rec)) && !fn(*least, rec)) return Status::Ok();
    for (ChildCursor* c : same) c->Next();
  }
}

Status UnionReader::ForEachInode(InodeId first,
                                 const std::function<bool(const EntryRecord&)>& fn) const {
  if (first.value > bases_.back()) return Status::Ok();
  const uint32_t from = first.value == 0 ? 0 : PartitionOf(first.value);
  bool stopped = false;
  for (uint32_t p = from; p < parts_.size() && !stopped; ++p) {
    if (!parts_[p]) continue;
    const uint64_t start = p == from && first.value > bases_[p] ? first.value - bases_[p] : 1;
    SHARDFS_RETURN_IF_ERROR(parts_[p]->ForEachInode(InodeId{start}, [&](const EntryRecord& child) {
      EntryRecord rec = child;
      const bool canonical =
          rec.type == EntryType::kDir && copies_.contains(Key(p, rec.inode.value));
      if (!canonical && hidden_[p].Contains(rec.inode.value)) return true;
      if (canonical && !hidden_[p].Contains(rec.inode.value)) {
        if (!Pick(p, &rec)) return true;
      } else if (canonical) {
        return true;  // Another partition's copy carries it.
      } else {
        Translate(p, &rec);
      }
      if (!Shown(rec)) return true;
      if (!fn(rec)) stopped = true;
      return !stopped;
    }));
  }
  return Status::Ok();
}

Result<std::pair<const IndexReader*, ShardId>> UnionReader::PartitionOfShard(ShardId shard) const {
  const auto& b = shard_bases_;
  auto it = std::upper_bound(b.begin(), b.end(), shard.value);
  if (it == b.begin()) return Status::NotFound("no such shard");
  const size_t p = static_cast<size_t>(it - b.begin()) - 1;
  if (p >= parts_.size() || !parts_[p]) {
    return Status::NotFound(fmt::format("shard {}: its partition is not open", shard.value));
  }
  return std::pair<const IndexReader*, ShardId>(parts_[p].get(), ShardId{shard.value - b[p]});
}

Status UnionReader::ForEachSeekKey(
    ShardId shard,
    const std::function<bool(std::string_view suffix, std::string_view value)>& fn) const {
  SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
  return part.first->ForEachSeekKey(part.second, fn);
}

Status UnionReader::GetSeekSums(ShardId shard, std::string* value) const {
  SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
  return part.first->GetSeekSums(part.second, value);
}

Status UnionReader::GetSeekValue(ShardId shard, bool window, uint32_t point,
                                 std::string* value) const {
  SHARDFS_ASSIGN_OR_RETURN(auto part, PartitionOfShard(shard));
  return part.first->GetSeekValue(part.second, window, point, value);
}

}  // namespace shardfs::index
