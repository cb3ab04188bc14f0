// A progress display for long jobs (index build, pack, verify): a bar redrawn
// in place on a terminal, a plain log line every few seconds otherwise,
// nothing with --quiet.
//
// Thread-safe: Add and UnitDone may be called from any thread; counters are
// atomics and one background thread draws.
#ifndef SHARDFS_BASE_PROGRESS_H_
#define SHARDFS_BASE_PROGRESS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace shardfs {

class Progress {
 public:
  // `what` names the job ("index build"), `units` the things counted whole
  // ("shards") out of `total_units`; `total_bytes` drives the ETA.
  Progress(std::string what, std::string units, uint64_t total_units, uint64_t total_bytes,
           bool quiet);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(uint64_t entries, uint64_t bytes) {
    entries_.fetch_add(entries, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void UnitDone() { units_.fetch_add(1, std::memory_order_relaxed); }
  // Stops drawing and clears the bar. Idempotent.
  void Stop();
  double Seconds() const;

 private:
  void Run();
  std::string Line(bool final) const;

  const std::string what_;
  const std::string unit_name_;
  const uint64_t total_units_;
  const uint64_t total_bytes_;
  const bool tty_;
  const bool quiet_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> entries_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> units_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // Guarded by mu_.
  std::thread thread_;
};

// "12.3 MiB", "1.0 GiB".
std::string HumanBytes(double bytes);

}  // namespace shardfs

#endif  // SHARDFS_BASE_PROGRESS_H_
