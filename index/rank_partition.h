// Per-rank partitions for distributed training: which rank of `world` reads
// each part of a view.
//
// An index directory (index/db_reader.h) is split by SAMPLES, so that every
// rank gets the same number and a DDP job's ranks take the same number of
// steps. A sample is the files of one directory that share a key (the name
// up to its first '.'), as WebDataset and `shardfs pack` group them; in an
// ImageFolder tree a sample is one file. The shards are taken in the order
// ShardOrder shuffles them to by `seed` (a new seed per epoch gives ranks
// other shards), each shard's samples by the offset of their first member,
// and the sequence of n samples is cut into `world` contiguous runs of
// q = floor(n / world) samples: rank r reads run r. The n - world * q
// samples after the last run belong to no rank: they are trimmed, as
// torch's DistributedSampler does with drop_last (a tree cannot repeat a
// file to pad). A rank reads about 1/world of the bytes, in long runs: a
// whole shard between a first and a last, at most shards/world + 2 shards
// when the shards hold about as many samples. SampleSplit holds the cuts.
//
// A manifest (index/union_reader.h) is split the same way, over the union's
// tree and shards (its shard numbers: the partitions' in manifest order, its
// inode numbers). Both readers walk their tree at open to count the samples
// (index/rank_share.h): 200,000 files in four partitions took 0.09 s here,
// warm.
#ifndef SHARDFS_INDEX_RANK_PARTITION_H_
#define SHARDFS_INDEX_RANK_PARTITION_H_

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// splitmix64: the mixing step of the shuffle, and the rank of a symlink
// (RankOfSymlink).
uint64_t SplitMix64(uint64_t x);

// Shards 0..count-1 in the order shuffled by `seed`.
std::vector<uint32_t> ShardOrder(size_t count, uint64_t seed);

// Where a sample starts in its shard: the offset of its first member, then
// that member's inode (two empty files may share an offset). A member of a
// sample lies at or after its sample's key and before the next sample's
// when a sample's files are adjacent in the shard, as pack writes them. The
// names of one hard-linked file are samples with one key, so on one rank: a
// cut between them moves both to the later rank, one sample off the count.
struct SampleKey {
  uint64_t offset = 0;
  uint64_t inode = 0;
  auto operator<=>(const SampleKey&) const = default;
};

// The split of a view's samples into `world` runs of equal length. Made in
// two steps, so that memory stays bounded: Make from the number of samples
// in each shard, then SetKeys for each shard a cut falls in (NeedsKeys).
// Immutable after that; RankOf allocates nothing.
class SampleSplit {
 public:
  // `samples[i]`: the number of samples whose first member is in shard i.
  // InvalidArgument naming index `path` when there are fewer samples than
  // ranks. REQUIRES: world > 0.
  static Result<SampleSplit> Make(const std::string& path, const std::vector<uint64_t>& samples,
                                  uint32_t world, uint64_t seed);

  // Whether the samples of `shard` go to more than one rank (trimmed
  // samples count as a rank of their own), so RankOf needs their keys.
  bool NeedsKeys(uint32_t shard) const { return shard < owner_.size() && owner_[shard] == kCut; }
  // The keys of the samples of `shard` (in any order; as many as Make was
  // told). REQUIRES: NeedsKeys(shard), and called once for it.
  void SetKeys(uint32_t shard, std::vector<SampleKey> keys);

  // The rank of the sample or member at `key` of shard `shard`: `world` for
  // a trimmed one and for a shard with no sample.
  uint32_t RankOf(uint32_t shard, SampleKey key) const;
  // The rank holding every sample of `shard`, or `world` when that is no
  // rank (trimmed, empty) or more than one (NeedsKeys).
  uint32_t OwnerOf(uint32_t shard) const;

  uint64_t samples() const { return samples_; }
  uint64_t per_rank() const { return per_rank_; }
  uint32_t world() const { return world_; }

 private:
  static constexpr uint32_t kCut = UINT32_MAX;
  // The rank of the sample at position `p` of the sequence.
  uint32_t RankAt(uint64_t p) const;
  // Where a rank begins inside a shard: from key `from` on, rank `rank`.
  struct Cut {
    SampleKey from;
    uint32_t rank = 0;
  };
  // A shard a cut falls in: its cuts are cuts_[begin, end).
  struct CutShard {
    uint32_t shard = 0;
    uint32_t begin = 0;
    uint32_t end = 0;
  };

  uint32_t world_ = 0;
  uint64_t samples_ = 0;
  uint64_t per_rank_ = 0;
  // Per shard: its rank, `world_` for none, kCut for several.
  std::vector<uint32_t> owner_;
  // Per shard: the position of its first sample in the sequence.
  std::vector<uint64_t> first_;
  std::vector<uint64_t> count_;
  std::vector<Cut> cuts_;
  std::vector<CutShard> cut_shards_;  // By shard, ascending.
};

// Symlinks hold no shard bytes and are no sample: each goes to one rank by
// its inode.
inline uint32_t RankOfSymlink(uint64_t inode, uint32_t world, uint64_t seed) {
  return static_cast<uint32_t>(SplitMix64(seed ^ inode) % world);
}

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_RANK_PARTITION_H_
