#include "index/index_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include "index/db_options.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

bool StartsWith(const rocksdb::Slice& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.IsNotFound()) return Status::NotFound(std::string(what));
  if (s.IsCorruption()) return Status::Corruption(fmt::format("{}: {}", what, s.ToString()));
  return Status::IoError(fmt::format("{}: {}", what, s.ToString()));
}

}  // namespace

const char* EntryTypeName(EntryType type) {
  switch (type) {
    case EntryType::kDir: return "dir";
    case EntryType::kSymlink: return "symlink";
    default: return "file";
  }
}

IndexReader::~IndexReader() = default;

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       const ReaderOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("index {}: no such index", path));
    return Status::FromErrno(errno, fmt::format("index {}", path));
  }
  if (!S_ISDIR(st.st_mode) || ::access((path + "/CURRENT").c_str(), F_OK) != 0) {
    return Status::InvalidArgument(
        fmt::format("index {}: not a shardfs index (no RocksDB database in it)", path));
  }
  std::unique_ptr<IndexReader> r(new IndexReader());
  r->path_ = path;
  r->view_ = options.view;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(ReaderDbOptions(options.block_cache_bytes), path, &raw);
  if (!s.ok()) {
    return Status::InvalidArgument(
        fmt::format("index {}: cannot open as a shardfs index: {}", path, s.ToString()));
  }
  r->db_.reset(raw);

  std::unique_ptr<rocksdb::Iterator> it(r->db_->NewIterator(rocksdb::ReadOptions()));
  const std::string meta_prefix(1, kMetaPrefix);
  for (it->Seek(meta_prefix); it->Valid() && StartsWith(it->key(), meta_prefix); it->Next()) {
    r->meta_.emplace(std::string(View(it->key()).substr(1)), it->value().ToString());
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path));
  auto version = r->meta_.find(std::string(kMetaSchemaVersion));
  if (version == r->meta_.end()) {
    return Status::InvalidArgument(
        fmt::format("index {}: not a shardfs index (no schema version; an interrupted build?)",
                    path));
  }
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(version->second.data(),
                                 version->second.data() + version->second.size(), v);
  if (ec != std::errc() || v == 0) {
    return Status::Corruption(
        fmt::format("index {}: unreadable schema version '{}'", path, version->second));
  }
  if (v > kSchemaVersion) {
    return Status::NotSupported(fmt::format(
        "index {}: schema version {} is newer than this shardfs understands ({}); upgrade shardfs",
        path, v, kSchemaVersion));
  }

  const std::string shard_prefix(1, kShardPrefix);
  fs::path base = fs::absolute(path).lexically_normal();
  if (base.filename().empty()) base = base.parent_path();
  base = base.parent_path();
  for (it->Seek(shard_prefix); it->Valid() && StartsWith(it->key(), shard_prefix); it->Next()) {
    ShardId id;
    ShardMeta meta;
    if (!DecodeShardKey(View(it->key()), &id) || id.value != r->shards_.size()) {
      return Status::Corruption(fmt::format("index {}: shard table is not dense", path));
    }
    SHARDFS_RETURN_IF_ERROR(
        DecodeShardMeta(View(it->value()), &meta).WithContext(fmt::format("index {}", path)));
    r->shard_paths_.push_back((meta.flags & kShardPathRelative) ? (base / meta.path).string()
                                                                : meta.path);
    r->shards_.push_back(std::move(meta));
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path));
  // Last: the readahead would otherwise queue ahead of the reads above.
  if (options.prefetch) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.path().extension() != ".sst") continue;
      int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);  // Starts I/O, does not wait.
      ::close(fd);
    }
  }
  return r;
}

Status IndexReader::Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                           RecordHolder* holder) const {
  if (name.size() > kMaxNameLength) return Status::NotFound("name too long");
  holder->Reset();  // A holder may be reused; RocksDB needs it unpinned.
  DirentKeyBuffer buf;
  std::string_view key = EncodeDirentKey(view_, parent, name, buf);
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                               rocksdb::Slice(key.data(), key.size()), holder);
  if (s.IsNotFound()) return Status::NotFound("no such entry");
  if (!s.ok()) return FromRocks(s, "lookup");
  return DecodeEntry(View(*holder), rec);
}

Status IndexReader::GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const {
  holder->Reset();  // A holder may be reused; RocksDB needs it unpinned.
  InodeKeyBuffer buf;
  std::string_view key = EncodeInodeKey(view_, inode, buf);
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                               rocksdb::Slice(key.data(), key.size()), holder);
  if (s.IsNotFound()) return Status::NotFound("no such inode");
  if (!s.ok()) return FromRocks(s, "getattr");
  return DecodeEntry(View(*holder), rec);
}

Status IndexReader::ForEachChild(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  DirentKeyBuffer buf;
  std::string_view prefix = EncodeDirentPrefix(view_, dir, buf);
  std::string upper(prefix);
  // The prefix ends in the inode's last byte; bump it for an exclusive bound.
  // (Carry over 0xff bytes: the inode fields are fixed width big-endian.)
  for (size_t i = upper.size(); i-- > 1;) {
    if (static_cast<unsigned char>(upper[i]) != 0xff) {
      upper[i] = static_cast<char>(static_cast<unsigned char>(upper[i]) + 1);
      break;
    }
    upper[i] = 0;
  }
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::string seek(prefix);
  if (!start_after.empty()) {
    seek.append(start_after);
    seek.push_back('\0');  // The smallest key after start_after.
  }
  for (it->Seek(seek); it->Valid(); it->Next()) {
    std::string_view key = View(it->key());
    if (key.compare(0, prefix.size(), prefix) != 0) break;
    EntryRecord rec;
    SHARDFS_RETURN_IF_ERROR(DecodeEntry(View(it->value()), &rec));
    if (!fn(key.substr(prefix.size()), rec)) break;
  }
  if (!it->status().ok()) return FromRocks(it->status(), "readdir");
  return Status::Ok();
}

Status IndexReader::Resolve(std::string_view path, EntryRecord* rec,
                            RecordHolder* holder) const {
  SHARDFS_RETURN_IF_ERROR(GetInode(kRootInode, rec, holder));
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view comp = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (comp.empty() || comp == ".") continue;
    if (rec->type != EntryType::kDir) return Status::NotFound("not a directory");
    InodeId parent = rec->inode;
    holder->Reset();
    SHARDFS_RETURN_IF_ERROR(Lookup(parent, comp, rec, holder));
  }
  return Status::Ok();
}

Status IndexReader::ForEachInode(InodeId first,
                                 const std::function<bool(const EntryRecord&)>& fn) const {
  InodeKeyBuffer buf;
  std::string_view start = EncodeInodeKey(view_, first, buf);
  // Keys of this view's inodes share the type byte and the view id.
  std::string prefix(start.substr(0, kInodeKeySize - 8));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid(); it->Next()) {
    std::string_view key = View(it->key());
    if (key.compare(0, prefix.size(), prefix) != 0) break;
    EntryRecord rec;
    SHARDFS_RETURN_IF_ERROR(DecodeEntry(View(it->value()), &rec));
    if (!fn(rec)) return Status::Ok();
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
  std::string v = Meta(name);
  uint64_t n = 0;
  std::from_chars(v.data(), v.data() + v.size(), n);
  return n;
}

uint64_t IndexReader::DiskBytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

}  // namespace shardfs::index
