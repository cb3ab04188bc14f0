// A rank's share of a view's tree (index/rank_partition.h): the split of the
// view's samples, made once at open, and the question both readers of an
// index, one directory's (index/db_reader.h) and a manifest's union
// (index/union_reader.h), ask of each record before they answer with it.
// One code path, so that a rank of an index directory and a rank of a
// manifest over the same shards follow the same rule.
//
// Thread safety: immutable after Make but for the memo of directories,
// guarded by mu_; Holds may be called from any number of threads.
#ifndef SHARDFS_INDEX_RANK_SHARE_H_
#define SHARDFS_INDEX_RANK_SHARE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/rank_partition.h"
#include "index/sample_walk.h"
#include "index/schema.h"

namespace shardfs::index {

class IndexReader;
struct ReaderOptions;

class RankShare {
 public:
  // Rank options.rank of options.world's share of the tree of `r`, over its
  // shards 0..shards-1, split by options.seed. `list` must list every entry
  // of the view (not only the rank's) for as long as the share lives: it
  // walks the tree now (SplitSamples), and later the directories Holds is
  // asked about. InvalidArgument for a rank outside the world, and the
  // errors of SplitSamples (fewer samples than ranks).
  static Result<std::unique_ptr<RankShare>> Make(const IndexReader& r, ChildLister list,
                                                 size_t shards, const ReaderOptions& options);

  // Whether record `rec` of the view is of the rank: a file by the rank of
  // its sample (its shard, or the cuts by (offset, inode)), a symlink by
  // RankOfSymlink, a directory when something below it is of the rank or
  // nothing is below it at all (or always, with rank_keep_dirs). A file
  // costs no allocation; a directory a listing, once.
  bool Holds(const EntryRecord& rec) const;

  // The rank holding every sample of each of the shards: `world` where the
  // samples of a shard are split between ranks, trimmed or none.
  std::vector<uint32_t> ShardRanks() const;

 private:
  RankShare() = default;
  bool DirHolds(InodeId dir) const;

  // Per shard: none, all of its samples of this rank, or some (ask split_).
  enum Share : uint8_t { kNone, kAll, kSome };
  uint32_t rank_ = 0;
  uint32_t world_ = 0;
  uint64_t seed_ = 0;
  bool keep_dirs_ = false;
  ChildLister list_;
  SampleSplit split_;
  std::vector<Share> share_;
  mutable std::mutex mu_;
  // Directories known to hold something of this rank, or not. Guarded by mu_.
  mutable std::unordered_map<uint64_t, bool> dirs_;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_RANK_SHARE_H_
