#include "index/rank_partition.h"

#include <fmt/format.h>

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

namespace {

// 0..n-1 in an order shuffled by `seed` (Fisher-Yates, driven by splitmix64).
std::vector<uint32_t> Shuffled(size_t n, uint64_t seed) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  uint64_t state = seed;
  for (size_t i = order.size(); i > 1; --i) {
    state = SplitMix64(state);
    std::swap(order[i - 1], order[state % i]);
  }
  return order;
}

}  // namespace

std::vector<uint32_t> AssignShardsToRanks(const std::vector<uint64_t>& bytes, uint32_t world,
                                          uint64_t seed) {
  std::vector<uint32_t> order = Shuffled(bytes.size(), seed);
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

// Sums of bytes times the world exceed 64 bits (100 TB x 2^20 ranks); GCC's
// and Clang's 128-bit integer, marked as the extension it is.
__extension__ using Uint128 = unsigned __int128;

std::vector<std::vector<uint32_t>> AssignPartitionShardsToRanks(
    const std::vector<std::vector<uint64_t>>& bytes, uint32_t world, uint64_t seed) {
  Uint128 total = 0;
  for (const auto& part : bytes) {
    for (uint64_t b : part) total += b;
  }
  const bool by_count = total == 0;
  if (by_count) {
    for (const auto& part : bytes) total += part.size();
  }
  std::vector<std::vector<uint32_t>> rank(bytes.size());
  Uint128 before = 0;  // Twice the weight of the shards before this one.
  for (uint32_t p : Shuffled(bytes.size(), seed)) {
    rank[p].resize(bytes[p].size());
    for (size_t i = 0; i < bytes[p].size(); ++i) {
      const uint64_t w = by_count ? 1 : bytes[p][i];
      // The middle byte is at (before + w/2) of total: rank floor(that * world / total).
      const Uint128 middle2 = before + w;
      const auto r = static_cast<uint32_t>(middle2 * world / (2 * total));
      rank[p][i] = r < world ? r : world - 1;
      before += 2 * static_cast<Uint128>(w);
    }
  }
  return rank;
}

Status CheckRankHasBytes(const std::string& path, const std::vector<uint64_t>& bytes,
                         const std::vector<uint32_t>& shard_ranks, uint32_t rank, uint32_t world) {
  uint64_t mine = 0;
  uint64_t total = 0;
  size_t holding = 0;
  for (size_t i = 0; i < bytes.size() && i < shard_ranks.size(); ++i) {
    total += bytes[i];
    holding += bytes[i] > 0;
    if (shard_ranks[i] == rank) mine += bytes[i];
  }
  if (mine > 0 || total == 0) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "index {}: rank {} of world {} gets no file: a rank is made of whole shards, and the "
      "view's files lie in {} shard(s); pack into more shards than ranks, or give every rank "
      "the whole view and split it in the loader (shardfs.torch's JobSampler or SampleStream "
      "split inside shards)",
      path, rank, world, holding));
}

}  // namespace shardfs::index
