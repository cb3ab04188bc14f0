// PushBudget: how many bytes a push after a random read (push_random=auto)
// may store, from the memory the machine has available now.
//
// A shuffled reader's pushes pay off only if the pushed files stay in the
// page cache until the reader gets to them, some time later in the epoch:
// each file's turn comes at a random time, and the pushes run far ahead of
// the reader (a push after each read, up to the first file already pushed,
// covers the whole dataset within the first seconds of an epoch). So either
// the whole dataset stays cached, or most of what is pushed is evicted
// unread, and a smaller window does not change that, only how fast it
// happens: measured over whole epochs of 40,000 JPEGs (1.5 GB), pushes made
// cold reads 1.4x as fast when the dataset fit in memory, and 0.74x as fast
// when the process's memory limit held about half of it. While the
// reader goes through the dataset, the page cache may hold it twice: the
// pushed files in the mount's cache and the shard pages they were read
// from. So:
//  - the shards together fit in half of the available memory (MemAvailable
//    in /proc/meminfo: free memory plus what the kernel can reclaim without
//    swapping): the full window (`max_window`);
//  - they do not, or less than kMinAvailable is available: 0, no push.
// Available memory is read again at most every `recheck`, so a program
// that grows (or a cache that another program fills) shrinks the window
// while the mount runs, and a window that was 0 comes back once memory is
// available again. Available memory is the machine's or, inside a memory
// cgroup with a limit (a container, a cluster job), what the limit leaves:
// the smaller (ReadMemAvailable).
//
// What the memory figure cannot see, the pushes themselves show: a pushed
// file whose reader still had to READ it lost its pages before the reader
// came (the tree is bigger than what the kernel keeps for this process, or
// the host pages out idle memory on its own, as a DAMON pageout scheme
// does). At each recheck with at least kMinOutcomes files pushed or wasted
// since the last decision, the feedback halves once more while wasted files
// number at least half of the files pushed, and doubles back (up to what
// the memory allows) while they number at most an eighth. Halving shrinks
// the window down to kMinWindow; past that, only one random read in 2, 4,
// ... up to 1024 gets a push (ForRead). Those few pushes keep telling
// whether pushing pays again, so the window comes back when it does.
//
// Thread safety: Window() may be called from any thread; the last reading
// and its time are atomics, and at most one caller reads /proc/meminfo at a
// time (the others use the last reading).
#ifndef SHARDFS_SRC_MOUNT_PUSH_BUDGET_H_
#define SHARDFS_SRC_MOUNT_PUSH_BUDGET_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace shardfs::mount {

class PushBudget {
 public:
  // Bytes available now; 0 when it cannot be told.
  using MemAvailable = std::function<uint64_t()>;

  static constexpr std::chrono::milliseconds kRecheck{1000};
  // The feedback's smallest window: a few small files.
  static constexpr uint64_t kMinWindow = 64 << 10;
  // Below this much available memory nothing is pushed at all.
  static constexpr uint64_t kMinAvailable = 256ull << 20;
  // The feedback decides after this many outcomes (pushed + wasted files).
  static constexpr uint64_t kMinOutcomes = 64;
  // Halvings past the one that reached kMinWindow thin out the reads that
  // get a push, down to one in 2^kMaxThinning.
  static constexpr int kMaxThinning = 10;
  static constexpr int kMaxHalvings = 32;

  // `dataset_bytes`: the shards' size together. `mem_available` null: the
  // machine's (ReadMemAvailable).
  PushBudget(uint64_t max_window, uint64_t dataset_bytes, MemAvailable mem_available = nullptr,
             std::chrono::milliseconds recheck = kRecheck);

  // The push window now, 0..max_window: what a push planned now may store.
  uint64_t Window();
  // Whether the random read just answered gets a push at all: always,
  // unless the feedback has halved the window to kMinWindow and on (then one
  // read in 2^n).
  bool ForRead();

  // Feedback, from any thread: `files` were pushed; `files` that had been
  // pushed came back as READs (their pages were gone).
  void NotePushed(uint64_t files) { pushed_.fetch_add(files, std::memory_order_relaxed); }
  void NoteWasted(uint64_t files) { wasted_.fetch_add(files, std::memory_order_relaxed); }
  // How many times the feedback has halved the window now (0: not at all).
  int halvings() const { return halvings_.load(std::memory_order_relaxed); }

  // The next number of halvings after `pushed` files were pushed and
  // `wasted` came back as READs, from `halvings` now (pure; at most
  // kMaxHalvings).
  static int NextHalvings(int halvings, uint64_t pushed, uint64_t wasted);

  // The window for `available` bytes of available memory (pure).
  static uint64_t WindowFor(uint64_t max_window, uint64_t dataset_bytes, uint64_t available);

  // MemAvailable from /proc/meminfo, in bytes; from sysinfo (free and
  // buffer memory) if that cannot be read; 0 if neither can. Then at most
  // CgroupAvailable's figure for this process.
  static uint64_t ReadMemAvailable();

  // What the memory cgroups of this process leave under their limits, in
  // bytes: for the process's cgroup and each of its ancestors that has a
  // limit, the limit minus the memory charged that is not file cache (the
  // kernel reclaims cache to stay under the limit), the smallest; cgroup v2
  // (memory.max, memory.current, memory.stat) or v1 (memory.limit_in_bytes,
  // memory.usage_in_bytes, memory.stat total_*). UINT64_MAX with no limit
  // or no cgroup to read. `proc_self` is the /proc/self directory and
  // `root` is prefixed to the mount points in its mountinfo (tests point
  // both into a fake tree).
  static uint64_t CgroupAvailable(const std::string& proc_self = "/proc/self",
                                  const std::string& root = "");

 private:
  using Clock = std::chrono::steady_clock;
  void Recheck(int64_t now_ns, bool first);

  const uint64_t max_window_;
  const uint64_t dataset_bytes_;
  const MemAvailable mem_available_;
  const int64_t recheck_ns_;
  std::atomic<uint64_t> window_{0};
  std::atomic<int64_t> checked_ns_{0};           // When window_ was last computed.
  std::atomic<bool> checking_{false};            // A caller is reading memory.
  std::atomic<uint64_t> pushed_{0}, wasted_{0};  // Since the last decision.
  std::atomic<int> halvings_{0};
  std::atomic<int> thinning_{0};           // Reads get a push one in 2^thinning_.
  std::atomic<uint64_t> random_reads_{0};  // ForRead's calls.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_PUSH_BUDGET_H_
