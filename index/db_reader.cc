// DbReader: the questions, on one index directory (index/db_reader.h).
// Opening it and the checks of its meta are in index/db_reader_open.cc.
#include "index/db_reader.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "base/parse.h"
#include "index/rank_share.h"
#include "index/rocks_util.h"

namespace shardfs::index {

struct DbReader::Overlay {
  ViewId view;
  uint64_t base_max = 0;
  VersionSets sets;
};

DbReader::DbReader() = default;
DbReader::~DbReader() = default;

Status DbReader::LoadVersion(const ReaderOptions& options) {
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

Status DbReader::LoadRanks(const ReaderOptions& options) {
  // The share's walks must see every file of the view: ranks_ is set after,
  // and its listings are the raw ones.
  ChildLister list = [this](InodeId dir, const auto& fn) { return ForEachChildRaw(dir, "", fn); };
  SHARDFS_ASSIGN_OR_RETURN(
      ranks_,
      RankShare::Make(*this, std::move(list),
                      std::min<size_t>(version_.record.shard_count, shards_.size()), options));
  shard_ranks_ = ranks_->ShardRanks();
  shard_ranks_.resize(version_.record.shard_count, options.world);
  return Status::Ok();
}

Result<std::vector<uint64_t>> DbReader::ShardBytes() const {
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

const VersionSets* DbReader::version_sets() const { return overlay_ ? &overlay_->sets : nullptr; }

bool DbReader::InRank(const EntryRecord& rec) const { return !ranks_ || ranks_->Holds(rec); }

Status DbReader::DecodeChecked(const rocksdb::Slice& value, EntryRecord* rec) const {
  Status s = DecodeEntry(SliceBytes(value), rec);
  if (!s.ok()) return s.WithContext(fmt::format("index {}", path_));
  return CheckRecord(*rec);
}

Status DbReader::CheckRecord(const EntryRecord& rec) const {
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

Status DbReader::Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                        RecordHolder* holder) const {
  SHARDFS_RETURN_IF_ERROR(LookupRaw(parent, name, rec, holder));
  if (!InRank(*rec)) return Status::NotFound("no such entry");
  return Status::Ok();
}

Status DbReader::LookupRaw(InodeId parent, std::string_view name, EntryRecord* rec,
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

Status DbReader::GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  SHARDFS_RETURN_IF_ERROR(GetInodeRecord(inode, rec, holder));
  if (!InRank(*rec)) return Status::NotFound("no such inode");
  return CheckFileRange(*rec);
}

Status DbReader::GetInodeRecord(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
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

Status DbReader::ForEachChild(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  if (!ranks_) return ForEachChildRaw(dir, start_after, fn);
  return ForEachChildRaw(dir, start_after, [&](std::string_view name, const EntryRecord& rec) {
    return !InRank(rec) || fn(name, rec);
  });
}

Status DbReader::ForEachChildRaw(
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

Status DbReader::ForEachInode(InodeId first,
                              const std::function<bool(const EntryRecord&)>& fn) const {
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

uint64_t DbReader::DiskBytes() const { return IndexDiskBytes(path_); }

Status DbReader::ForEachSeekKey(
    ShardId shard,
    const std::function<bool(std::string_view suffix, std::string_view value)>& fn) const {
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

Status DbReader::GetSeekSums(ShardId shard, std::string* value) const {
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), EncodeSeekSumsKey(shard), value);
  if (s.IsNotFound()) {
    return Status::NotFound(
        fmt::format("index {}: no interval checksums for shard {}", path_, shard.value));
  }
  if (!s.ok()) return Status::IoError(fmt::format("index {}: {}", path_, s.ToString()));
  return Status::Ok();
}

Status DbReader::GetSeekValue(ShardId shard, bool window, uint32_t point,
                              std::string* value) const {
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
