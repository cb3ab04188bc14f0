#include "src/remote/request_stats.h"

#include <bit>
#include <cmath>

namespace shardfs::remote {

std::string_view ErrorKindName(ErrorKind kind) {
  static constexpr std::string_view kNames[kErrorKinds] = {
      "5xx",          "throttle",  "connect", "reset",        "timeout", "tls",
      "precondition", "not_found", "denied",  "bad_response", "other"};
  return kNames[static_cast<int>(kind)];
}

uint64_t RequestStatsSnapshot::errors_total() const {
  uint64_t n = 0;
  for (uint64_t e : errors) n += e;
  return n;
}

int RequestStats::BucketOf(uint64_t us) {
  if (us < 2) return 0;
  // Integer part from the top bit, quarter steps from the next two bits:
  // cheap and monotonic.
  const int log2 = 63 - std::countl_zero(us);
  const int quarter = log2 >= 2 ? static_cast<int>((us >> (log2 - 2)) & 3)
                                : static_cast<int>((us << (2 - log2)) & 3);
  const int b = 4 * log2 + quarter;
  return b < kBuckets ? b : kBuckets - 1;
}

uint64_t RequestStats::BucketUpperBound(int bucket) {
  const int log2 = bucket / 4;
  const int quarter = bucket % 4;
  // The bucket holds [2^log2 * (4+quarter)/4, 2^log2 * (5+quarter)/4).
  if (log2 < 2) return ((uint64_t{5 + static_cast<uint64_t>(quarter)} << log2) + 3) / 4;
  return (uint64_t{5 + static_cast<uint64_t>(quarter)} << (log2 - 2)) - 1;
}

void RequestStats::AddLatency(std::chrono::microseconds latency) {
  const uint64_t us = latency.count() < 0 ? 0 : static_cast<uint64_t>(latency.count());
  latency_[BucketOf(us)].fetch_add(1, std::memory_order_relaxed);
  uint64_t max = latency_max_.load(std::memory_order_relaxed);
  while (us > max && !latency_max_.compare_exchange_weak(max, us, std::memory_order_relaxed)) {
  }
}

RequestStatsSnapshot RequestStats::Snapshot() const {
  RequestStatsSnapshot s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.bytes_received = bytes_.load(std::memory_order_relaxed);
  s.unverified = unverified_.load(std::memory_order_relaxed);
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  for (int i = 0; i < kErrorKinds; ++i) s.errors[i] = errors_[i].load(std::memory_order_relaxed);
  std::array<uint64_t, kBuckets> counts;
  for (int i = 0; i < kBuckets; ++i) {
    counts[i] = latency_[i].load(std::memory_order_relaxed);
    s.latency_count += counts[i];
  }
  s.latency_max_us = latency_max_.load(std::memory_order_relaxed);
  if (s.latency_count == 0) return s;
  auto percentile = [&](double q) {
    const uint64_t rank =
        static_cast<uint64_t>(std::ceil(q * static_cast<double>(s.latency_count)));
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts[i];
      if (seen >= rank && counts[i] > 0) {
        // No percentile above the largest value seen.
        const uint64_t bound = BucketUpperBound(i);
        return bound < s.latency_max_us ? bound : s.latency_max_us;
      }
    }
    return s.latency_max_us;
  };
  s.latency_p50_us = percentile(0.50);
  s.latency_p90_us = percentile(0.90);
  s.latency_p99_us = percentile(0.99);
  return s;
}

}  // namespace shardfs::remote
