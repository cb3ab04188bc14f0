// src/remote/request_stats.h: latency buckets and request counters.
#include "src/remote/request_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

namespace shardfs::remote {
namespace {

TEST(RequestStatsTest, BucketsAreOrderedAndBoundTheirValues) {
  int last = 0;
  for (uint64_t us = 0; us < 5'000'000; us = us * 5 / 4 + 1) {
    const int b = RequestStats::BucketOf(us);
    EXPECT_GE(b, last) << us;
    EXPECT_GE(RequestStats::BucketUpperBound(b), us) << us;
    if (us >= 8) {
      EXPECT_LE(RequestStats::BucketUpperBound(b), us * 5 / 4) << us;
    }
    last = b;
  }
}

TEST(RequestStatsTest, SnapshotCountsAndPercentiles) {
  RequestStats s;
  for (int i = 1; i <= 100; ++i) s.AddLatency(std::chrono::microseconds(i * 1000));
  s.AddRequest();
  s.AddRetry();
  s.AddBytes(10);
  s.AddInFlight(2);
  s.AddInFlight(-1);
  s.AddError(ErrorKind::kThrottle);
  const RequestStatsSnapshot snap = s.Snapshot();
  EXPECT_EQ(snap.requests, 1u);
  EXPECT_EQ(snap.retries, 1u);
  EXPECT_EQ(snap.bytes_received, 10u);
  EXPECT_EQ(snap.in_flight, 1);
  EXPECT_EQ(snap.errors[static_cast<int>(ErrorKind::kThrottle)], 1u);
  EXPECT_EQ(snap.errors_total(), 1u);
  EXPECT_EQ(snap.latency_count, 100u);
  EXPECT_EQ(snap.latency_max_us, 100'000u);
  EXPECT_GE(snap.latency_p50_us, 50'000u);
  EXPECT_LE(snap.latency_p50_us, 62'500u);
  EXPECT_GE(snap.latency_p90_us, 90'000u);
  EXPECT_GE(snap.latency_p99_us, 99'000u);
  EXPECT_LE(snap.latency_p99_us, 100'000u);
  EXPECT_EQ(ErrorKindName(ErrorKind::kServer), "5xx");
}

}  // namespace
}  // namespace shardfs::remote
