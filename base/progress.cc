#include "base/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include "base/log.h"

namespace shardfs {

std::string HumanBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[u]);
}

Progress::Progress(std::string what, std::string units, uint64_t total_units, uint64_t total_bytes,
                   bool quiet)
    : what_(std::move(what)),
      unit_name_(std::move(units)),
      total_units_(total_units),
      total_bytes_(total_bytes),
      tty_(::isatty(STDERR_FILENO) == 1),
      quiet_(quiet),
      start_(std::chrono::steady_clock::now()) {
  if (!quiet_) thread_ = std::thread([this] { Run(); });
}

Progress::~Progress() { Stop(); }

double Progress::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (tty_ && !quiet_) {
    std::string clear = "\r\033[K";
    ssize_t unused = ::write(STDERR_FILENO, clear.data(), clear.size());
    (void)unused;
  }
}

std::string Progress::Line(bool final) const {
  double secs = Seconds();
  uint64_t entries = entries_.load(std::memory_order_relaxed);
  uint64_t bytes = bytes_.load(std::memory_order_relaxed);
  uint64_t units = units_.load(std::memory_order_relaxed);
  double rate = secs > 0 ? entries / secs : 0;
  double byte_rate = secs > 0 ? bytes / secs : 0;
  std::string eta = "?";
  if (byte_rate > 0 && total_bytes_ >= bytes) {
    eta = fmt::format("{:.0f}s", (total_bytes_ - bytes) / byte_rate);
  }
  std::string bar;
  if (tty_ && !final) {
    constexpr int kWidth = 24;
    double frac = total_bytes_ ? std::min(1.0, static_cast<double>(bytes) / total_bytes_) : 0;
    int fill = static_cast<int>(frac * kWidth);
    bar = "[" + std::string(fill, '#') + std::string(kWidth - fill, '.') + "] ";
  }
  return fmt::format("{}: {}{} entries, {} of {}, {}/{} {}, {:.0f} entries/s, {}/s, ETA {}", what_,
                     bar, entries, HumanBytes(bytes), HumanBytes(total_bytes_), units, total_units_,
                     unit_name_, rate, HumanBytes(byte_rate), eta);
}

void Progress::Run() {
  const auto period = tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(5);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    if (tty_) {
      std::string line = "\r\033[K" + Line(false);
      ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
      (void)unused;
    } else {
      log::Info("{}", Line(false));
    }
  }
}

}  // namespace shardfs
