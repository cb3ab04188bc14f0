#include "index/index_reader.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/table_properties.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/fd.h"
#include "base/parse.h"
#include "base/strings.h"
#include "index/db_options.h"
#include "index/member_path.h"
#include "index/rank_partition.h"
#include "index/rocks_util.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

// NotFound if `path` does not exist, InvalidArgument if it is not a
// directory holding a RocksDB database.
Status CheckIndexDirectory(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("index {}: no such index", path));
    return Status::FromErrno(errno, fmt::format("index {}", path));
  }
  if (!S_ISDIR(st.st_mode) || ::access(JoinPath(path, "CURRENT").c_str(), F_OK) != 0) {
    return Status::InvalidArgument(
        fmt::format("index {}: not a shardfs index (no RocksDB database in it)", path));
  }
  return Status::Ok();
}

// Asks the kernel, without waiting, to read the table files of the index at
// `path` into the page cache.
void PreloadTables(const std::string& path) {
  std::error_code ec;
  for (fs::directory_iterator d(path, ec); !ec && d != fs::directory_iterator(); d.increment(ec)) {
    if (d->path().extension() != ".sst") continue;
    UniqueFd fd(::open(d->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);  // Starts I/O, does not wait.
  }
}

}  // namespace

const char* EntryTypeName(EntryType type) {
  switch (type) {
    case EntryType::kDir:
      return "dir";
    case EntryType::kSymlink:
      return "symlink";
    default:
      return "file";
  }
}

IndexReader::IndexReader() = default;
IndexReader::~IndexReader() = default;

bool IsShardfsIndex(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (::lstat(JoinPath(path, "CURRENT").c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::OpenForReadOnly(ReaderDbOptions(1 << 20), path, &raw).ok()) return false;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string version;
  return db->Get(rocksdb::ReadOptions(), EncodeMetaKey(kMetaSchemaVersion), &version).ok();
}

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       const ReaderOptions& options) {
  if (IsManifestFile(path)) return OpenManifest(path, options);
  SHARDFS_RETURN_IF_ERROR(CheckIndexDirectory(path));
  std::unique_ptr<IndexReader> r(new IndexReader());
  r->path_ = path;
  rocksdb::DB* raw = nullptr;
  // A `view create` or `index add` may be switching the database to a new
  // manifest at this moment (the old one is gone between reading CURRENT
  // and opening it): a few tries, then the error.
  rocksdb::Status s;
  const size_t block_cache = options.block_cache_bytes != 0
                                 ? options.block_cache_bytes
                                 : AutoBlockCacheBytes(path, AutoBlockCacheCap());
  for (int attempt = 0;; ++attempt) {
    s = rocksdb::DB::OpenForReadOnly(ReaderDbOptions(block_cache), path, &raw);
    if (s.ok() || attempt == 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (!s.ok()) {
    return Status::InvalidArgument(
        fmt::format("index {}: cannot open as a shardfs index: {}", path, s.ToString()));
  }
  r->db_.reset(raw);
  if (!r->db_->GetDbIdentity(r->db_identity_).ok()) r->db_identity_.clear();
  SHARDFS_RETURN_IF_ERROR(r->LoadMeta());
  SHARDFS_RETURN_IF_ERROR(r->CheckSchemaVersion());
  SHARDFS_RETURN_IF_ERROR(r->LoadShards(options.shard_base));
  SHARDFS_RETURN_IF_ERROR(r->ValidateMeta());
  SHARDFS_RETURN_IF_ERROR(r->LoadVersion(options));
  if (options.world != 0) SHARDFS_RETURN_IF_ERROR(r->LoadRanks(options));
  // Last: the readahead would otherwise queue ahead of the reads above.
  if (options.preload) PreloadTables(path);
  return r;
}

struct IndexReader::Overlay {
  ViewId view;
  uint64_t base_max = 0;
  VersionSets sets;
};

struct IndexReader::Ranks {
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t seed = 0;
  bool keep_dirs = false;
  std::vector<bool> shard_in_rank;
  // Directories known to hold something of this rank, or not.
  mutable std::mutex mu;
  mutable std::unordered_map<uint64_t, bool> dirs;
};

Status IndexReader::LoadVersion(const ReaderOptions& options) {
  VersionRecord default1;
  default1.view = kDefaultView;
  default1.shard_count = static_cast<uint32_t>(shards_.size());
  default1.max_inode = default1.base_max_inode = MetaNumber(kMetaMaxInode);
  default1.files = MetaNumber(kMetaFiles);
  default1.dirs = MetaNumber(kMetaDirs);
  default1.symlinks = MetaNumber(kMetaSymlinks);
  default1.bytes = MetaNumber(kMetaBytes);
  default1.message = "index build";
  catalog_ = std::make_unique<Catalog>(db_.get(), path_, default1);
  SHARDFS_ASSIGN_OR_RETURN(ViewSpec spec, ParseViewSpec(options.view));
  SHARDFS_ASSIGN_OR_RETURN(version_, catalog_->FindVersion(spec));
  const VersionRecord& v = version_.record;
  if (v.view == kDefaultView) return Status::Ok();
  if (v.base_max_inode != max_inode_ || v.shard_count > shards_.size()) {
    return Status::Corruption(fmt::format(
        "index {}: {} was made over a base of {} inodes and {} shards, but the base has {} and {}",
        path_, version_.label(), v.base_max_inode, v.shard_count, max_inode_, shards_.size()));
  }
  overlay_ = std::make_unique<Overlay>();
  overlay_->view = v.view;
  overlay_->base_max = v.base_max_inode;
  SHARDFS_ASSIGN_OR_RETURN(overlay_->sets, ReadVersionSets(db_.get(), path_, v.view));
  max_inode_ = v.max_inode;
  return Status::Ok();
}

Status IndexReader::LoadRanks(const ReaderOptions& options) {
  if (options.rank >= options.world) {
    return Status::InvalidArgument(fmt::format("rank {} of world {}: expected a rank below {}",
                                               options.rank, options.world, options.world));
  }
  SHARDFS_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes, ShardBytes());
  // Only now: the count above must see every file of the view.
  ranks_ = std::make_unique<Ranks>();
  ranks_->rank = options.rank;
  ranks_->world = options.world;
  ranks_->seed = options.seed;
  ranks_->keep_dirs = options.rank_keep_dirs;
  shard_ranks_ = options.shard_ranks.empty()
                     ? AssignShardsToRanks(bytes, options.world, options.seed)
                     : options.shard_ranks;
  shard_ranks_.resize(version_.record.shard_count, options.world);
  ranks_->shard_in_rank.resize(shards_.size(), false);
  for (size_t i = 0; i < shard_ranks_.size(); ++i) {
    ranks_->shard_in_rank[i] = shard_ranks_[i] == options.rank;
  }
  return CheckRankHasBytes(path_, bytes, shard_ranks_, options.rank, options.world);
}

Result<std::vector<uint64_t>> IndexReader::ShardBytes() const {
  if (union_) return UnionShardBytes();
  Result<std::vector<uint64_t>> stored = ReadShardBytes(db_.get(), version_.record.view);
  std::vector<uint64_t> bytes;
  if (stored.ok()) {
    bytes = std::move(*stored);
  } else if (stored.status().code() == Status::Code::kNotFound) {
    // An index built before shard bytes were stored: count them once.
    bytes.assign(shards_.size(), 0);
    SHARDFS_RETURN_IF_ERROR(ForEachInode(InodeId{1}, [&](const EntryRecord& rec) {
      if (rec.type == EntryType::kFile && rec.shard.value < bytes.size()) {
        bytes[rec.shard.value] += StoredBytes(rec);
      }
      return true;
    }));
  } else {
    return stored.status().WithContext(fmt::format("index {}", path_));
  }
  bytes.resize(version_.record.shard_count, 0);
  return bytes;
}

const VersionSets* IndexReader::version_sets() const {
  return overlay_ ? &overlay_->sets : nullptr;
}

bool IndexReader::InRank(const EntryRecord& rec) const {
  if (!ranks_) return true;
  switch (rec.type) {
    case EntryType::kFile:
      return rec.shard.value < ranks_->shard_in_rank.size() &&
             ranks_->shard_in_rank[rec.shard.value];
    case EntryType::kSymlink:
      return RankOfSymlink(rec.inode.value, ranks_->world, ranks_->seed) == ranks_->rank;
    case EntryType::kDir:
      return ranks_->keep_dirs || rec.inode == kRootInode || DirInRank(rec.inode);
  }
  return false;
}

bool IndexReader::DirInRank(InodeId dir) const {
  {
    std::lock_guard lock(ranks_->mu);
    auto it = ranks_->dirs.find(dir.value);
    if (it != ranks_->dirs.end()) return it->second;
  }
  // Something below it is of this rank, or it is empty in the view (then
  // every rank shows it). Computed outside the lock; two threads may both
  // compute the same answer.
  bool empty = true;
  bool found = false;
  Status s = ForEachChildRaw(dir, "", [&](std::string_view, const EntryRecord& child) {
    empty = false;
    found = child.type == EntryType::kDir ? DirInRank(child.inode) : InRank(child);
    return !found;
  });
  const bool in = !s.ok() || found || empty;  // On an error, show it: reads report the error.
  std::lock_guard lock(ranks_->mu);
  ranks_->dirs.emplace(dir.value, in);
  return in;
}

Status IndexReader::DecodeChecked(const rocksdb::Slice& value, EntryRecord* rec) const {
  Status s = DecodeEntry(SliceBytes(value), rec);
  if (!s.ok()) return s.WithContext(fmt::format("index {}", path_));
  return CheckRecord(*rec);
}

const std::string& IndexReader::ShardPath(ShardId id) const {
  static const std::string kNone;
  return id.value < shard_paths_.size() ? shard_paths_[id.value] : kNone;
}

Status IndexReader::CheckRecord(const EntryRecord& rec) const {
  const uint64_t inode = rec.inode.value;
  if (inode == 0 || inode > max_inode_ || rec.parent.value == 0 || rec.parent.value > max_inode_) {
    return Status::Corruption(
        fmt::format("index {}: record of inode {} with parent {}: expected both in 1..{}", path_,
                    inode, rec.parent.value, max_inode_));
  }
  if (rec.nlink == 0) {
    return Status::Corruption(
        fmt::format("index {}: inode {}: link count 0, expected at least 1", path_, inode));
  }
  if ((rec.mode & S_IFMT) != ModeTypeBits(rec.type)) {
    return Status::Corruption(
        fmt::format("index {}: inode {}: mode {:o} does not match its type {}", path_, inode,
                    rec.mode, EntryTypeName(rec.type)));
  }
  return Status::Ok();
}

Result<uint64_t> IndexReader::DecodedSize(ShardId shard) const {
  std::call_once(decoded_sizes_once_, [this] {
    decoded_sizes_ = std::make_unique<std::atomic<uint64_t>[]>(shards_.size());
  });
  std::atomic<uint64_t>& known = decoded_sizes_[shard.value];
  if (uint64_t v = known.load(std::memory_order_acquire); v != 0) return v - 1;
  std::string value;
  SeekTable table;
  Status s = GetSeekValue(shard, false, 0, &value);
  if (s.ok()) s = DecodeSeekTable(value, &table);
  if (!s.ok()) {
    return Status::Corruption(
        fmt::format("index {}: shard {}: seek table: {}", path_, shard.value, s.message()));
  }
  if (table.decoded_size < UINT64_MAX) {
    known.store(table.decoded_size + 1, std::memory_order_release);
  }
  return table.decoded_size;
}

Status IndexReader::CheckFileRange(const EntryRecord& rec) const {
  if (rec.type != EntryType::kFile) return Status::Ok();
  const uint64_t inode = rec.inode.value;
  if (rec.shard.value >= shards_.size()) {
    return Status::Corruption(
        fmt::format("index {}: inode {}: in shard {}, but the shard table has {} shards", path_,
                    inode, rec.shard.value, shards_.size()));
  }
  uint64_t shard_size = shards_[rec.shard.value].size;
  std::string_view has = "has";
  // A compressed tar shard's offsets are in its decoded stream (an encoded
  // member's, read from the shard's own bytes, are not).
  if (shards_[rec.shard.value].codec() != Codec::kNone && !rec.encoded()) {
    SHARDFS_ASSIGN_OR_RETURN(shard_size, DecodedSize(rec.shard));
    has = "decodes to";
  }
  if (rec.sparse()) {
    // DecodeEntry checked order and the logical bounds; here the shard's.
    for (size_t i = 0; i < ExtentCount(rec); ++i) {
      Extent e = GetExtent(rec, i);
      if (e.physical > shard_size || e.length > shard_size - e.physical) {
        return Status::Corruption(fmt::format(
            "index {}: inode {}: extent {}: {} bytes at byte {} of shard {}, which {} {} bytes",
            path_, inode, i, e.length, e.physical, rec.shard.value, has, shard_size));
      }
    }
    return Status::Ok();
  }
  const Extent stored = StoredRange(rec);  // An encoded member: its compressed bytes.
  if (stored.physical > shard_size || stored.length > shard_size - stored.physical) {
    return Status::Corruption(
        fmt::format("index {}: inode {}: {} bytes at byte {} of shard {}, which {} {} bytes", path_,
                    inode, stored.length, stored.physical, rec.shard.value, has, shard_size));
  }
  return Status::Ok();
}

Status IndexReader::Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                           RecordHolder* holder) const {
  if (union_) return UnionLookup(parent, name, rec, holder);
  SHARDFS_RETURN_IF_ERROR(LookupRaw(parent, name, rec, holder));
  if (!InRank(*rec)) return Status::NotFound("no such entry");
  return Status::Ok();
}

Status IndexReader::LookupRaw(InodeId parent, std::string_view name, EntryRecord* rec,
                              RecordHolder* holder) const {
  if (name.size() > kMaxNameLength) return Status::NotFound("name too long");
  holder->Reset();  // A holder may be reused; RocksDB needs it unpinned.
  if (overlay_ && overlay_->sets.parents.Contains(parent.value)) {
    const std::string key = EncodeViewDirentKey(overlay_->view, parent, name);
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), key, holder);
    if (s.ok()) return DecodeChecked(*holder, rec);
    if (!s.IsNotFound()) return FromRocks(s, "lookup");
    holder->Reset();
  }
  if (overlay_ && parent.value > overlay_->base_max) return Status::NotFound("no such entry");
  DirentKeyBuffer buf;
  std::string_view key = EncodeDirentKey(kDefaultView, parent, name, buf);
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                               rocksdb::Slice(key.data(), key.size()), holder);
  if (s.IsNotFound()) return Status::NotFound("no such entry");
  if (!s.ok()) return FromRocks(s, "lookup");
  SHARDFS_RETURN_IF_ERROR(DecodeChecked(*holder, rec));
  if (overlay_) {
    // A default@1 name of a hidden inode is not in the version; a changed
    // record is in the overlay.
    if (overlay_->sets.hidden.Contains(rec->inode.value)) return Status::NotFound("no such entry");
    if (overlay_->sets.overlaid.Contains(rec->inode.value)) {
      return GetInodeRecord(rec->inode, rec, holder);
    }
  }
  return Status::Ok();
}

Status IndexReader::GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  if (union_) return UnionGetInode(inode, rec, holder);
  SHARDFS_RETURN_IF_ERROR(GetInodeRecord(inode, rec, holder));
  if (!InRank(*rec)) return Status::NotFound("no such inode");
  return CheckFileRange(*rec);
}

Status IndexReader::GetInodeRecord(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  holder->Reset();  // A holder may be reused; RocksDB needs it unpinned.
  InodeKeyBuffer buf;
  std::string overlay_key;
  std::string_view key;
  if (overlay_ && overlay_->sets.overlaid.Contains(inode.value)) {
    overlay_key = EncodeViewInodeKey(overlay_->view, inode);
    key = overlay_key;
  } else if (overlay_ &&
             (inode.value > overlay_->base_max || overlay_->sets.hidden.Contains(inode.value))) {
    return Status::NotFound("no such inode");
  } else {
    key = EncodeInodeKey(kDefaultView, inode, buf);
  }
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                               rocksdb::Slice(key.data(), key.size()), holder);
  if (s.IsNotFound()) return Status::NotFound("no such inode");
  if (!s.ok()) return FromRocks(s, "getattr");
  SHARDFS_RETURN_IF_ERROR(DecodeChecked(*holder, rec));
  if (rec->inode != inode) {
    return Status::Corruption(fmt::format("index {}: the record of inode {} says inode {}", path_,
                                          inode.value, rec->inode.value));
  }
  return Status::Ok();
}

namespace {

// An iterator over the keys that start with one prefix, from a seek key on.
class PrefixCursor {
 public:
  PrefixCursor(rocksdb::DB* db, std::string_view prefix, std::string_view start_after)
      : prefix_(prefix), upper_(prefix) {
    // The smallest key after every key with the prefix: bump its last byte
    // that is not 0xff (the prefixes here end in a fixed-width integer).
    size_t i = upper_.size();
    while (i > 1 && static_cast<unsigned char>(upper_[i - 1]) == 0xff) upper_[--i] = 0;
    if (i > 1) upper_[i - 1] = static_cast<char>(static_cast<unsigned char>(upper_[i - 1]) + 1);
    upper_slice_ = rocksdb::Slice(upper_);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper_slice_;
    it_.reset(db->NewIterator(ro));
    std::string seek(prefix);
    if (!start_after.empty()) {
      seek.append(start_after);
      seek.push_back('\0');  // The smallest key after start_after.
    }
    it_->Seek(seek);
  }
  bool Valid() const { return it_->Valid() && SliceBytes(it_->key()).starts_with(prefix_); }
  std::string_view name() const { return SliceBytes(it_->key()).substr(prefix_.size()); }
  rocksdb::Slice value() const { return it_->value(); }
  void Next() { it_->Next(); }
  rocksdb::Status status() const { return it_->status(); }

 private:
  std::string prefix_;
  std::string upper_;
  rocksdb::Slice upper_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

}  // namespace

Status IndexReader::ForEachChild(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  if (union_) return UnionForEachChild(dir, start_after, fn);
  if (!ranks_) return ForEachChildRaw(dir, start_after, fn);
  return ForEachChildRaw(dir, start_after, [&](std::string_view name, const EntryRecord& rec) {
    return !InRank(rec) || fn(name, rec);
  });
}

Status IndexReader::ForEachChildRaw(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  std::optional<PrefixCursor> base, over;
  if (!overlay_ || dir.value <= overlay_->base_max) {
    DirentKeyBuffer buf;
    base.emplace(db_.get(), EncodeDirentPrefix(kDefaultView, dir, buf), start_after);
  }
  if (overlay_ && overlay_->sets.parents.Contains(dir.value)) {
    over.emplace(db_.get(), EncodeViewDirentKey(overlay_->view, dir, ""), start_after);
  }
  RecordHolder holder;  // For the overlay record of a default@1 name.
  for (;;) {
    const bool b = base && base->Valid();
    const bool o = over && over->Valid();
    if (!b && !o) break;
    EntryRecord rec;
    std::string_view name;
    // Names in both: the overlay's (a default@1 name there is always hidden).
    if (o && (!b || over->name() <= base->name())) {
      if (b && over->name() == base->name()) base->Next();
      name = over->name();
      SHARDFS_RETURN_IF_ERROR(DecodeChecked(over->value(), &rec));
      if (!fn(name, rec)) return Status::Ok();
      over->Next();
      continue;
    }
    name = base->name();
    SHARDFS_RETURN_IF_ERROR(DecodeChecked(base->value(), &rec));
    if (overlay_) {
      if (overlay_->sets.hidden.Contains(rec.inode.value)) {
        base->Next();
        continue;
      }
      if (overlay_->sets.overlaid.Contains(rec.inode.value)) {
        SHARDFS_RETURN_IF_ERROR(GetInodeRecord(rec.inode, &rec, &holder));
      }
    }
    if (!fn(name, rec)) return Status::Ok();
    base->Next();
  }
  if (base && !base->status().ok()) return FromRocks(base->status(), "readdir");
  if (over && !over->status().ok()) return FromRocks(over->status(), "readdir");
  return Status::Ok();
}

Status IndexReader::LookupPath(std::string_view path, EntryRecord* rec,
                               RecordHolder* holder) const {
  SHARDFS_RETURN_IF_ERROR(GetInode(kRootInode, rec, holder));
  for (std::string_view comp : PathComponents(path)) {
    if (comp == ".") continue;
    if (rec->type != EntryType::kDir) return Status::NotFound("not a directory");
    InodeId parent = rec->inode;
    holder->Reset();
    SHARDFS_RETURN_IF_ERROR(Lookup(parent, comp, rec, holder));
  }
  return Status::Ok();
}

Status IndexReader::ForEachInode(InodeId first,
                                 const std::function<bool(const EntryRecord&)>& fn) const {
  if (union_) return UnionForEachInode(first, fn);
  // default@1's inodes in order, without the hidden ones and with the
  // overlay's records for the changed ones; then the overlay's own inodes.
  bool stopped = false;
  auto visit = [&](const EntryRecord& rec) -> Status {
    SHARDFS_RETURN_IF_ERROR(CheckFileRange(rec));
    if (InRank(rec) && !fn(rec)) stopped = true;
    return Status::Ok();
  };
  RecordHolder holder;
  if (!overlay_ || first.value <= overlay_->base_max) {
    InodeKeyBuffer buf;
    std::string_view start = EncodeInodeKey(kDefaultView, first, buf);
    // Keys of this view's inodes share the type byte and the view id.
    std::string prefix(start.substr(0, kInodeKeySize - 8));
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid() && !stopped;
         it->Next()) {
      std::string_view key = SliceBytes(it->key());
      if (key.compare(0, prefix.size(), prefix) != 0) break;
      EntryRecord rec;
      SHARDFS_RETURN_IF_ERROR(DecodeChecked(it->value(), &rec));
      ViewId view;
      InodeId inode;
      if (!DecodeInodeKey(key, &view, &inode) || inode != rec.inode) {
        return Status::Corruption(fmt::format("index {}: the record of inode key {} says inode {}",
                                              path_, inode.value, rec.inode.value));
      }
      if (overlay_ && overlay_->sets.overlaid.Contains(inode.value)) {
        SHARDFS_RETURN_IF_ERROR(GetInodeRecord(inode, &rec, &holder));
      } else if (overlay_ && overlay_->sets.hidden.Contains(inode.value)) {
        continue;
      }
      SHARDFS_RETURN_IF_ERROR(visit(rec));
    }
    if (!it->status().ok()) return FromRocks(it->status(), "inode scan");
  }
  if (!overlay_ || stopped) return Status::Ok();
  const uint64_t from = std::max(first.value, overlay_->base_max + 1);
  const std::string prefix = EncodeViewKeyPrefix(overlay_->view, kViewInode);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(EncodeViewInodeKey(overlay_->view, InodeId{from})); it->Valid() && !stopped;
       it->Next()) {
    if (!SliceBytes(it->key()).starts_with(prefix)) break;
    EntryRecord rec;
    SHARDFS_RETURN_IF_ERROR(DecodeChecked(it->value(), &rec));
    SHARDFS_RETURN_IF_ERROR(visit(rec));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "inode scan");
  return Status::Ok();
}

Status IndexReader::PathOf(InodeId inode, std::string* path) const {
  std::vector<std::string> names;
  RecordHolder holder;
  EntryRecord rec;
  SHARDFS_RETURN_IF_ERROR(GetInode(inode, &rec, &holder));
  while (rec.inode != kRootInode) {
    // A well-formed tree is far shallower; a parent cycle is corruption.
    if (names.size() > 4096) return Status::Corruption("parent chain too deep (a cycle?)");
    InodeId self = rec.inode;
    InodeId parent = rec.parent;
    bool found = false;
    SHARDFS_RETURN_IF_ERROR(
        ForEachChild(parent, "", [&](std::string_view name, const EntryRecord& child) {
          if (child.inode != self) return true;
          names.emplace_back(name);
          found = true;
          return false;
        }));
    if (!found) {
      return Status::Corruption(
          fmt::format("inode {} is not in its parent {}", self.value, parent.value));
    }
    holder.Reset();
    SHARDFS_RETURN_IF_ERROR(GetInode(parent, &rec, &holder));
  }
  path->clear();
  for (auto n = names.rbegin(); n != names.rend(); ++n) {
    if (!path->empty()) path->push_back('/');
    path->append(*n);
  }
  return Status::Ok();
}

std::string IndexReader::Meta(std::string_view name) const {
  auto it = meta_.find(std::string(name));
  return it == meta_.end() ? std::string() : it->second;
}

uint64_t IndexReader::MetaNumber(std::string_view name) const {
  auto it = meta_.find(std::string(name));
  if (it == meta_.end()) return 0;
  return ParseDecimal(it->second).value_or(0);
}

uint64_t IndexReader::DiskBytes() const {
  if (!union_) return IndexDiskBytes(path_);
  struct stat st;
  uint64_t total = ::stat(path_.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  for (const IndexReader* part : partitions()) total += part ? part->DiskBytes() : 0;
  return total;
}

uint64_t IndexDiskBytes(const std::string& path) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator d(path, ec); !ec && d != fs::directory_iterator(); d.increment(ec)) {
    std::error_code size_ec;
    if (!d->is_regular_file(size_ec)) continue;
    uint64_t size = d->file_size(size_ec);
    if (!size_ec) total += size;
  }
  return total;
}

}  // namespace shardfs::index
