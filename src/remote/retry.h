// When to try a failed request again: exponential backoff with full jitter
// inside a time budget.
//
// Full jitter (delay uniform in [0, min(max, initial * 2^n)]) spreads the
// retries of many clients that failed together (a server restart, a 503
// burst), where plain exponential backoff would send them back in waves.
#ifndef SHARDFS_SRC_REMOTE_RETRY_H_
#define SHARDFS_SRC_REMOTE_RETRY_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

namespace shardfs::remote {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Backoff {
 public:
  // REQUIRES: 0 < initial <= max.
  Backoff(Millis initial, Millis max, uint64_t seed);

  // The largest delay before retry number `retry` (0 for the first retry):
  // min(max, initial * 2^retry). Never overflows.
  Millis Ceiling(int retry) const;
  // A delay drawn uniformly from [0, Ceiling(retry)].
  Millis Next(int retry);

 private:
  Millis initial_;
  Millis max_;
  std::mt19937_64 rng_;
};

// The wait before the next attempt, or nullopt when the budget does not
// allow one: the wait is the jittered `backoff`, or the server's
// `retry_after` when that is longer, and the next attempt must start before
// `deadline` with at least `min_attempt` left for it to run.
std::optional<Millis> PlanRetry(Clock::time_point now, Clock::time_point deadline, Millis backoff,
                                std::optional<Millis> retry_after, Millis min_attempt = Millis(1));

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_RETRY_H_
