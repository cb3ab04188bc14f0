// Logging on fmt. The level is checked before anything is formatted.
// Messages go to stderr in the foreground and to syslog once the process
// has daemonised (UseSyslog). Thread-safe: each message is one write.
#ifndef SHARDFS_BASE_LOG_H_
#define SHARDFS_BASE_LOG_H_

#include <fmt/format.h>

#include <atomic>
#include <string_view>

namespace shardfs::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kQuiet = 4 };

extern std::atomic<Level> g_level;

void SetLevel(Level level);
// From now on, messages go to syslog with this ident instead of stderr.
void UseSyslog(const char* ident);
// Writes one line. Use the macros-free helpers below instead.
void Write(Level level, std::string_view message);

inline bool Enabled(Level level) { return level >= g_level.load(std::memory_order_relaxed); }

template <typename... Args>
void Debug(fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kInfo)) Write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warning(fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kWarning)) {
    Write(Level::kWarning, fmt::format(f, std::forward<Args>(args)...));
  }
}
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kError)) Write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace shardfs::log

#endif  // SHARDFS_BASE_LOG_H_
