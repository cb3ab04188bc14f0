#include "src/remote/retry.h"

#include <algorithm>

namespace shardfs::remote {

Backoff::Backoff(Millis initial, Millis max, uint64_t seed)
    : initial_(std::max(initial, Millis(1))), max_(std::max(max, initial_)), rng_(seed) {}

Millis Backoff::Ceiling(int retry) const {
  Millis c = initial_;
  for (int i = 0; i < retry && c < max_; ++i) c *= 2;
  return std::min(c, max_);
}

Millis Backoff::Next(int retry) {
  std::uniform_int_distribution<int64_t> d(0, Ceiling(retry).count());
  return Millis(d(rng_));
}

std::optional<Millis> PlanRetry(Clock::time_point now, Clock::time_point deadline, Millis backoff,
                                std::optional<Millis> retry_after, Millis min_attempt) {
  Millis wait = backoff;
  if (retry_after && *retry_after > wait) wait = *retry_after;
  if (now + wait + min_attempt > deadline) return std::nullopt;
  return wait;
}

}  // namespace shardfs::remote
