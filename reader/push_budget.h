// PushBudget: how many bytes a push after a random read (push_random=auto)
// may store, from the memory the machine has available now.
//
// A shuffled reader's pushes pay off only if the pushed files stay in the
// page cache until the reader gets to them, some time later in the epoch.
// While the reader goes through the dataset, the page cache holds up to the
// whole of it twice: the pushed files in the mount's cache and the shard
// pages they were read from. So the window follows how much of the dataset
// half of the available memory (MemAvailable in /proc/meminfo: free memory
// plus what the kernel can reclaim without swapping) can hold:
//  - the whole dataset fits: the full window (`max_window`);
//  - a part of it fits: that part of the window (a dataset twice as large
//    as that half gets half the window), so fewer pushed files are evicted
//    unread, and the pushes still give each read its closest neighbours;
//  - less than kMinWindow, or less than kMinAvailable available: 0, no push.
// Available memory is read again at most every `recheck`, so a program
// that grows (or a cache that another program fills) shrinks the window
// while the mount runs, and a window that was 0 comes back once memory is
// available again.
//
// Thread safety: Window() may be called from any thread; the last reading
// and its time are atomics, and at most one caller reads /proc/meminfo at a
// time (the others use the last reading).
#ifndef SHARDFS_READER_PUSH_BUDGET_H_
#define SHARDFS_READER_PUSH_BUDGET_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace shardfs::reader {

class PushBudget {
 public:
  // Bytes available now; 0 when it cannot be told.
  using MemAvailable = std::function<uint64_t()>;

  static constexpr std::chrono::milliseconds kRecheck{1000};
  // Below this the window is 0: too little to push a useful run of files.
  static constexpr uint64_t kMinWindow = 64 << 10;
  // Below this much available memory nothing is pushed at all.
  static constexpr uint64_t kMinAvailable = 256ull << 20;

  // `dataset_bytes`: the shards' size together. `mem_available` null: the
  // machine's (ReadMemAvailable).
  PushBudget(uint64_t max_window, uint64_t dataset_bytes, MemAvailable mem_available = nullptr,
             std::chrono::milliseconds recheck = kRecheck);

  // The push window after a random read now, 0..max_window.
  uint64_t Window();

  // The window for `available` bytes of available memory (pure).
  static uint64_t WindowFor(uint64_t max_window, uint64_t dataset_bytes, uint64_t available);

  // MemAvailable from /proc/meminfo, in bytes; from sysinfo (free and
  // buffer memory) if that cannot be read; 0 if neither can.
  static uint64_t ReadMemAvailable();

 private:
  using Clock = std::chrono::steady_clock;
  void Recheck(int64_t now_ns, bool first);

  const uint64_t max_window_;
  const uint64_t dataset_bytes_;
  const MemAvailable mem_available_;
  const int64_t recheck_ns_;
  std::atomic<uint64_t> window_{0};
  std::atomic<int64_t> checked_ns_{0};  // When window_ was last computed.
  std::atomic<bool> checking_{false};   // A caller is reading memory.
};

}  // namespace shardfs::reader

#endif  // SHARDFS_READER_PUSH_BUDGET_H_
