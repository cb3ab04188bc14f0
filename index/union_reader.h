// The reader of a manifest: the union of its partitions (index/manifest.h),
// answered from the partitions' own readers and the outcome the manifest
// records, so no question costs a scan: a lookup in a union directory is a
// lookup per copy (from the last partition back), a listing one merge of the
// copies' listings, and everything else one partition's answer renumbered.
// What IndexReader::Open returns for a manifest file.
//
// A rank's partition (index/rank_partition.h) is the union's own, as an
// index directory's is its own: Open opens every partition whole, walks the
// union's tree and keeps a RankShare (index/rank_share.h) that decides each
// record in the union's numbers (its shard, offset and inode).
//
// Ownership: the union owns its partitions' readers; a record or a cursor
// it hands out points into a partition, so none outlives the union.
// Thread safety: immutable after Open (the partitions are thread-safe
// readers) but for the rank's memo of directories, which RankShare guards;
// shared by every thread without a lock.
#ifndef SHARDFS_INDEX_UNION_READER_H_
#define SHARDFS_INDEX_UNION_READER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/inode_set.h"
#include "index/manifest.h"
#include "index/view_store.h"

namespace shardfs::index {

class RankShare;

class UnionReader final : public IndexReader {
 public:
  // Opens the manifest file at `path`; the Status is that of
  // IndexReader::Open, and a partition's failure names the partition.
  static Result<std::unique_ptr<UnionReader>> Open(const std::string& path,
                                                   const ReaderOptions& options = {});
  ~UnionReader() override;

  Status Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                RecordHolder* holder) const override;
  Status GetInode(InodeId inode, EntryRecord* rec, RecordHolder* holder) const override;
  Status ForEachChild(
      InodeId dir, std::string_view start_after,
      const std::function<bool(std::string_view, const EntryRecord&)>& fn) const override;
  Status ForEachInode(InodeId first,
                      const std::function<bool(const EntryRecord&)>& fn) const override;
  const Catalog& catalog() const override { return *catalog_; }
  uint64_t DiskBytes() const override;
  Result<std::vector<uint64_t>> ShardBytes() const override;
  // A seek key of union shard `shard` is its partition's, asked there.
  Status GetSeekValue(ShardId shard, bool window, uint32_t point,
                      std::string* value) const override;
  Status GetSeekSums(ShardId shard, std::string* value) const override;
  Status ForEachSeekKey(ShardId shard,
                        const std::function<bool(std::string_view suffix, std::string_view value)>&
                            fn) const override;
  const Manifest* manifest() const override { return &manifest_; }
  std::vector<const IndexReader*> partitions() const override;

 private:
  UnionReader();
  // The steps of Open, in order; each returns the Status Open documents.
  // Fills bases_ and shard_bases_ from the tree's per-partition counts.
  Status LayOut();
  // Opens every partition, appending its shards to the shard table, and
  // decodes hidden_.
  Status OpenParts(const ReaderOptions& options);
  // Fills dirs_, copies_ and nlinks_ from the tree; Corruption if a union
  // directory is not well formed or the root is missing.
  Status IndexDirs();
  // The union's version, counts and meta values.
  void Describe();
  // With a rank partition (world > 0): walks the union's tree and splits
  // its samples (share_, shard_ranks_), as an index directory's.
  Status LoadRanks(const ReaderOptions& options);

  const ManifestTree& tree() const { return manifest_.trees[tree_]; }
  static uint64_t Key(uint32_t p, uint64_t local) { return uint64_t{p} << 48 | local; }
  // REQUIRES: 1 <= global <= bases_.back().
  uint32_t PartitionOf(uint64_t global) const {
    auto it = std::lower_bound(bases_.begin() + 1, bases_.end(), global);
    return static_cast<uint32_t>(it - bases_.begin() - 1);
  }
  const UnionDir* FindDir(uint64_t global) const;
  // Renumbers a partition's record into the union's numbers.
  void Translate(uint32_t p, EntryRecord* rec) const;
  // Whether a record of the union (its numbers) is of the rank: always
  // without one, else RankShare::Holds.
  bool Shown(const EntryRecord& rec) const;
  // The entry a name of a union directory resolves to among candidates in
  // partition order, from the last back: a union directory, or the first
  // entry the union does not hide. False if none. Whatever the rank.
  bool Pick(uint32_t p, EntryRecord* rec) const;
  // ForEachChild, of the rank's entries (`ranked`) or of every entry.
  Status ForEachChildIn(InodeId dir, std::string_view start_after,
                        const std::function<bool(std::string_view, const EntryRecord&)>& fn,
                        bool ranked) const;
  // The open partition that holds union shard `shard`, and the shard's id
  // there; NotFound if its partition is not open.
  Result<std::pair<const IndexReader*, ShardId>> PartitionOfShard(ShardId shard) const;

  Manifest manifest_;
  // Points into manifest_: declared after it, so destroyed first.
  std::unique_ptr<Catalog> catalog_;
  size_t tree_ = 0;  // The tree of manifest_ answered for.
  std::vector<std::unique_ptr<IndexReader>> parts_;
  std::vector<uint64_t> bases_;        // Inodes before partition p; [P] = all.
  std::vector<uint32_t> shard_bases_;  // Shards before partition p.
  std::vector<InodeSet> hidden_;
  std::unordered_map<uint64_t, size_t> dirs_;      // Global inode -> its union_dirs index.
  std::unordered_map<uint64_t, uint64_t> copies_;  // Key(p, local) -> global inode.
  std::unordered_map<uint64_t, uint32_t> nlinks_;  // Key(p, local) -> link count.
  // The rank partition (world > 0); its memo of directories is guarded.
  std::unique_ptr<RankShare> share_;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_UNION_READER_H_
