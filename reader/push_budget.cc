#include "reader/push_budget.h"

#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string_view>
#include <utility>

#include "base/fd.h"
#include "base/log.h"
#include "base/parse.h"

namespace shardfs::reader {

PushBudget::PushBudget(uint64_t max_window, uint64_t dataset_bytes, MemAvailable mem_available,
                       std::chrono::milliseconds recheck)
    : max_window_(max_window),
      dataset_bytes_(dataset_bytes),
      mem_available_(mem_available ? std::move(mem_available) : MemAvailable(ReadMemAvailable)),
      recheck_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(recheck).count()) {
  Recheck(Clock::now().time_since_epoch().count(), /*first=*/true);
}

uint64_t PushBudget::WindowFor(uint64_t max_window, uint64_t dataset_bytes, uint64_t available) {
  if (available < kMinAvailable) return 0;
  const uint64_t usable = available / 2;
  if (dataset_bytes <= usable) return max_window;
  // max_window * usable / dataset_bytes, without overflow: usable <
  // dataset_bytes, so the fraction is below 1.
  const double part = static_cast<double>(usable) / static_cast<double>(dataset_bytes);
  const uint64_t window = static_cast<uint64_t>(static_cast<double>(max_window) * part);
  return window < kMinWindow ? 0 : window / kMinWindow * kMinWindow;
}

uint64_t PushBudget::Window() {
  const int64_t now = Clock::now().time_since_epoch().count();
  if (now - checked_ns_.load(std::memory_order_relaxed) >= recheck_ns_ &&
      !checking_.exchange(true, std::memory_order_acquire)) {
    Recheck(now, /*first=*/false);
    checking_.store(false, std::memory_order_release);
  }
  return window_.load(std::memory_order_relaxed);
}

void PushBudget::Recheck(int64_t now_ns, bool first) {
  const uint64_t available = mem_available_();
  const uint64_t window = WindowFor(max_window_, dataset_bytes_, available);
  const uint64_t before = window_.exchange(window, std::memory_order_relaxed);
  checked_ns_.store(now_ns, std::memory_order_relaxed);
  // Said at mount and when it changes, not at every check.
  if (first || window != before) {
    log::Debug("push_random=auto: shards {} bytes, {} bytes available: push_random={}",
               dataset_bytes_, available, window);
  }
}

uint64_t PushBudget::ReadMemAvailable() {
  UniqueFd fd(::open("/proc/meminfo", O_RDONLY | O_CLOEXEC));
  if (fd.valid()) {
    char buf[4096];
    ssize_t n;
    do {
      n = ::read(fd.get(), buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    std::string_view text(buf, n > 0 ? static_cast<size_t>(n) : 0);
    // "MemAvailable:   12345678 kB"
    constexpr std::string_view kKey = "MemAvailable:";
    if (size_t at = text.find(kKey); at != std::string_view::npos) {
      std::string_view rest = text.substr(at + kKey.size());
      rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
      std::optional<uint64_t> kb = ParseDecimal(rest.substr(0, rest.find(' ')));
      if (kb && *kb < (uint64_t{1} << 53)) return *kb * 1024;
    }
  }
  struct sysinfo si;
  if (::sysinfo(&si) != 0) return 0;
  return (uint64_t{si.freeram} + si.bufferram) * si.mem_unit;
}

}  // namespace shardfs::reader
