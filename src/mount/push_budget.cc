#include "src/mount/push_budget.h"

#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/fd.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/storage.h"

namespace shardfs::mount {

namespace {

// The whole of a small file (a cgroup or /proc file); "" if it cannot be read.
std::string ReadSmall(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return {};
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) break;  // No cgroup file is this long.
  }
  return text;
}

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::string text = ReadSmall(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return ParseDecimal(text);
}

// The value of `key` in a memory.stat text ("key value" lines); 0 if absent.
uint64_t StatValue(std::string_view stat, std::string_view key) {
  while (!stat.empty()) {
    std::string_view line = stat.substr(0, stat.find('\n'));
    stat.remove_prefix(std::min(line.size() + 1, stat.size()));
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
      return ParseDecimal(line.substr(key.size() + 1)).value_or(0);
    }
  }
  return 0;
}

// What one cgroup directory's limit leaves; UINT64_MAX without a limit.
uint64_t LeftUnderLimit(const std::string& dir, bool v2) {
  constexpr uint64_t kNone = UINT64_MAX;
  uint64_t limit = kNone;
  uint64_t used = 0;
  uint64_t cache = 0;
  if (v2) {
    // "max" parses as no number: no limit. memory.high throttles the
    // cgroup's allocations and reclaims above it, so it counts as a limit.
    for (const char* name : {"/memory.max", "/memory.high"}) {
      if (std::optional<uint64_t> n = ReadNumber(dir + name)) limit = std::min(limit, *n);
    }
    if (limit == kNone) return kNone;
    used = ReadNumber(dir + "/memory.current").value_or(0);
    std::string stat = ReadSmall(dir + "/memory.stat");
    cache = StatValue(stat, "active_file") + StatValue(stat, "inactive_file");
  } else {
    std::optional<uint64_t> n = ReadNumber(dir + "/memory.limit_in_bytes");
    // No limit reads as the largest page-aligned value (9223372036854771712).
    if (!n || *n >= (uint64_t{1} << 62)) return kNone;
    limit = *n;
    used = ReadNumber(dir + "/memory.usage_in_bytes").value_or(0);
    std::string stat = ReadSmall(dir + "/memory.stat");
    cache = StatValue(stat, "total_active_file") + StatValue(stat, "total_inactive_file");
  }
  const uint64_t held = used > cache ? used - cache : 0;
  return limit > held ? limit - held : 0;
}

}  // namespace

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
  return dataset_bytes <= available / 2 ? max_window : 0;
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

bool PushBudget::ForRead() {
  const int thinning = thinning_.load(std::memory_order_relaxed);
  if (thinning == 0) return true;
  const uint64_t n = random_reads_.fetch_add(1, std::memory_order_relaxed);
  return (n & ((uint64_t{1} << thinning) - 1)) == 0;
}

int PushBudget::NextHalvings(int halvings, uint64_t pushed, uint64_t wasted) {
  if (pushed + wasted < kMinOutcomes) return halvings;
  if (wasted >= pushed / 2) return std::min(halvings + 1, kMaxHalvings);
  if (wasted <= pushed / 8) return std::max(halvings - 1, 0);
  return halvings;
}

void PushBudget::Recheck(int64_t now_ns, bool first) {
  const uint64_t available = mem_available_();
  const uint64_t memory_window = WindowFor(max_window_, dataset_bytes_, available);
  const uint64_t pushed = pushed_.load(std::memory_order_relaxed);
  const uint64_t wasted = wasted_.load(std::memory_order_relaxed);
  int halvings = halvings_.load(std::memory_order_relaxed);
  if (pushed + wasted >= kMinOutcomes) {
    // What was counted meanwhile stays for the next decision.
    pushed_.fetch_sub(pushed, std::memory_order_relaxed);
    wasted_.fetch_sub(wasted, std::memory_order_relaxed);
    halvings = NextHalvings(halvings, pushed, wasted);
  }
  // Halvings shrink the window down to kMinWindow, then thin out the reads
  // that get a push. Halvings beyond the last that has an effect are not
  // kept: the first doubling back then has one.
  uint64_t window = memory_window;
  int thinning = 0;
  int effective = 0;
  for (; effective < halvings && window != 0; ++effective) {
    if (window / 2 >= kMinWindow) {
      window = window / 2 / kMinWindow * kMinWindow;
    } else if (thinning < kMaxThinning) {
      ++thinning;
    } else {
      break;
    }
  }
  if (memory_window != 0) halvings = effective;
  halvings_.store(halvings, std::memory_order_relaxed);
  const int thinning_before = thinning_.exchange(thinning, std::memory_order_relaxed);
  const uint64_t before = window_.exchange(window, std::memory_order_relaxed);
  checked_ns_.store(now_ns, std::memory_order_relaxed);
  // Said at mount and when it changes, not at every check.
  if (first || window != before || thinning != thinning_before) {
    log::Debug(
        "push_random=auto: shards {} bytes, {} bytes available, {} of {} pushed files came back "
        "as READs: push_random={}, after one random read in {}",
        dataset_bytes_, available, wasted, pushed, window, uint64_t{1} << thinning);
  }
}

uint64_t PushBudget::ReadMemAvailable() {
  const std::string meminfo = ReadSmall("/proc/meminfo");
  // "MemAvailable:   12345678 kB"
  constexpr std::string_view kKey = "MemAvailable:";
  if (size_t at = meminfo.find(kKey); at != std::string::npos) {
    std::string_view rest = std::string_view(meminfo).substr(at + kKey.size());
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    std::optional<uint64_t> kb = ParseDecimal(rest.substr(0, rest.find(' ')));
    if (kb && *kb < (uint64_t{1} << 53)) return std::min(*kb * 1024, CgroupAvailable());
  }
  uint64_t machine = 0;
  struct sysinfo si;
  if (::sysinfo(&si) == 0) machine = (uint64_t{si.freeram} + si.bufferram) * si.mem_unit;
  return std::min(machine, CgroupAvailable());
}

uint64_t PushBudget::CgroupAvailable(const std::string& proc_self, const std::string& root) {
  // This process's cgroup on the v2 hierarchy ("0::/path") and on a v1
  // hierarchy that has the memory controller ("7:memory:/path").
  std::optional<std::string> path_v2, path_v1;
  const std::string cgroups = ReadSmall(proc_self + "/cgroup");
  for (std::string_view rest = cgroups; !rest.empty();) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(line.size() + 1, rest.size()));
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path(line.substr(c2 + 1));
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      path_v2 = path;
      continue;
    }
    for (std::string_view list = controllers; !list.empty();) {
      std::string_view name = list.substr(0, list.find(','));
      list.remove_prefix(std::min(name.size() + 1, list.size()));
      if (name == "memory") path_v1 = path;
    }
  }
  uint64_t available = UINT64_MAX;
  const std::string mountinfo = ReadSmall(proc_self + "/mountinfo");
  for (std::string_view rest = mountinfo; !rest.empty();) {
    std::string_view text = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(text.size() + 1, rest.size()));
    MountinfoLine m;
    if (!ParseMountinfoLine(text, &m)) continue;
    const bool v2 = m.fstype == "cgroup2";
    bool v1 = false;
    if (m.fstype == "cgroup") {
      for (std::string_view list = m.super_options; !list.empty();) {
        std::string_view name = list.substr(0, list.find(','));
        list.remove_prefix(std::min(name.size() + 1, list.size()));
        if (name == "memory") v1 = true;
      }
    }
    const std::optional<std::string>& path = v2 ? path_v2 : path_v1;
    if ((!v2 && !v1) || !path) continue;
    // The mount shows the hierarchy from `root` down (a container's own
    // cgroup, under a cgroup namespace "/"): the process's cgroup must lie
    // within it.
    const std::string mount_root = UnescapeMountinfo(m.root);
    std::string rel;
    if (mount_root == "/") {
      rel = *path;
    } else if (*path == mount_root || path->starts_with(mount_root + "/")) {
      rel = path->substr(mount_root.size());
    } else {
      continue;
    }
    const std::string top = root + UnescapeMountinfo(m.mountpoint);
    // From the process's cgroup up to the mount's top, each level's limit.
    for (std::string dir = rel;;) {
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      available = std::min(available, LeftUnderLimit(top + (dir == "/" ? "" : dir), v2));
      if (dir.empty() || dir == "/") break;
      const size_t slash = dir.rfind('/');
      dir = slash == std::string::npos || slash == 0 ? "/" : dir.substr(0, slash);
    }
  }
  return available;
}

}  // namespace shardfs::mount
