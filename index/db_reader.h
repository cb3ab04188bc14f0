// The reader of one index directory: a RocksDB database read-only (the key
// layout is in index/schema.h), at one version of one view, optionally cut
// to a rank's partition. What IndexReader::Open returns for a directory, and
// what a manifest's union (index/union_reader.h) reads each partition with.
// The costs and the trust checks are those index/index_reader.h states.
//
// A rank's partition (index/rank_partition.h): Open walks the view's tree
// (index/sample_walk.h: once, twice past a million samples) and keeps a
// RankShare (index/rank_share.h), so that InRank decides a file by its
// shard alone, or for the few shards a cut falls in by a binary search of
// the cuts by (offset, inode): no allocation, no lookup.
//
// Thread safety: immutable after Open but for two memos, each guarded (the
// rank's directory answers by RankShare's mutex, the decoded sizes by
// atomics).
#ifndef SHARDFS_INDEX_DB_READER_H_
#define SHARDFS_INDEX_DB_READER_H_

#include <rocksdb/slice.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "index/view_store.h"

namespace rocksdb {
class DB;
}

namespace shardfs::index {

class RankShare;

class DbReader final : public IndexReader {
 public:
  // Opens the index directory at `path`; the Status is that of
  // IndexReader::Open (a manifest file is not an index directory).
  static Result<std::unique_ptr<DbReader>> Open(const std::string& path,
                                                const ReaderOptions& options = {});
  ~DbReader() override;

  Status Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                RecordHolder* holder) const override;
  Status GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const override;
  Status ForEachChild(
      InodeId dir, std::string_view start_after,
      const std::function<bool(std::string_view, const EntryRecord&)>& fn) const override;
  Status ForEachInode(InodeId first,
                      const std::function<bool(const EntryRecord&)>& fn) const override;
  const VersionSets* version_sets() const override;
  const Catalog& catalog() const override { return *catalog_; }
  uint64_t DiskBytes() const override;
  Result<std::vector<uint64_t>> ShardBytes() const override;
  Status GetSeekValue(ShardId shard, bool window, uint32_t point,
                      std::string* value) const override;
  Status GetSeekSums(ShardId shard, std::string* value) const override;
  Status ForEachSeekKey(ShardId shard,
                        const std::function<bool(std::string_view suffix, std::string_view value)>&
                            fn) const override;

 private:
  DbReader();
  // The steps of Open, in order (index/db_reader_open.cc). Each returns the
  // Status Open documents.
  // Reads every 'M' key into meta_.
  Status LoadMeta();
  // The schema version is present, a number, and one this code reads.
  Status CheckSchemaVersion() const;
  // Reads the 'S' keys into shards_ and shard_paths_.
  Status LoadShards(const std::string& shard_base);
  // Checks the numeric meta values against each other and the inode records.
  Status ValidateMeta();
  // ValidateMeta's steps; `has_counts` is false when no count is present.
  Status CheckMetaCounts(bool* has_counts) const;
  Status CheckMaxInode();
  Status CheckInodeRange() const;
  // The version's steps of Open: the catalog, the version, its sets.
  Status LoadVersion(const ReaderOptions& options);
  // The rank partition of the version: the split of its samples
  // (index/rank_partition.h).
  Status LoadRanks(const ReaderOptions& options);

  // Decodes a record read from a 'D' or 'I' key and checks it (see "Trust"
  // in index/index_reader.h; not CheckFileRange).
  Status DecodeChecked(const rocksdb::Slice& value, EntryRecord* rec) const;
  Status CheckRecord(const EntryRecord& rec) const;
  // GetInode without CheckFileRange and without the rank filter.
  Status GetInodeRecord(InodeId inode, EntryRecord* rec, RecordHolder* holder) const;
  // Lookup and ForEachChild before the rank filter.
  Status LookupRaw(InodeId parent, std::string_view name, EntryRecord* rec,
                   RecordHolder* holder) const;
  Status ForEachChildRaw(InodeId dir, std::string_view start_after,
                         const std::function<bool(std::string_view, const EntryRecord&)>& fn) const;
  // Whether a record of the view belongs to this rank (always without one):
  // RankShare::Holds.
  bool InRank(const EntryRecord& rec) const;

  std::unique_ptr<rocksdb::DB> db_;
  // Points into db_: declared after it, so destroyed first.
  std::unique_ptr<Catalog> catalog_;
  // A version other than default@1: its view id's stored difference.
  struct Overlay;
  std::unique_ptr<Overlay> overlay_;
  // The rank partition (world > 0).
  std::unique_ptr<RankShare> ranks_;
  // The largest inode of the index; UINT64_MAX when the meta has no counts.
  uint64_t max_inode_ = UINT64_MAX;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_DB_READER_H_
