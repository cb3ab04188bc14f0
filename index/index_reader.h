// Reading an index: the questions a mount and the CLI ask (see index/schema.h
// for the key layout). On default@1 a lookup or getattr is one RocksDB
// Get; on another version a lookup is up to three (the overlay's dirent, the
// default@1 dirent, then the overlay's inode record when the entry was changed),
// and a getattr stays one. A directory listing is one iterator, or on another
// version default@1's and the overlay's merged, plus a Get per changed entry.
// Those are the costs of one index directory (index/db_reader.h); a manifest
// (index/union_reader.h) answers from its partitions, each such an index.
//
// Thread safety: after Open, every method is const and safe to call from any
// number of threads at once (RocksDB's DB is thread-safe; the shard table and
// meta are immutable).
//
// Trust. An index is read from disk and may be damaged. Open checks every
// meta value before anyone uses it (numbers are numbers, the counts agree
// with each other and with the inode records that exist). Every record a
// method returns has been checked against the index: its inode and parent lie
// in 1..max_inode, nlink > 0, its mode matches its type. A file record from
// GetInode or ForEachInode (the read path: getattr, read, push-ahead) also
// lies inside a shard of the shard table, so its shard, offset and size may
// be used as indices and sizes; one from Lookup or ForEachChild must pass
// CheckFileRange first. A record that fails is reported as Corruption naming
// the index and the inode; the checks are comparisons, no allocation (but
// for the first file of a compressed tar shard, whose seek table is read).
#ifndef SHARDFS_INDEX_INDEX_READER_H_
#define SHARDFS_INDEX_INDEX_READER_H_

#include <rocksdb/slice.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/manifest.h"
#include "index/schema.h"
#include "index/view_store.h"

namespace shardfs::index {

struct ReaderOptions {
  // RocksDB block cache for data blocks and the partitions of the index and
  // filter blocks; 0: sized to the index (index/db_options.h,
  // AutoBlockCacheBytes).
  size_t block_cache_bytes = 0;
  // The view to answer for: "NAME", "NAME@N" or "NAME@TAG"; "" is the full
  // tree (the latest version of "default"). See "Views" in index/schema.h.
  std::string view;
  // Per-rank partition of the view: with world > 0, only rank `rank`'s
  // files and the directories above them (all of the view's with
  // rank_keep_dirs). The ranks are equal runs of the view's samples, split
  // inside shards, the rest trimmed, and Open walks the view's tree to count
  // them, a manifest's as an index directory's (see index/rank_partition.h).
  // InvalidArgument from Open for fewer samples than ranks.
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t seed = 0;
  bool rank_keep_dirs = false;
  // Ask the kernel, without waiting, to read the index's table files into
  // the page cache (posix_fadvise WILLNEED), so a cold metadata walk does
  // not pay one disk read per block.
  bool preload = false;
  // How a manifest's partitions are found (index/manifest.h); unset: local
  // paths only.
  PartitionResolver resolve_partition;
  // The directory relative shard paths are resolved from; "": the index
  // directory's parent. For a node-local copy of an index that stays
  // beside its shards.
  std::string shard_base;
};

// True if `path` is a directory (not a symlink to one) holding a RocksDB
// database with the meta key schema_version: a shardfs index of any schema
// version, whole enough for RocksDB to open. What `index build --force` and
// `pack --force` may replace (if it holds nothing else: index_files.h); a
// directory shardfs did not write never passes. Opens the database
// read-only and writes nothing.
bool IsShardfsIndex(const std::string& path);

// Holds the bytes a decoded EntryRecord points into (its symlink target).
// May be reused for several calls; must not outlive the IndexReader.
using RecordHolder = rocksdb::PinnableSlice;

// What every reader of an index answers, whatever lies behind it: one index
// directory (DbReader, index/db_reader.h) or a manifest's union of several
// (UnionReader, index/union_reader.h). Open picks one, once; each question
// is then one virtual call into it, with no further dispatch. The tables
// both fill at open (shards, meta, version) live here, immutable after Open.
class IndexReader {
 public:
  // Opens the index at `path` read-only: an index directory, or a manifest
  // file (index/manifest.h), whose partitions are opened as
  // options.resolve_partition finds them (every one, also with a rank
  // partition: its split counts the samples of all). A partition rebuilt
  // since the manifest was made (another database identity or shard count)
  // is refused.
  // Returns NotFound if `path` does not exist, InvalidArgument if it is not a
  // shardfs index, NotSupported if its schema version is newer than ours, and
  // Corruption naming the key and the bad value if a meta value is not what
  // the writer writes (see ValidateMeta in index/db_reader_open.cc) or the
  // shard table is damaged.
  static Result<std::unique_ptr<IndexReader>> Open(const std::string& path,
                                                   const ReaderOptions& options = {});
  virtual ~IndexReader();
  IndexReader(const IndexReader&) = delete;
  IndexReader& operator=(const IndexReader&) = delete;

  // The child `name` of directory `parent`. NotFound if there is none,
  // Corruption if its record is damaged (as for every method below).
  // `rec` is valid while `holder` is alive and not reused.
  virtual Status Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                        RecordHolder* holder) const = 0;
  // The entry of inode `inode`. NotFound if there is none.
  virtual Status GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const = 0;
  // Calls `fn(name, record)` for each child of `dir` in name order, starting
  // after `start_after` ("" = from the first), until `fn` returns false.
  virtual Status ForEachChild(
      InodeId dir, std::string_view start_after,
      const std::function<bool(std::string_view, const EntryRecord&)>& fn) const = 0;
  // Calls `fn(record)` for each entry from inode `first` on, in inode order
  // (the tree order: a directory, then its subtree), until `fn` returns false.
  // One seek, then sequential: cheaper than a GetInode per inode.
  virtual Status ForEachInode(InodeId first,
                              const std::function<bool(const EntryRecord&)>& fn) const = 0;
  // Corruption naming the inode unless file record `rec` names a shard of the
  // shard table and its bytes lie inside that shard (as indexed; in a
  // compressed tar shard, inside its decoded stream, whose size its seek
  // table gives: read once per shard, at the first check of one of its
  // files); Ok for directories and symlinks.
  Status CheckFileRange(const EntryRecord& rec) const;
  // The '/'-separated path of `inode` from the root ("" for the root), built
  // by finding each ancestor's name among its parent's children.
  Status PathOf(InodeId inode, std::string* path) const;
  // Looks up a '/'-separated path from the root, one Lookup per component.
  Status LookupPath(std::string_view path, EntryRecord* rec, RecordHolder* holder) const;

  // The version this reader answers for ("default@1" for what `index build` wrote) and its
  // counts. With a rank partition, `counts` are the whole view's.
  const VersionInfo& version() const { return version_; }
  // The largest inode of the version (0 for a hand-made index without
  // counts): what per-inode tables are sized by.
  uint64_t max_inode() const { return version_.record.max_inode; }
  // With a rank partition: the rank of each shard (world = 0: empty). An
  // index directory's: the rank holding every sample of the shard, `world`
  // for a shard whose samples are split between ranks or trimmed.
  const std::vector<uint32_t>& shard_ranks() const { return shard_ranks_; }
  // The stored difference of a version from default@1; nullptr for default@1
  // and for a manifest.
  virtual const VersionSets* version_sets() const { return nullptr; }
  // The view's catalog (to list views and versions).
  virtual const Catalog& catalog() const = 0;

  const std::vector<ShardMeta>& shards() const { return shards_; }
  // The path to open shard `id` at: relative paths are taken from the
  // index's parent directory. A remote shard's URL.
  // "" for an id outside the shard table.
  const std::string& ShardPath(ShardId id) const;
  // Meta values by name ("" when absent).
  std::string Meta(std::string_view name) const;
  // A numeric meta value (files, dirs, symlinks, bytes, max_inode,
  // schema_version), checked by Open: 0 when absent, which only a database
  // written by hand without the counts can be. max_inode = files + dirs +
  // symlinks bounds every inode number of the index.
  uint64_t MetaNumber(std::string_view name) const;
  const std::string& path() const { return path_; }
  // The database's unique id: the random id RocksDB writes when it creates a
  // database. Every `index build` (and pack) publishes a freshly created
  // database, so a rebuilt index never has its predecessor's id; `index add`
  // and `view create` edit the database in place and keep it. "" if RocksDB
  // cannot tell (a caller must then treat the index as never seen before).
  // A manifest's: "manifest-" and the hash of its bytes.
  const std::string& db_identity() const { return db_identity_; }
  // Bytes of the index on disk (a manifest: its own and its open partitions').
  virtual uint64_t DiskBytes() const = 0;
  // The view's bytes in each shard of the version (the rank partition's input).
  virtual Result<std::vector<uint64_t>> ShardBytes() const = 0;

  // The seek table ('Z' shard 'T') of compressed tar shard `shard`, or with
  // `window`, the window of its point `point` ('Z' shard 'W' point), raw.
  // NotFound if the index has none (a manifest: the partition is not open).
  virtual Status GetSeekValue(ShardId shard, bool window, uint32_t point,
                              std::string* value) const = 0;
  // Its interval checksums ('Z' shard 'C'), raw; NotFound if it has none.
  virtual Status GetSeekSums(ShardId shard, std::string* value) const = 0;
  // Every seek key of `shard` ('Z' shard ...), in key order: `fn` gets the
  // key past the shard's prefix and the value, and returns false to stop.
  // What copies a shard into another index (an export) copies these.
  virtual Status ForEachSeekKey(
      ShardId shard,
      const std::function<bool(std::string_view suffix, std::string_view value)>& fn) const = 0;

  // A manifest: its partitions and trees; nullptr for an index directory.
  virtual const Manifest* manifest() const { return nullptr; }
  // A manifest's open partitions (nullptr where not opened), in order; empty
  // for an index directory.
  virtual std::vector<const IndexReader*> partitions() const { return {}; }

 protected:
  IndexReader();

  // Filled by the implementation's Open, never changed after it.
  std::string path_;
  std::string db_identity_;
  VersionInfo version_;
  std::vector<uint32_t> shard_ranks_;
  std::vector<ShardMeta> shards_;
  std::vector<std::string> shard_paths_;
  std::map<std::string, std::string> meta_;

 private:
  // The decoded size of compressed tar shard `shard` (its seek table's),
  // memoised in decoded_sizes_; Corruption if the table cannot be read.
  Result<uint64_t> DecodedSize(ShardId shard) const;

  // Per shard of shards_ (allocated at the first DecodedSize): a compressed
  // shard's decoded size + 1 once read, 0 before. Atomic: any thread may
  // fill one in.
  mutable std::once_flag decoded_sizes_once_;
  mutable std::unique_ptr<std::atomic<uint64_t>[]> decoded_sizes_;
};

const char* EntryTypeName(EntryType type);

// Bytes of the files of the index directory at `path` (no database open).
uint64_t IndexDiskBytes(const std::string& path);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INDEX_READER_H_
