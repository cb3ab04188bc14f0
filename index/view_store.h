// The named views and versions of an index (index/schema.h, "Views and
// versions"): naming, the catalog, one version's stored difference, and
// the one writer that adds or removes versions.
#ifndef SHARDFS_INDEX_VIEW_STORE_H_
#define SHARDFS_INDEX_VIEW_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/inode_set.h"
#include "index/schema.h"

namespace rocksdb {
class DB;
}

namespace shardfs::index {

// The full tree's view name.
inline constexpr std::string_view kDefaultViewName = "default";

// "NAME", "NAME@N" or "NAME@TAG".
struct ViewSpec {
  std::string name;
  uint32_t version = 0;  // 0: latest (or the tag's).
  std::string tag;
};

// InvalidArgument naming `what` unless `name` is 1..128 bytes of
// [A-Za-z0-9._-] starting with a letter or digit. Tags also may not be all
// digits (NAME@12 is a version).
Status CheckViewName(std::string_view name, std::string_view what);
Status CheckTagName(std::string_view tag);
// "" is the latest default.
Result<ViewSpec> ParseViewSpec(std::string_view spec);

// One version as the catalog knows it.
struct VersionInfo {
  std::string name;
  uint32_t version = 0;
  VersionRecord record;
  std::vector<std::string> tags;
  std::string label() const;  // "NAME@N"
};

// The catalog of an open database. `default1` is the implicit default@1, made
// from the index's meta by the caller.
struct Manifest;

class Catalog {
 public:
  Catalog(rocksdb::DB* db, std::string index_path, VersionRecord default1)
      : db_(db), path_(std::move(index_path)), default1_(std::move(default1)) {}
  // A manifest's trees (index/manifest.h) as a catalog without tags.
  Catalog(const Manifest* manifest, std::string path)
      : db_(nullptr), manifest_(manifest), path_(std::move(path)) {}

  // NotFound "index X: no view 'NAME'" / "no version NAME@N" / "no tag".
  Result<VersionInfo> FindVersion(const ViewSpec& spec) const;
  // Every version of `name`, oldest first, with its tags. NotFound if none.
  Result<std::vector<VersionInfo>> Versions(std::string_view name) const;
  // The names of every view, "default" first.
  Result<std::vector<std::string>> Names() const;
  // The largest view id used by a catalog key or 'V' key (0 if none).
  Result<uint32_t> MaxViewId() const;

 private:
  Result<std::vector<std::pair<std::string, uint32_t>>> Tags(std::string_view name) const;

  rocksdb::DB* db_;
  const Manifest* manifest_ = nullptr;
  std::string path_;
  VersionRecord default1_;  // default@1, from the meta.
};

// A version's stored difference from default@1, as the reader uses it.
struct VersionSets {
  InodeSet hidden;
  InodeSet overlaid;
  InodeSet parents;
};
// Reads the sets of view `view`. Corruption naming the index if one is
// missing or damaged.
Result<VersionSets> ReadVersionSets(rocksdb::DB* db, const std::string& index_path, ViewId view);
// The view bytes per shard of `view` (kDefaultView: default@1, if the build wrote
// them). NotFound if not stored.
Result<std::vector<uint64_t>> ReadShardBytes(rocksdb::DB* db, ViewId view);
std::string EncodeShardBytes(const std::vector<uint64_t>& bytes);

// The keys of a new version's table, sorted: what a builder hands the
// editor.
struct VersionTable {
  std::vector<uint64_t> shard_bytes;
  // (parent, name) -> encoded EntryRecord; any order, sorted on write.
  std::vector<std::pair<std::pair<uint64_t, std::string>, std::string>> dirents;
  // inode -> encoded EntryRecord; any order.
  std::vector<std::pair<uint64_t, std::string>> inodes;
  VersionSets sets;
};

// The one writer of an index's views: a read-write open of the database
// (mounts open it read-only and are not disturbed), held while a command
// works, exclusive (a second editor waits up to `wait_seconds`, then fails
// naming the index).
class IndexEditor {
 public:
  static Result<std::unique_ptr<IndexEditor>> Open(const std::string& path, int wait_seconds = 60);
  ~IndexEditor();

  rocksdb::DB* db() const { return db_.get(); }
  const std::string& path() const { return path_; }

  // Adds version `info` (name, version, record with a fresh view id) with
  // `table`, and `new_shards` (already stored form: StoredShardMeta) as
  // shards record.shard_count - new_shards.size() .. shard_count - 1, all in
  // one atomic ingest. `seek_keys`: the 'Z' keys of new compressed tar
  // shards; with any, the index's schema version becomes 4.
  Status AddVersion(const VersionInfo& info, const VersionTable& table,
                    const std::vector<ShardMeta>& new_shards,
                    std::vector<std::pair<std::string, std::string>> seek_keys = {});
  // Sets (or with `force`, moves) a tag.
  Status Tag(const VersionInfo& info, std::string_view tag, bool force);
  // Removes `versions` (of one view), their tags and their stored keys.
  Status Remove(const std::vector<VersionInfo>& versions);

 private:
  IndexEditor() = default;
  // Writes `puts` (key, value) and `deletes` (keys), each sorted and unique,
  // merged in key order to a table file in the index directory named after
  // `name`; returns its path.
  Result<std::string> WriteTable(const std::string& name,
                                 const std::vector<std::pair<std::string, std::string>>& puts,
                                 const std::vector<std::string>& deletes);
  Status Ingest(const std::vector<std::string>& files);
  // Ends a command's change: flushes, merges small table files.
  Status Settle();
  // Merges the catalog's table files when there are many (they are tiny).
  Status CompactCatalog();

  std::unique_ptr<rocksdb::DB> db_;
  std::string path_;
  uint64_t table_seq_ = 0;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_VIEW_STORE_H_
