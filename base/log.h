// Logging on fmt. The level is checked before anything is formatted.
// Messages go to stderr in the foreground and to syslog once the process
// has daemonised (UseSyslog), or to the sink the embedding program set
// (SetSink: the Python package's, which hands them to Python's logging).
// Thread-safe: each message is one write, or one call of the sink.
#ifndef SHARDFS_BASE_LOG_H_
#define SHARDFS_BASE_LOG_H_

#include <fmt/format.h>

#include <atomic>
#include <string_view>

namespace shardfs::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kQuiet = 4 };

extern std::atomic<Level> g_level;

// What a message is about, for a sink that keeps these apart from the text
// (the Python package gives them to its logging records as attributes). Any
// may be empty; the message names them too.
struct Fields {
  std::string_view shard;   // The shard's name or redacted location.
  std::string_view path;    // The file's path in the index.
  std::string_view reason;  // Why: the failure's own message.
};

// Called for every message at or above the level, from whichever thread
// logged it, possibly holding the caller's locks: a sink must not block for
// long or call back into the library.
using Sink = void (*)(Level level, std::string_view message, const Fields& fields);

void SetLevel(Level level);
// From now on, messages go to `sink` instead of stderr or syslog (nullptr:
// back to them). Set once, before threads log.
void SetSink(Sink sink);
// From now on, messages go to syslog with this ident instead of stderr.
void UseSyslog(const char* ident);
// Writes one line. Use the macros-free helpers below instead.
void Write(Level level, std::string_view message, const Fields& fields = {});

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

// As Warning and Error, with what the message is about.
template <typename... Args>
void WarningAbout(const Fields& about, fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kWarning)) {
    Write(Level::kWarning, fmt::format(f, std::forward<Args>(args)...), about);
  }
}
template <typename... Args>
void ErrorAbout(const Fields& about, fmt::format_string<Args...> f, Args&&... args) {
  if (Enabled(Level::kError)) {
    Write(Level::kError, fmt::format(f, std::forward<Args>(args)...), about);
  }
}

}  // namespace shardfs::log

#endif  // SHARDFS_BASE_LOG_H_
