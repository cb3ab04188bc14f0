#include "index/rank_partition.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace shardfs::index {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<uint32_t> AssignShardsToRanks(const std::vector<uint64_t>& bytes, uint32_t world,
                                          uint64_t seed) {
  std::vector<uint32_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0u);
  // Fisher-Yates, driven by splitmix64 of the seed.
  uint64_t state = seed;
  for (size_t i = order.size(); i > 1; --i) {
    state = SplitMix64(state);
    std::swap(order[i - 1], order[state % i]);
  }
  std::vector<uint64_t> load(world, 0);
  std::vector<uint64_t> count(world, 0);
  std::vector<uint32_t> rank(bytes.size(), 0);
  for (uint32_t shard : order) {
    // Fewest bytes; on a tie (empty shards, a fresh start) fewest shards.
    uint32_t best = 0;
    for (uint32_t r = 1; r < world; ++r) {
      if (load[r] < load[best] || (load[r] == load[best] && count[r] < count[best])) best = r;
    }
    rank[shard] = best;
    load[best] += bytes[shard];
    ++count[best];
  }
  return rank;
}

}  // namespace shardfs::index
