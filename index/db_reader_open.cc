// DbReader, opening: the database, reading the meta keys and the shard
// table, and the checks that make their values safe to use (see
// index/index_reader.h, "Trust"). The questions themselves are in
// index/db_reader.cc.
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/table_properties.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "base/fd.h"
#include "base/parse.h"
#include "base/strings.h"
#include "index/db_options.h"
#include "index/db_reader.h"
#include "index/rocks_util.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

bool StartsWith(const rocksdb::Slice& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

// A stored value as a message can show it: at most 40 bytes, bytes outside
// printable ASCII as \xNN.
std::string Printable(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < 40; ++i) {
    unsigned char c = static_cast<unsigned char>(v[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (v.size() > 40) out += "...";
  return out;
}

// Meta numbers are what std::to_string writes: decimal digits only (no sign,
// space or base prefix) that fit in 64 bits.
Status ParseMetaNumber(std::string_view index, std::string_view name, std::string_view text,
                       uint64_t* out) {
  if (std::optional<uint64_t> n = ParseDecimal(text)) {
    *out = *n;
    return Status::Ok();
  }
  return Status::Corruption(
      fmt::format("index {}: meta key '{}' is '{}', expected a decimal number below 2^64", index,
                  name, Printable(text)));
}

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

// What of a table file the open and its first lookups read: its first
// blocks, and its end (footer, properties, the top-level index and filter
// and their partitions: about 5% of a table), taken as a sixteenth of the
// table, at least kTableTailMin and at most kTableTailMax.
constexpr uint64_t kTableHead = uint64_t{64} << 10;
constexpr uint64_t kTableTailMin = uint64_t{256} << 10;
constexpr uint64_t kTableTailMax = uint64_t{8} << 20;

// Asks the kernel, without waiting, to read what DB::OpenForReadOnly and the
// checks after it read from the index at `path`: CURRENT, the MANIFEST,
// IDENTITY, OPTIONS, and the head and tail of each table. The open reads
// these one small piece at a time, each waiting on the one before (a table's
// footer names its metaindex, which names its properties and indexes): with
// the page cache cold, each piece one disk read in turn. Asked for together
// they come in one round of reads, and the open then finds them in the page
// cache or on their way. Only advice: what it misses is read as before.
void PrefetchOpenReads(const std::string& path) {
  std::error_code ec;
  for (fs::directory_iterator d(path, ec); !ec && d != fs::directory_iterator(); d.increment(ec)) {
    const std::string name = d->path().filename().string();
    const bool table = d->path().extension() == ".sst";
    if (!table && name != "CURRENT" && name != "IDENTITY" && !name.starts_with("MANIFEST-") &&
        !name.starts_with("OPTIONS-")) {
      continue;
    }
    UniqueFd fd(::open(d->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    struct stat st;
    if (!table || ::fstat(fd.get(), &st) != 0) {
      ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);
      continue;
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t tail = std::clamp(size / 16, kTableTailMin, kTableTailMax);
    ::posix_fadvise(fd.get(), static_cast<off_t>(size - std::min(size, tail)),
                    static_cast<off_t>(std::min(size, tail)), POSIX_FADV_WILLNEED);
    ::posix_fadvise(fd.get(), 0, static_cast<off_t>(std::min(size, kTableHead)),
                    POSIX_FADV_WILLNEED);
  }
}

// Asks the kernel to read the table files of the index at `path` into the
// page cache, from a thread of its own: the calls allocate the page cache
// and queue the reads before they return (a few milliseconds for some MB),
// which a mount need not wait for. The thread holds no lock of ours or of
// RocksDB's, and ends with its last call.
void PreloadTablesInBackground(const std::string& path) {
  std::thread([path] {
    std::error_code ec;
    for (fs::directory_iterator d(path, ec); !ec && d != fs::directory_iterator();
         d.increment(ec)) {
      if (d->path().extension() != ".sst") continue;
      UniqueFd fd(::open(d->path().c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) continue;
      ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);  // Starts I/O, does not wait.
    }
  }).detach();
}

}  // namespace

Result<std::unique_ptr<DbReader>> DbReader::Open(const std::string& path,
                                                 const ReaderOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckIndexDirectory(path));
  std::unique_ptr<DbReader> r(new DbReader());
  r->path_ = path;
  // A `view create` or `index add` may be switching the database to a new
  // manifest at this moment (the old one is gone between reading CURRENT
  // and opening it): a few tries, then the error.
  rocksdb::Status s;
  const size_t block_cache = options.block_cache_bytes != 0
                                 ? options.block_cache_bytes
                                 : AutoBlockCacheBytes(path, AutoBlockCacheCap());
  if (options.preload) PrefetchOpenReads(path);
  for (int attempt = 0;; ++attempt) {
    s = OpenReadOnlyDb(ReaderDbOptions(block_cache), path, &r->db_);
    if (s.ok() || attempt == 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (!s.ok()) {
    return Status::InvalidArgument(
        fmt::format("index {}: cannot open as a shardfs index: {}", path, s.ToString()));
  }
  if (!r->db_->GetDbIdentity(r->db_identity_).ok()) r->db_identity_.clear();
  SHARDFS_RETURN_IF_ERROR(r->LoadMeta());
  SHARDFS_RETURN_IF_ERROR(r->CheckSchemaVersion());
  SHARDFS_RETURN_IF_ERROR(r->LoadShards(options.shard_base));
  SHARDFS_RETURN_IF_ERROR(r->ValidateMeta());
  SHARDFS_RETURN_IF_ERROR(r->LoadVersion(options));
  if (options.world != 0) SHARDFS_RETURN_IF_ERROR(r->LoadRanks(options));
  // Last: the readahead would otherwise queue ahead of the reads above.
  if (options.preload) PreloadTablesInBackground(path);
  return r;
}

Status DbReader::LoadMeta() {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string meta_prefix(1, kMetaPrefix);
  for (it->Seek(meta_prefix); it->Valid() && StartsWith(it->key(), meta_prefix); it->Next()) {
    meta_.emplace(std::string(SliceBytes(it->key()).substr(1)), it->value().ToString());
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path_));
  return Status::Ok();
}

Status DbReader::CheckSchemaVersion() const {
  auto version = meta_.find(std::string(kMetaSchemaVersion));
  if (version == meta_.end()) {
    return Status::InvalidArgument(fmt::format(
        "index {}: not a shardfs index (no schema version; an interrupted build?)", path_));
  }
  uint64_t v = 0;
  SHARDFS_RETURN_IF_ERROR(ParseMetaNumber(path_, kMetaSchemaVersion, version->second, &v));
  if (v == 0) {
    return Status::Corruption(
        fmt::format("index {}: meta key '{}' is 0, expected a version from 1 to {}", path_,
                    kMetaSchemaVersion, kMaxSchemaVersion));
  }
  if (v > kMaxSchemaVersion) {
    return Status::NotSupported(fmt::format(
        "index {}: schema version {} is newer than this shardfs understands ({}); upgrade shardfs",
        path_, v, kMaxSchemaVersion));
  }
  return Status::Ok();
}

Status DbReader::LoadShards(const std::string& shard_base) {
  const std::string shard_prefix(1, kShardPrefix);
  std::error_code ec;
  fs::path base = fs::absolute(shard_base.empty() ? path_ : shard_base, ec);
  if (ec) return Status::IoError(fmt::format("index {}: {}", path_, ec.message()));
  base = base.lexically_normal();
  if (base.filename().empty()) base = base.parent_path();
  if (shard_base.empty()) base = base.parent_path();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(shard_prefix); it->Valid() && StartsWith(it->key(), shard_prefix); it->Next()) {
    ShardId id;
    ShardMeta meta;
    if (!DecodeShardKey(SliceBytes(it->key()), &id) || id.value != shards_.size()) {
      return Status::Corruption(fmt::format("index {}: shard table is not dense", path_));
    }
    SHARDFS_RETURN_IF_ERROR(DecodeShardMeta(SliceBytes(it->value()), &meta)
                                .WithContext(fmt::format("index {}: shard {}", path_, id.value)));
    if (meta.path.empty()) {
      return Status::Corruption(fmt::format(
          "index {}: shard {}: empty path, expected a shard file's path", path_, id.value));
    }
    shard_paths_.push_back((meta.flags & kShardPathRelative) && !meta.remote()
                               ? (base / meta.path).string()
                               : meta.path);
    shards_.push_back(std::move(meta));
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path_));
  return Status::Ok();
}

// The writer (index/index_writer.cc) numbers inodes densely from the root, 1,
// and records max_inode = files + dirs + symlinks (dirs counting the root;
// hard links share their file's inode). Anything else is damage, and the
// mount sizes per-inode tables by max_inode, so it is checked before use:
// each count a decimal number, the sum right, the record of max_inode
// present and none after it (one point read, one seek), the root a
// directory, and max_inode no larger than the number of keys (each inode has
// an 'I' key), which bounds even a damaged index whose records agree with a
// huge max_inode.
Status DbReader::ValidateMeta() {
  bool has_counts = false;
  SHARDFS_RETURN_IF_ERROR(CheckMetaCounts(&has_counts));
  // A database written by hand with a schema version and none of the counts
  // (as some tests write) has nothing to check them against; its records are
  // still checked one by one as they are read.
  if (!has_counts) return Status::Ok();
  SHARDFS_RETURN_IF_ERROR(CheckMaxInode());
  return CheckInodeRange();
}

// Each count present is a decimal number; some counts without the others is
// damage; "checksums" is a known value.
Status DbReader::CheckMetaCounts(bool* has_counts) const {
  const std::string_view kCounts[] = {kMetaFiles, kMetaDirs, kMetaSymlinks, kMetaBytes,
                                      kMetaMaxInode};
  std::string_view missing;
  size_t present = 0;
  for (std::string_view name : kCounts) {
    auto m = meta_.find(std::string(name));
    if (m == meta_.end()) {
      if (missing.empty()) missing = name;
      continue;
    }
    ++present;
    uint64_t unused = 0;
    SHARDFS_RETURN_IF_ERROR(ParseMetaNumber(path_, name, m->second, &unused));
  }
  *has_counts = present > 0;
  if (present == 0) return Status::Ok();
  if (!missing.empty()) {
    return Status::Corruption(fmt::format(
        "index {}: meta key '{}' is missing, expected it with the other counts", path_, missing));
  }
  if (auto c = Meta(kMetaChecksums); c != "xxh3" && c != "none") {
    return Status::Corruption(fmt::format("index {}: meta key '{}' is '{}', expected xxh3 or none",
                                          path_, kMetaChecksums, Printable(c)));
  }
  return Status::Ok();
}

// max_inode = files + dirs + symlinks, at least the root, no more than the
// keys of the index; sets max_inode_.
Status DbReader::CheckMaxInode() {
  const uint64_t files = MetaNumber(kMetaFiles);
  const uint64_t dirs = MetaNumber(kMetaDirs);
  const uint64_t symlinks = MetaNumber(kMetaSymlinks);
  const uint64_t max_inode = MetaNumber(kMetaMaxInode);
  if (dirs == 0) {
    return Status::Corruption(fmt::format(
        "index {}: meta key '{}' is 0, expected at least 1 (the root)", path_, kMetaDirs));
  }
  uint64_t sum = 0;
  if (__builtin_add_overflow(files, dirs, &sum) || __builtin_add_overflow(sum, symlinks, &sum) ||
      sum != max_inode) {
    return Status::Corruption(fmt::format(
        "index {}: meta key '{}' is {}, expected files + dirs + symlinks = {} + {} + {}", path_,
        kMetaMaxInode, max_inode, files, dirs, symlinks));
  }
  // Entries of every table (open already: max_open_files = -1, so this
  // reads nothing; rocksdb.estimate-num-keys would say 0, as the reader
  // skips the stats at open) and of the memtables a leftover log was
  // replayed into.
  uint64_t keys = 0, mem = 0, imm = 0;
  rocksdb::TablePropertiesCollection tables;
  if (db_->GetPropertiesOfAllTables(&tables).ok() &&
      db_->GetIntProperty("rocksdb.num-entries-active-mem-table", &mem) &&
      db_->GetIntProperty("rocksdb.num-entries-imm-mem-tables", &imm)) {
    keys = mem + imm;
    for (const auto& [file, props] : tables) keys += props ? props->num_entries : 0;
  } else {
    keys = UINT64_MAX;  // Unknown: no bound from here.
  }
  if (max_inode > keys) {
    return Status::Corruption(
        fmt::format("index {}: meta key '{}' is {}, but the index holds only {} keys", path_,
                    kMetaMaxInode, max_inode, keys));
  }
  max_inode_ = max_inode;
  return Status::Ok();
}

// The record of max_inode exists and none after it; the root is a directory.
Status DbReader::CheckInodeRange() const {
  const uint64_t max_inode = max_inode_;
  EntryRecord rec;
  RecordHolder holder;
  Status s = GetInodeRecord(InodeId{max_inode}, &rec, &holder);
  if (s.code() == Status::Code::kNotFound) {
    return Status::Corruption(fmt::format("index {}: meta key '{}' is {}, but there is no inode {}",
                                          path_, kMetaMaxInode, max_inode, max_inode));
  }
  SHARDFS_RETURN_IF_ERROR(s);
  InodeKeyBuffer buf;
  std::string_view after = EncodeInodeKey(kDefaultView, InodeId{max_inode + 1}, buf);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(rocksdb::Slice(after.data(), after.size()));
  ViewId view;
  InodeId beyond;
  if (it->Valid() && DecodeInodeKey(SliceBytes(it->key()), &view, &beyond) &&
      view.value == kDefaultView.value) {
    return Status::Corruption(
        fmt::format("index {}: meta key '{}' is {}, but there is an inode {} after it", path_,
                    kMetaMaxInode, max_inode, beyond.value));
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path_));
  s = GetInodeRecord(kRootInode, &rec, &holder);
  if (s.code() == Status::Code::kNotFound) {
    return Status::Corruption(fmt::format("index {}: no root directory (inode 1)", path_));
  }
  SHARDFS_RETURN_IF_ERROR(s);
  if (rec.type != EntryType::kDir) {
    return Status::Corruption(
        fmt::format("index {}: the root (inode 1) is a {}, expected a directory", path_,
                    EntryTypeName(rec.type)));
  }
  return Status::Ok();
}

}  // namespace shardfs::index
