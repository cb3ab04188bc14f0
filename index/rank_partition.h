// Per-rank partitions for distributed training: which rank of `world` reads
// each shard of a view, as WebDataset's split_by_node does, with whole
// shards balanced by the view's bytes in them.
//
// The shards are shuffled by `seed` (a new seed per epoch gives each rank
// other shards), then each goes to the rank with the fewest bytes so far
// (the one with the fewest shards, then the lowest, on a tie). Greedy assignment in any order keeps
// the largest rank's bytes within one shard of the smallest's: when the rank that ends largest took
// its last shard it was the smallest.
#ifndef SHARDFS_INDEX_RANK_PARTITION_H_
#define SHARDFS_INDEX_RANK_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// splitmix64: the mixing step of the shuffle, and the rank of a symlink
// (RankOfSymlink).
uint64_t SplitMix64(uint64_t x);

// The rank of each shard; `bytes[i]` is shard i's bytes in the view.
// REQUIRES: world > 0.
std::vector<uint32_t> AssignShardsToRanks(const std::vector<uint64_t>& bytes, uint32_t world,
                                          uint64_t seed);

// The rank of each shard of a manifest's partitions; `bytes[p][i]` is shard
// i of partition p's bytes in the view. The partitions are taken in an order
// shuffled by `seed`, each one's shards in order, and the sequence is cut
// into `world` runs of about equal bytes: a shard goes to the rank its middle
// byte falls in (by count when the view has no bytes). A rank then holds the
// shards of about partitions/world + 1 partitions, so a rank mount opens only
// those; each rank's bytes are within one shard of total/world either side.
// REQUIRES: world > 0.
std::vector<std::vector<uint32_t>> AssignPartitionShardsToRanks(
    const std::vector<std::vector<uint64_t>>& bytes, uint32_t world, uint64_t seed);

// InvalidArgument, naming index `path`, when the shards `shard_ranks` gives
// to `rank` hold none of the view's bytes (`bytes[i]`: shard i's) while other
// shards do: whole shards cannot feed more ranks than shards holding bytes,
// and that rank would train on an empty tree while a job of ranks waits for
// it.
Status CheckRankHasBytes(const std::string& path, const std::vector<uint64_t>& bytes,
                         const std::vector<uint32_t>& shard_ranks, uint32_t rank, uint32_t world);

// Symlinks hold no shard bytes: each goes to one rank by its inode.
inline uint32_t RankOfSymlink(uint64_t inode, uint32_t world, uint64_t seed) {
  return static_cast<uint32_t>(SplitMix64(seed ^ inode) % world);
}

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_RANK_PARTITION_H_
