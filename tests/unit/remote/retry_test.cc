// src/remote/retry.h: backoff with full jitter and retry planning within a budget.
#include "src/remote/retry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>

namespace shardfs::remote {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, CeilingDoublesUpToTheMaximum) {
  Backoff b(milliseconds(50), milliseconds(2000), 1);
  EXPECT_EQ(b.Ceiling(0), milliseconds(50));
  EXPECT_EQ(b.Ceiling(1), milliseconds(100));
  EXPECT_EQ(b.Ceiling(5), milliseconds(1600));
  EXPECT_EQ(b.Ceiling(6), milliseconds(2000));
  EXPECT_EQ(b.Ceiling(1000), milliseconds(2000));  // No overflow.
}

TEST(BackoffTest, DelaysAreFullyJitteredWithinTheCeiling) {
  Backoff b(milliseconds(50), milliseconds(2000), 42);
  for (int retry = 0; retry < 12; ++retry) {
    std::map<int64_t, int> seen;
    for (int i = 0; i < 200; ++i) {
      const milliseconds d = b.Next(retry);
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, b.Ceiling(retry));
      seen[d.count()]++;
    }
    EXPECT_GT(seen.size(), 20u) << "retry " << retry << ": not jittered";
    // Full jitter: some delays well below half the ceiling, some above.
    EXPECT_LT(seen.begin()->first, b.Ceiling(retry).count() / 4);
    EXPECT_GT(seen.rbegin()->first, b.Ceiling(retry).count() * 3 / 4);
  }
}

TEST(BackoffTest, PlanRetryKeepsToTheBudgetAndHonoursRetryAfter) {
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline = now + milliseconds(1000);
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), std::nullopt), milliseconds(100));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(500)), milliseconds(500));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(5)), milliseconds(100));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(2000)), std::nullopt);
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(1000), std::nullopt), std::nullopt);
  EXPECT_EQ(PlanRetry(deadline, deadline, milliseconds(0), std::nullopt), std::nullopt);
  // A schedule of retries never plans past the deadline.
  Backoff b(milliseconds(50), milliseconds(2000), 7);
  Clock::time_point t = now;
  for (int retry = 0;; ++retry) {
    auto w = PlanRetry(t, deadline, b.Next(retry), std::nullopt);
    if (!w) break;
    t += *w;
    ASSERT_LT(t, deadline);
  }
}

}  // namespace
}  // namespace shardfs::remote
