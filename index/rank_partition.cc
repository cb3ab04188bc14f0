#include "index/rank_partition.h"

#include <fmt/format.h>

#include <algorithm>
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

// Fisher-Yates, driven by splitmix64.
std::vector<uint32_t> ShardOrder(size_t n, uint64_t seed) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  uint64_t state = seed;
  for (size_t i = order.size(); i > 1; --i) {
    state = SplitMix64(state);
    std::swap(order[i - 1], order[state % i]);
  }
  return order;
}

Result<SampleSplit> SampleSplit::Make(const std::string& path, const std::vector<uint64_t>& samples,
                                      uint32_t world, uint64_t seed) {
  SampleSplit split;
  split.world_ = world;
  for (uint64_t c : samples) split.samples_ += c;
  if (split.samples_ < world) {
    return Status::InvalidArgument(
        fmt::format("index {}: {} samples cannot give each of {} ranks one; use world <= {}", path,
                    split.samples_, world, split.samples_));
  }
  split.per_rank_ = split.samples_ / world;
  split.owner_.assign(samples.size(), world);
  split.first_.assign(samples.size(), 0);
  split.count_ = samples;
  uint64_t at = 0;
  for (uint32_t shard : ShardOrder(samples.size(), seed)) {
    split.first_[shard] = at;
    if (samples[shard] != 0) {
      const uint32_t lo = split.RankAt(at);
      const uint32_t hi = split.RankAt(at + samples[shard] - 1);
      split.owner_[shard] = lo == hi ? lo : kCut;
    }
    at += samples[shard];
  }
  return split;
}

uint32_t SampleSplit::RankAt(uint64_t p) const {
  const uint64_t r = p / per_rank_;
  return r < world_ ? static_cast<uint32_t>(r) : world_;
}

void SampleSplit::SetKeys(uint32_t shard, std::vector<SampleKey> keys) {
  std::sort(keys.begin(), keys.end());
  CutShard cs;
  cs.shard = shard;
  cs.begin = static_cast<uint32_t>(cuts_.size());
  const uint64_t n = std::min<uint64_t>(keys.size(), count_[shard]);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t r = RankAt(first_[shard] + i);
    if (cuts_.size() == cs.begin || cuts_.back().rank != r) cuts_.push_back({keys[i], r});
  }
  cs.end = static_cast<uint32_t>(cuts_.size());
  auto at = std::lower_bound(cut_shards_.begin(), cut_shards_.end(), shard,
                             [](const CutShard& c, uint32_t s) { return c.shard < s; });
  cut_shards_.insert(at, cs);
}

uint32_t SampleSplit::OwnerOf(uint32_t shard) const {
  if (shard >= owner_.size() || owner_[shard] == kCut) return world_;
  return owner_[shard];
}

uint32_t SampleSplit::RankOf(uint32_t shard, SampleKey key) const {
  if (shard >= owner_.size()) return world_;
  if (owner_[shard] != kCut) return owner_[shard];
  auto cs = std::lower_bound(cut_shards_.begin(), cut_shards_.end(), shard,
                             [](const CutShard& c, uint32_t s) { return c.shard < s; });
  if (cs == cut_shards_.end() || cs->shard != shard || cs->begin == cs->end) return world_;
  const Cut* first = cuts_.data() + cs->begin;
  const Cut* last = cuts_.data() + cs->end;
  // The last cut at or before `key`; a member before the shard's first
  // sample goes with that sample.
  const Cut* after =
      std::upper_bound(first, last, key, [](SampleKey k, const Cut& c) { return k < c.from; });
  return after == first ? first->rank : (after - 1)->rank;
}

}  // namespace shardfs::index
