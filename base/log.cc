#include "base/log.h"

#include <syslog.h>
#include <unistd.h>

#include <string>

namespace shardfs::log {

std::atomic<Level> g_level{Level::kInfo};
namespace {
std::atomic<bool> g_syslog{false};
std::atomic<Sink> g_sink{nullptr};

const char* Prefix(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug: ";
    case Level::kInfo:
      return "";
    case Level::kWarning:
      return "warning: ";
    default:
      return "error: ";
  }
}

int SyslogPriority(Level level) {
  switch (level) {
    case Level::kDebug:
      return LOG_DEBUG;
    case Level::kInfo:
      return LOG_INFO;
    case Level::kWarning:
      return LOG_WARNING;
    default:
      return LOG_ERR;
  }
}
}  // namespace

void SetLevel(Level level) { g_level.store(level, std::memory_order_relaxed); }

void UseSyslog(const char* ident) {
  openlog(ident, LOG_PID, LOG_DAEMON);
  g_syslog.store(true);
}

void SetSink(Sink sink) { g_sink.store(sink); }

void Write(Level level, std::string_view message, const Fields& fields) {
  if (Sink sink = g_sink.load(std::memory_order_acquire)) {
    sink(level, message, fields);
    return;
  }
  if (g_syslog.load(std::memory_order_relaxed)) {
    syslog(SyslogPriority(level), "%.*s", static_cast<int>(message.size()), message.data());
    return;
  }
  std::string line = fmt::format("shardfs: {}{}\n", Prefix(level), message);
  // One write per line keeps lines from different threads whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace shardfs::log
