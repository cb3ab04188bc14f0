#include "index/view_store.h"

#include <fmt/format.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/sst_file_writer.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "base/coding.h"
#include "base/parse.h"
#include "base/strings.h"
#include "index/db_options.h"
#include "index/index_files.h"  // kEditTempPrefix
#include "index/manifest.h"
#include "index/rocks_util.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxViewName = 128;
// The catalog key holding the largest view id ever allocated, so that a
// removed version's id is never reused.
const std::string kViewIdKey = std::string(1, kCatalogPrefix) + '\x02';
// A catalog key each edit writes (see IndexEditor::Settle).
const std::string kLastEditKey = std::string(1, kCatalogPrefix) + '\x03';

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

std::string Fixed32(uint32_t x) {
  std::string v;
  PutFixed32(&v, x);
  return v;
}

// Calls fn(key, value) for each key with `prefix`, in order.
template <typename Fn>
Status ScanPrefix(rocksdb::DB* db, const std::string& prefix, const std::string& what, Fn&& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    std::string_view key = SliceBytes(it->key());
    if (!key.starts_with(prefix)) break;
    SHARDFS_RETURN_IF_ERROR(fn(key, SliceBytes(it->value())));
  }
  if (!it->status().ok()) return FromRocks(it->status(), what);
  return Status::Ok();
}

}  // namespace

Status CheckViewName(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > kMaxViewName || !std::isalnum(static_cast<uint8_t>(name[0])) ||
      !std::all_of(name.begin(), name.end(), NameChar)) {
    return Status::InvalidArgument(fmt::format(
        "{} '{}': expected 1 to {} letters, digits, '.', '_' or '-', starting with a letter or "
        "digit",
        what, name, kMaxViewName));
  }
  return Status::Ok();
}

Status CheckTagName(std::string_view tag) {
  SHARDFS_RETURN_IF_ERROR(CheckViewName(tag, "tag"));
  if (std::all_of(tag.begin(), tag.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument(
        fmt::format("tag '{}': a tag may not be a number (NAME@N names version N)", tag));
  }
  return Status::Ok();
}

Result<ViewSpec> ParseViewSpec(std::string_view spec) {
  ViewSpec out;
  if (spec.empty()) {
    out.name = kDefaultViewName;
    return out;
  }
  size_t at = spec.find('@');
  out.name = spec.substr(0, at);
  SHARDFS_RETURN_IF_ERROR(CheckViewName(out.name, "view"));
  if (at == std::string_view::npos) return out;
  std::string_view rest = spec.substr(at + 1);
  if (!rest.empty() &&
      std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // Digits only: too large for 64 bits is out of range too.
    const uint64_t v = ParseDecimal(rest).value_or(0);
    if (v == 0 || v > UINT32_MAX) {
      return Status::InvalidArgument(fmt::format("view '{}': versions are numbered from 1", spec));
    }
    out.version = static_cast<uint32_t>(v);
    return out;
  }
  SHARDFS_RETURN_IF_ERROR(CheckTagName(rest).WithContext(fmt::format("view '{}'", spec)));
  out.tag = rest;
  return out;
}

std::string VersionInfo::label() const { return fmt::format("{}@{}", name, version); }

Result<std::vector<std::pair<std::string, uint32_t>>> Catalog::Tags(std::string_view name) const {
  std::vector<std::pair<std::string, uint32_t>> tags;
  if (manifest_) return tags;
  SHARDFS_RETURN_IF_ERROR(ScanPrefix(
      db_, EncodeTagPrefix(name), fmt::format("index {}: view catalog", path_),
      [&](std::string_view key, std::string_view value) -> Status {
        std::string_view n, tag;
        if (!DecodeTagKey(key, &n, &tag) || value.size() != 4) {
          return Status::Corruption(fmt::format("index {}: damaged tag of view '{}'", path_, name));
        }
        tags.emplace_back(std::string(tag), DecodeFixed32(value.data()));
        return Status::Ok();
      }));
  return tags;
}

Result<std::vector<VersionInfo>> Catalog::Versions(std::string_view name) const {
  std::vector<VersionInfo> versions;
  if (manifest_) {
    for (size_t i = 0; i < manifest_->trees.size(); ++i) {
      const ManifestTree& t = manifest_->trees[i];
      if (t.name != name) continue;
      VersionInfo& v = versions.emplace_back();
      v.name = t.name;
      v.version = t.version;
      v.record = TreeRecord(t, static_cast<uint32_t>(i));
    }
    std::sort(versions.begin(), versions.end(),
              [](const VersionInfo& a, const VersionInfo& b) { return a.version < b.version; });
    if (versions.empty()) {
      return Status::NotFound(fmt::format("manifest {}: no view '{}'", path_, name));
    }
    return versions;
  }
  if (name == kDefaultViewName) {
    VersionInfo first;
    first.name = name;
    first.version = 1;
    first.record = default1_;
    versions.push_back(std::move(first));
  }
  SHARDFS_RETURN_IF_ERROR(ScanPrefix(
      db_, EncodeCatalogPrefix(name), fmt::format("index {}: view catalog", path_),
      [&](std::string_view key, std::string_view value) -> Status {
        VersionInfo info;
        std::string_view n;
        if (!DecodeCatalogKey(key, &n, &info.version)) {
          return Status::Corruption(
              fmt::format("index {}: damaged catalog key of view '{}'", path_, name));
        }
        info.name = n;
        SHARDFS_RETURN_IF_ERROR(DecodeVersionRecord(value, &info.record)
                                    .WithContext(fmt::format("index {}: {}", path_, info.label())));
        versions.push_back(std::move(info));
        return Status::Ok();
      }));
  if (versions.empty()) return Status::NotFound(fmt::format("index {}: no view '{}'", path_, name));
  SHARDFS_ASSIGN_OR_RETURN(auto tags, Tags(name));
  for (auto& [tag, version] : tags) {
    for (VersionInfo& v : versions) {
      if (v.version == version) v.tags.push_back(tag);
    }
  }
  return versions;
}

Result<VersionInfo> Catalog::FindVersion(const ViewSpec& spec) const {
  SHARDFS_ASSIGN_OR_RETURN(std::vector<VersionInfo> versions, Versions(spec.name));
  uint32_t want = spec.version;
  if (!spec.tag.empty()) {
    auto tagged = std::find_if(versions.begin(), versions.end(), [&](const VersionInfo& v) {
      return std::find(v.tags.begin(), v.tags.end(), spec.tag) != v.tags.end();
    });
    if (tagged == versions.end()) {
      return Status::NotFound(
          fmt::format("index {}: view '{}' has no tag '{}'", path_, spec.name, spec.tag));
    }
    return *tagged;
  }
  if (want == 0) return versions.back();
  for (VersionInfo& v : versions) {
    if (v.version == want) return std::move(v);
  }
  return Status::NotFound(fmt::format("index {}: no version {}@{} (the latest is {}@{})", path_,
                                      spec.name, want, spec.name, versions.back().version));
}

Result<std::vector<std::string>> Catalog::Names() const {
  std::set<std::string> names;
  if (manifest_) {
    for (const ManifestTree& t : manifest_->trees) names.insert(t.name);
  } else {
    SHARDFS_RETURN_IF_ERROR(ScanPrefix(
        db_, std::string(1, kCatalogPrefix), fmt::format("index {}: view catalog", path_),
        [&](std::string_view key, std::string_view) -> Status {
          // Names start with a letter or digit; the catalog's own keys
          // ('C' 0x02, 'C' 0x03) with a control byte.
          if (key.size() < 2 || !std::isalnum(static_cast<uint8_t>(key[1]))) return Status::Ok();
          size_t end = 1;
          while (end < key.size() && NameChar(key[end])) ++end;
          names.emplace(key.substr(1, end - 1));
          return Status::Ok();
        }));
  }
  names.erase(std::string(kDefaultViewName));
  std::vector<std::string> out{std::string(kDefaultViewName)};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

Result<uint32_t> Catalog::MaxViewId() const {
  if (manifest_) return static_cast<uint32_t>(manifest_->trees.size() - 1);
  uint32_t max = 0;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kViewIdKey, &value);
  if (s.ok() && value.size() == 4) max = DecodeFixed32(value.data());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(std::string(1, kViewPrefix) + std::string(8, '\xff'));
  ViewId last;
  if (it->Valid() && DecodeViewKey(SliceBytes(it->key()), &last)) max = std::max(max, last.value);
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("index {}", path_));
  return max;
}

Result<VersionSets> ReadVersionSets(rocksdb::DB* db, const std::string& index_path, ViewId view) {
  VersionSets sets;
  const std::pair<char, InodeSet*> wanted[] = {
      {kSetHidden, &sets.hidden}, {kSetOverlaid, &sets.overlaid}, {kSetParents, &sets.parents}};
  for (auto [set, out] : wanted) {
    std::string value;
    rocksdb::Status s = db->Get(rocksdb::ReadOptions(), EncodeViewSetKey(view, set), &value);
    if (!s.ok()) {
      return Status::Corruption(fmt::format("index {}: view {}: set '{}' is missing: {}",
                                            index_path, view.value, set, s.ToString()));
    }
    Result<InodeSet> decoded = InodeSet::Decode(value);
    if (!decoded.ok()) {
      return decoded.status().WithContext(fmt::format("index {}: view {}", index_path, view.value));
    }
    *out = std::move(*decoded);
  }
  return sets;
}

std::string EncodeShardBytes(const std::vector<uint64_t>& bytes) {
  std::string out;
  out.reserve(bytes.size() * 8);
  for (uint64_t v : bytes) PutFixed64(&out, v);
  return out;
}

Result<std::vector<uint64_t>> ReadShardBytes(rocksdb::DB* db, ViewId view) {
  std::string value;
  rocksdb::Status s =
      db->Get(rocksdb::ReadOptions(), EncodeViewKeyPrefix(view, kViewBytes), &value);
  if (s.IsNotFound()) return Status::NotFound("no shard bytes stored");
  if (!s.ok()) return FromRocks(s, "shard bytes");
  if (value.size() % 8 != 0) return Status::Corruption("shard bytes: not a multiple of 8 bytes");
  std::vector<uint64_t> bytes(value.size() / 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = DecodeFixed64(value.data() + i * 8);
  return bytes;
}

// ---------------------------------------------------------------------------

IndexEditor::~IndexEditor() {
  if (db_) db_->Close().PermitUncheckedError();
}

Result<std::unique_ptr<IndexEditor>> IndexEditor::Open(const std::string& path, int wait_seconds) {
  std::unique_ptr<IndexEditor> e(new IndexEditor());
  e->path_ = path;
  rocksdb::Options o = WriterDbOptions(true);
  o.create_if_missing = false;
  o.error_if_exists = false;
  // Nothing is rewritten behind the commands' backs: default@1's table files
  // stay as the build wrote them, and mounts keep reading them.
  o.disable_auto_compactions = true;
  // Open table files when first read, not all at open: an edit reads few.
  o.max_open_files = 256;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds);
  for (;;) {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, path, &raw);
    if (s.ok()) {
      e->db_.reset(raw);
      break;
    }
    const bool locked = s.IsIOError() && s.ToString().find("lock") != std::string::npos;
    if (!locked) {
      return Status::IoError(
          fmt::format("index {}: cannot open for writing: {}", path, s.ToString()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::IoError(
          fmt::format("index {}: another shardfs command is changing it (waited {} s); try again",
                      path, wait_seconds));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // A killed editor's table file that was never ingested.
  std::error_code ec;
  for (fs::directory_iterator d(path, ec); !ec && d != fs::directory_iterator(); d.increment(ec)) {
    if (d->path().filename().string().starts_with(kEditTempPrefix)) fs::remove(d->path(), ec);
  }
  return e;
}

Result<std::string> IndexEditor::WriteTable(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& puts,
    const std::vector<std::string>& deletes) {
  const std::string file = JoinPath(
      path_, fmt::format("{}{}-{}-{}.sst", kEditTempPrefix, ::getpid(), table_seq_++, name));
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), WriterDbOptions(true));
  rocksdb::Status s = writer.Open(file);
  size_t p = 0, d = 0;
  while (s.ok() && (p < puts.size() || d < deletes.size())) {
    if (d == deletes.size() || (p < puts.size() && puts[p].first < deletes[d])) {
      s = writer.Put(puts[p].first, puts[p].second);
      ++p;
    } else {
      s = writer.Delete(deletes[d]);
      ++d;
    }
  }
  if (s.ok()) s = writer.Finish();
  if (!s.ok()) {
    std::error_code ec;
    fs::remove(file, ec);
    return Status::IoError(fmt::format("index {}: writing {}: {}", path_, file, s.ToString()));
  }
  return file;
}

Status IndexEditor::Ingest(const std::vector<std::string>& files) {
  rocksdb::IngestExternalFileOptions o;
  o.move_files = true;
  rocksdb::Status s = db_->IngestExternalFile(files, o);
  std::error_code ec;
  for (const std::string& f : files) fs::remove(f, ec);
  if (!s.ok()) return Status::IoError(fmt::format("index {}: ingest: {}", path_, s.ToString()));
  return Settle();
}

// Every open of the database for writing starts a log file; one that never
// holds a write is kept by RocksDB until a flush moves past it, and a mount
// would read them all. One small write and a flush per command let it
// delete them.
Status IndexEditor::Settle() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Put(wo, kLastEditKey, std::to_string(::getpid()));
  if (s.ok()) s = db_->Flush(rocksdb::FlushOptions());
  if (!s.ok()) return Status::IoError(fmt::format("index {}: flush: {}", path_, s.ToString()));
  return CompactCatalog();
}

// Each version adds a table file or two. A mount opens every table file of
// the index, so many small ones would make mounting slower as versions pile
// up: past a handful, the catalog's files are merged into one, and the
// versions' (every 'V' key above default@1's) into a few. default@1's files
// are never part of either range, so they are never rewritten.
Status IndexEditor::CompactCatalog() {
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  struct Range {
    std::string begin, end;
    size_t limit;
  };
  const Range ranges[] = {
      {std::string(1, kCatalogPrefix), std::string(1, static_cast<char>(kCatalogPrefix + 1)), 4},
      {EncodeViewKeyPrefix(ViewId{1}, 0), std::string(1, static_cast<char>(kViewPrefix + 1)), 8},
  };
  for (const Range& r : ranges) {
    size_t count = 0;
    for (const auto& f : files) {
      if (f.smallestkey >= r.begin && f.largestkey < r.end) ++count;
    }
    if (count <= r.limit) continue;
    rocksdb::Slice b(r.begin), e(r.end);
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    rocksdb::Status s = db_->CompactRange(co, &b, &e);
    if (!s.ok()) {
      return Status::IoError(fmt::format("index {}: compaction: {}", path_, s.ToString()));
    }
  }
  return Status::Ok();
}

Status IndexEditor::AddVersion(const VersionInfo& info, const VersionTable& table,
                               const std::vector<ShardMeta>& new_shards,
                               std::vector<std::pair<std::string, std::string>> seek_keys) {
  const ViewId view = info.record.view;
  std::vector<std::pair<std::string, std::string>> data;
  data.reserve(table.dirents.size() + table.inodes.size() + 4);
  data.emplace_back(EncodeViewKeyPrefix(view, kViewBytes), EncodeShardBytes(table.shard_bytes));
  for (const auto& [key, value] : table.dirents) {
    data.emplace_back(EncodeViewDirentKey(view, InodeId{key.first}, key.second), value);
  }
  for (const auto& [inode, value] : table.inodes) {
    data.emplace_back(EncodeViewInodeKey(view, InodeId{inode}), value);
  }
  const std::pair<char, const InodeSet*> sets[] = {{kSetHidden, &table.sets.hidden},
                                                   {kSetOverlaid, &table.sets.overlaid},
                                                   {kSetParents, &table.sets.parents}};
  for (auto [set, s] : sets) {
    std::string v;
    s->Encode(&v);
    data.emplace_back(EncodeViewSetKey(view, set), std::move(v));
  }
  std::sort(data.begin(), data.end());
  for (size_t i = 1; i < data.size(); ++i) {
    if (data[i].first == data[i - 1].first) {
      return Status::Corruption(
          fmt::format("index {}: {}: a key twice in the new version", path_, info.label()));
    }
  }
  std::vector<std::string> files;
  SHARDFS_ASSIGN_OR_RETURN(std::string f, WriteTable("view", data, {}));
  files.push_back(std::move(f));

  std::vector<std::pair<std::string, std::string>> catalog;
  std::string record;
  EncodeVersionRecord(info.record, &record);
  catalog.emplace_back(EncodeCatalogKey(info.name, info.version), std::move(record));
  catalog.emplace_back(kViewIdKey, Fixed32(view.value));
  std::sort(catalog.begin(), catalog.end());
  SHARDFS_ASSIGN_OR_RETURN(f, WriteTable("catalog", catalog, {}));
  files.push_back(std::move(f));

  if (!new_shards.empty()) {
    std::vector<std::pair<std::string, std::string>> shard_keys;
    uint32_t id = info.record.shard_count - static_cast<uint32_t>(new_shards.size());
    for (const ShardMeta& meta : new_shards) {
      ShardKeyBuffer buf;
      std::string value;
      EncodeShardMeta(meta, &value);
      shard_keys.emplace_back(std::string(EncodeShardKey(ShardId{id++}, buf)), std::move(value));
    }
    if (!seek_keys.empty()) {
      // A compressed tar shard: readers before version 4 must refuse the index
      // (5 with a bzip2 shard; never below the version it has).
      // 6 with a slice shard.
      uint32_t version = kCodecSchemaVersion;
      for (const ShardMeta& meta : new_shards) {
        if (meta.codec() == Codec::kBzip2) version = std::max(version, kBzip2SchemaVersion);
        if (meta.slice()) version = kSliceSchemaVersion;
      }
      std::string had;
      if (db_->Get(rocksdb::ReadOptions(), EncodeMetaKey(kMetaSchemaVersion), &had).ok()) {
        for (uint32_t v : {kBzip2SchemaVersion, kSliceSchemaVersion}) {
          if (had == std::to_string(v)) version = std::max(version, v);
        }
      }
      shard_keys.emplace_back(EncodeMetaKey(kMetaSchemaVersion), std::to_string(version));
      std::sort(shard_keys.begin(), shard_keys.end());
    }
    SHARDFS_ASSIGN_OR_RETURN(f, WriteTable("shards", shard_keys, {}));
    files.push_back(std::move(f));
  }
  if (!seek_keys.empty()) {
    std::sort(seek_keys.begin(), seek_keys.end());
    SHARDFS_ASSIGN_OR_RETURN(f, WriteTable("seek", seek_keys, {}));
    files.push_back(std::move(f));
  }
  return Ingest(files);
}

Status IndexEditor::Tag(const VersionInfo& info, std::string_view tag, bool force) {
  SHARDFS_RETURN_IF_ERROR(CheckTagName(tag));
  const std::string key = EncodeTagKey(info.name, tag);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.ok() && !force) {
    return Status::AlreadyExists(
        fmt::format("index {}: {}@{} already exists (version {}); use --force to move it", path_,
                    info.name, tag, value.size() == 4 ? DecodeFixed32(value.data()) : 0));
  }
  SHARDFS_ASSIGN_OR_RETURN(std::string f, WriteTable("tag", {{key, Fixed32(info.version)}}, {}));
  return Ingest({f});
}

Status IndexEditor::Remove(const std::vector<VersionInfo>& versions) {
  if (versions.empty()) return Status::Ok();
  std::vector<std::string> deletes;
  std::vector<ViewId> views;
  for (const VersionInfo& v : versions) {
    deletes.push_back(EncodeCatalogKey(v.name, v.version));
    for (const std::string& tag : v.tags) deletes.push_back(EncodeTagKey(v.name, tag));
    if (v.record.view.value != 0) views.push_back(v.record.view);
  }
  std::sort(deletes.begin(), deletes.end());
  deletes.erase(std::unique(deletes.begin(), deletes.end()), deletes.end());
  SHARDFS_ASSIGN_OR_RETURN(std::string f, WriteTable("remove", {}, deletes));
  SHARDFS_RETURN_IF_ERROR(Ingest({f}));
  // The catalog no longer names them; now drop their keys (a range
  // deletion, for keys merged into a table with other versions') and the
  // table files that hold only theirs. Mounts that opened them keep them.
  rocksdb::WriteOptions wo;
  wo.sync = true;
  for (ViewId view : views) {
    const std::string begin = EncodeViewKeyPrefix(view, 0);
    const std::string end = EncodeViewKeyPrefix(ViewId{view.value + 1}, 0);
    rocksdb::Status s = db_->DeleteRange(wo, db_->DefaultColumnFamily(), begin, end);
    rocksdb::Slice b(begin), e(end);
    if (s.ok()) s = rocksdb::DeleteFilesInRange(db_.get(), db_->DefaultColumnFamily(), &b, &e);
    if (!s.ok()) {
      return Status::IoError(
          fmt::format("index {}: removing view {}'s keys: {}", path_, view.value, s.ToString()));
    }
  }
  return Settle();
}

}  // namespace shardfs::index
