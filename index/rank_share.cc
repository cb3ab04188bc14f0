#include "index/rank_share.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "index/index_reader.h"

namespace shardfs::index {

Result<std::unique_ptr<RankShare>> RankShare::Make(const IndexReader& r, ChildLister list,
                                                   size_t shards, const ReaderOptions& options) {
  if (options.rank >= options.world) {
    return Status::InvalidArgument(fmt::format("rank {} of world {}: expected a rank below {}",
                                               options.rank, options.world, options.world));
  }
  SHARDFS_ASSIGN_OR_RETURN(SampleSplit split,
                           SplitSamples(r, list, shards, options.world, options.seed));
  std::unique_ptr<RankShare> s(new RankShare());
  s->rank_ = options.rank;
  s->world_ = options.world;
  s->seed_ = options.seed;
  s->keep_dirs_ = options.rank_keep_dirs;
  s->list_ = std::move(list);
  s->share_.assign(shards, kNone);
  for (uint32_t i = 0; i < shards; ++i) {
    if (split.NeedsKeys(i)) s->share_[i] = kSome;
    if (split.OwnerOf(i) == options.rank) s->share_[i] = kAll;
  }
  s->split_ = std::move(split);
  return s;
}

std::vector<uint32_t> RankShare::ShardRanks() const {
  std::vector<uint32_t> ranks(share_.size());
  for (uint32_t i = 0; i < ranks.size(); ++i) ranks[i] = split_.OwnerOf(i);
  return ranks;
}

bool RankShare::Holds(const EntryRecord& rec) const {
  switch (rec.type) {
    case EntryType::kFile: {
      const uint32_t shard = rec.shard.value;
      if (shard >= share_.size()) return false;
      if (share_[shard] != kSome) return share_[shard] == kAll;
      return split_.RankOf(shard, SampleKey{rec.offset, rec.inode.value}) == rank_;
    }
    case EntryType::kSymlink:
      return RankOfSymlink(rec.inode.value, world_, seed_) == rank_;
    case EntryType::kDir:
      return keep_dirs_ || rec.inode == kRootInode || DirHolds(rec.inode);
  }
  return false;
}

bool RankShare::DirHolds(InodeId dir) const {
  {
    std::lock_guard lock(mu_);
    auto it = dirs_.find(dir.value);
    if (it != dirs_.end()) return it->second;
  }
  // Something below it is of this rank, or it is empty in the view (then
  // every rank shows it). Computed outside the lock; two threads may both
  // compute the same answer.
  bool empty = true;
  bool found = false;
  Status s = list_(dir, [&](std::string_view, const EntryRecord& child) {
    empty = false;
    found = child.type == EntryType::kDir ? DirHolds(child.inode) : Holds(child);
    return !found;
  });
  const bool in = !s.ok() || found || empty;  // On an error, show it: reads report the error.
  std::lock_guard lock(mu_);
  dirs_.emplace(dir.value, in);
  return in;
}

}  // namespace shardfs::index
