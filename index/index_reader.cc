// IndexReader: what every reader shares (index/index_reader.h): the checks
// and walks built on the questions each implementation answers. Open, which
// picks the implementation, is in index/index_reader_open.cc.
#include "index/index_reader.h"

#include <rocksdb/db.h>
#include <sys/stat.h>

#include <filesystem>
#include <vector>

#include "base/parse.h"
#include "base/strings.h"
#include "index/db_options.h"
#include "index/member_path.h"

namespace shardfs::index {
namespace fs = std::filesystem;

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
  std::unique_ptr<rocksdb::DB> db;
  if (!OpenReadOnlyDb(ReaderDbOptions(1 << 20), path, &db).ok()) return false;
  std::string version;
  return db->Get(rocksdb::ReadOptions(), EncodeMetaKey(kMetaSchemaVersion), &version).ok();
}

const std::string& IndexReader::ShardPath(ShardId id) const {
  static const std::string kNone;
  return id.value < shard_paths_.size() ? shard_paths_[id.value] : kNone;
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
