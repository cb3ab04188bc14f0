// src/mount/push_budget.h: the random-read push window follows the memory
// available, read through an injected reader, and is read again while the
// mount runs.
#include "src/mount/push_budget.h"

#include <gtest/gtest.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

namespace shardfs::mount {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(PushBudgetTest, TheWholeWindowWhileTheDatasetFitsInHalfOfWhatIsAvailable) {
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 1 * kGiB, 2 * kGiB), 4 * kMiB);
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 1 * kGiB, 8 * kGiB), 4 * kMiB);
}

TEST(PushBudgetTest, NothingWhenTheDatasetDoesNotFitOrTooLittleIsAvailable) {
  // Half of 4 GiB holds half of a 4 GiB dataset: pushes would evict each
  // other, whatever the window.
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 4 * kGiB, 4 * kGiB), 0u);
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 2 * kGiB + 1, 4 * kGiB), 0u);
  EXPECT_EQ(PushBudget::WindowFor(4 * kMiB, 2 * kGiB, 4 * kGiB), 4 * kMiB);
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
  available->store(8 * kGiB);  // Another program took memory: still fits.
  EXPECT_EQ(budget.Window(), 4 * kMiB);
  available->store(6 * kGiB);  // No longer.
  EXPECT_EQ(budget.Window(), 0u);
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

TEST(PushBudgetTest, HalvesWhilePushedFilesComeBackAsReadsAndDoublesBack) {
  using B = PushBudget;
  // Too few outcomes: no decision.
  EXPECT_EQ(B::NextHalvings(0, 10, 10), 0);
  EXPECT_EQ(B::NextHalvings(3, B::kMinOutcomes - 1, 0), 3);
  // Wasted at least half of pushed: halve once more.
  EXPECT_EQ(B::NextHalvings(0, 100, 50), 1);
  EXPECT_EQ(B::NextHalvings(2, 0, 100), 3);
  EXPECT_EQ(B::NextHalvings(B::kMaxHalvings, 0, 1000), B::kMaxHalvings);
  // At most an eighth: double back.
  EXPECT_EQ(B::NextHalvings(2, 800, 100), 1);
  EXPECT_EQ(B::NextHalvings(0, 800, 0), 0);
  // In between: stay.
  EXPECT_EQ(B::NextHalvings(2, 100, 25), 2);
}

TEST(PushBudgetTest, TheWindowFollowsTheFateOfThePushedFiles) {
  auto available = std::make_shared<std::atomic<uint64_t>>(16 * kGiB);
  auto reads = std::make_shared<std::atomic<int>>(0);
  PushBudget budget = Counted(available, reads, std::chrono::milliseconds(0));
  EXPECT_EQ(budget.Window(), 4 * kMiB);
  // Pushed files come back as READs: the window halves at each decision.
  budget.NotePushed(100);
  budget.NoteWasted(80);
  EXPECT_EQ(budget.Window(), 2 * kMiB);
  EXPECT_EQ(budget.halvings(), 1);
  // Counted outcomes are used once: no new ones, no new decision.
  EXPECT_EQ(budget.Window(), 2 * kMiB);
  // Down to kMinWindow (6 halvings from 4 MiB), then fewer reads get a
  // push: one in 2, 4, ... 1024, never none.
  for (int i = 0; i < 5; ++i) {
    budget.NoteWasted(PushBudget::kMinOutcomes);
    budget.Window();
  }
  EXPECT_EQ(budget.Window(), PushBudget::kMinWindow);
  EXPECT_EQ(budget.halvings(), 6);
  auto pushes_per = [&](int reads) {
    int n = 0;
    for (int i = 0; i < reads; ++i) n += budget.ForRead();
    return n;
  };
  EXPECT_EQ(pushes_per(1000), 1000);
  budget.NoteWasted(PushBudget::kMinOutcomes);
  budget.Window();
  EXPECT_EQ(pushes_per(1000), 500);
  for (int i = 0; i < 40; ++i) {
    budget.NoteWasted(PushBudget::kMinOutcomes);
    budget.Window();
  }
  EXPECT_EQ(budget.Window(), PushBudget::kMinWindow);
  EXPECT_EQ(budget.halvings(), 6 + PushBudget::kMaxThinning);
  EXPECT_EQ(pushes_per(1024 * 8), 8);
  // Pushed files stay until read again: the window grows back to what the
  // memory allows.
  for (int i = 0; i < 6 + PushBudget::kMaxThinning; ++i) {
    budget.NotePushed(PushBudget::kMinOutcomes);
    budget.Window();
  }
  EXPECT_EQ(budget.Window(), 4 * kMiB);
  EXPECT_EQ(budget.halvings(), 0);
  EXPECT_EQ(pushes_per(100), 100);
  // Memory short: 0 whatever the feedback says.
  available->store(100 * kMiB);
  EXPECT_EQ(budget.Window(), 0u);
}

// A fake /proc/self and cgroup tree under `dir`.
class FakeCgroups {
 public:
  FakeCgroups()
      : dir_(::testing::TempDir() + "/cgroups-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter_++)) {
    std::filesystem::create_directories(dir_ + "/proc");
  }
  ~FakeCgroups() { std::filesystem::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::path p = dir_ + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  uint64_t Available() const { return PushBudget::CgroupAvailable(dir_ + "/proc", dir_); }

 private:
  static inline int counter_ = 0;
  std::string dir_;
};

constexpr char kV2Mountinfo[] =
    "22 1 0:21 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    "30 1 8:1 / / rw - ext4 /dev/vda rw\n";

TEST(PushBudgetTest, ACgroupV2LimitLeavesTheLimitLessWhatIsNotFileCache) {
  FakeCgroups fake;
  fake.Write("/proc/cgroup", "0::/job/step\n");
  fake.Write("/proc/mountinfo", kV2Mountinfo);
  // No limit anywhere: no figure.
  fake.Write("/sys/fs/cgroup/job/step/memory.max", "max\n");
  fake.Write("/sys/fs/cgroup/job/memory.max", "max\n");
  EXPECT_EQ(fake.Available(), UINT64_MAX);
  // The job's limit: 4 GiB, 3 GiB charged of which 2 GiB file cache.
  fake.Write("/sys/fs/cgroup/job/memory.max", std::to_string(4 * kGiB) + "\n");
  fake.Write("/sys/fs/cgroup/job/memory.current", std::to_string(3 * kGiB) + "\n");
  fake.Write("/sys/fs/cgroup/job/memory.stat", "anon 1\nactive_file " + std::to_string(kGiB) +
                                                   "\ninactive_file " + std::to_string(kGiB) +
                                                   "\nshmem 0\n");
  EXPECT_EQ(fake.Available(), 3 * kGiB);
  // A lower memory.high on the step itself wins.
  fake.Write("/sys/fs/cgroup/job/step/memory.high", std::to_string(kGiB) + "\n");
  EXPECT_EQ(fake.Available(), kGiB);
  // More held than the limit: nothing.
  fake.Write("/sys/fs/cgroup/job/step/memory.current", std::to_string(2 * kGiB) + "\n");
  EXPECT_EQ(fake.Available(), 0u);
}

TEST(PushBudgetTest, ACgroupV1MemoryLimitAndANamespacedMountRoot) {
  FakeCgroups fake;
  fake.Write("/proc/cgroup", "9:cpu,cpuacct:/pod\n4:memory,pids:/pod/c1\n0::/\n");
  // The memory hierarchy is mounted from the pod's cgroup down (a container).
  fake.Write("/proc/mountinfo",
             "25 1 0:22 /pod /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory,pids\n"
             "26 1 0:23 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n");
  fake.Write("/sys/fs/cgroup/memory/c1/memory.limit_in_bytes", "9223372036854771712\n");
  fake.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(8 * kGiB) + "\n");
  fake.Write("/sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(5 * kGiB) + "\n");
  fake.Write("/sys/fs/cgroup/memory/memory.stat",
             "cache 9\ntotal_inactive_file " + std::to_string(kGiB) + "\ntotal_active_file " +
                 std::to_string(2 * kGiB) + "\n");
  // 8 GiB less the 2 GiB that is not file cache.
  EXPECT_EQ(fake.Available(), 6 * kGiB);
  // A cgroup outside the mount's root is not read.
  fake.Write("/proc/cgroup", "4:memory:/other\n");
  EXPECT_EQ(fake.Available(), UINT64_MAX);
}

TEST(PushBudgetTest, NoCgroupFilesNoFigure) {
  FakeCgroups fake;
  fake.Write("/proc/cgroup", "0::/a\n");
  fake.Write("/proc/mountinfo", kV2Mountinfo);
  EXPECT_EQ(fake.Available(), UINT64_MAX);
  EXPECT_EQ(PushBudget::CgroupAvailable("/nonexistent-proc", ""), UINT64_MAX);
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
}  // namespace shardfs::mount
