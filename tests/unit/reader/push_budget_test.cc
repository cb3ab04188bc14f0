// reader/push_budget.h: the random-read push window follows the memory
// available, read through an injected reader, and is read again while the
// mount runs.
#include "reader/push_budget.h"

#include <gtest/gtest.h>
#include <sys/sysinfo.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace shardfs::reader {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(PushBudgetTest, TheWholeWindowWhileTheDatasetFitsInHalfOfWhatIsAvailable) {
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 1 * kGiB, 2 * kGiB), 4 * kMiB);
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 1 * kGiB, 8 * kGiB), 4 * kMiB);
}

TEST(PushBudgetTest, APartOfTheWindowForTheFractionOfTheDatasetThatFits) {
  // Half of 4 GiB holds half of a 4 GiB dataset: half the window.
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 4 * kGiB, 4 * kGiB), 2 * kMiB);
  // A quarter.
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 8 * kGiB, 4 * kGiB), 1 * kMiB);
  // Rounded down to whole kMinWindow steps.
  uint64_t w = PushBudget::WindowFor(4 * kMiB, 3 * kGiB, 4 * kGiB);
  EXPECT_EQ(w % PushBudget::kMinWindow, 0u);
  EXPECT_LT(w, 4 * kMiB);
  EXPECT_GT(w, 2 * kMiB);
}

TEST(PushBudgetTest, NothingWhenTooLittleFitsOrTooLittleIsAvailable) {
  // 1/1000 of the window is below kMinWindow.
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 1000 * kGiB, 2 * kGiB), 0u);
  // A tiny dataset, but memory is short.
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, kMiB, PushBudget::kMinAvailable - 1), 0u);
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, kMiB, 0), 0u);  // Unknown.
}

// A budget of 4 MiB over 4 GiB of shards whose memory reader returns
// *available and counts its calls in *reads.
PushBudget Counted(std::shared_ptr<std::atomic<uint64_t>> available,
                   std::shared_ptr<std::atomic<int>> reads, std::chrono::milliseconds interval) {
  return PushBudget(
      4 * kMiB, 4 * kGiB,
      [available, reads] {
        ++*reads;
        return available->load();
      },
      interval);
}

TEST(PushBudgetTest, FollowsTheAvailableMemoryWhileRunning) {
  auto available = std::make_shared<std::atomic<uint64_t>>(16 * kGiB);
  auto reads = std::make_shared<std::atomic<int>>(0);
  PushBudget budget = Counted(available, reads, std::chrono::milliseconds(0));
  EXPECT_EQ(budget.Window(), 4 * kMiB);
  available->store(4 * kGiB);  // Another program took memory.
  EXPECT_EQ(budget.Window(), 2 * kMiB);
  available->store(100 * kMiB);
  EXPECT_EQ(budget.Window(), 0u);
  available->store(16 * kGiB);  // And gave it back.
  EXPECT_EQ(budget.Window(), 4 * kMiB);
  EXPECT_GE(reads->load(), 5);
}

TEST(PushBudgetTest, ReadsMemoryAtMostOncePerInterval) {
  auto available = std::make_shared<std::atomic<uint64_t>>(16 * kGiB);
  auto reads = std::make_shared<std::atomic<int>>(0);
  PushBudget budget = Counted(available, reads, std::chrono::hours(1));
  EXPECT_EQ(reads->load(), 1);  // At construction.
  available->store(100 * kMiB);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(budget.Window(), 4 * kMiB);
  EXPECT_EQ(reads->load(), 1);
}

TEST(PushBudgetTest, TheMachinesAvailableMemoryIsReadFromProc) {
  uint64_t available = PushBudget::ReadMemAvailable();
  struct sysinfo si;
  ASSERT_EQ(::sysinfo(&si), 0);
  const uint64_t total = uint64_t{si.totalram} * si.mem_unit;
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, total);
}

}  // namespace
}  // namespace shardfs::reader
