#include "base/temp_dirs.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>  // sigabbrev_np
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/log.h"

namespace shardfs {
namespace {

constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};

// The handler's view: the pipe to write to, and the process that installed
// it (a fork()ed child has no cleanup thread).
std::atomic<int> g_wake_fd{-1};
std::atomic<pid_t> g_owner{0};

// The registered directories. The cleanup thread takes `mu` and never gives
// it back: the process ends with it held.
struct Registry {
  std::mutex mu;
  bool installed = false;         // Guarded by mu.
  std::vector<std::string> dirs;  // Guarded by mu.
};

Registry& TheRegistry() {
  // Never destroyed: the cleanup thread may run while exit() destroys statics.
  static Registry* registry = new Registry;
  return *registry;
}

void OnSignal(int sig) {
  const int saved = errno;
  if (::getpid() != g_owner.load()) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // Delivered once the handler returns.
  } else if (const int fd = g_wake_fd.load(); fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(sig);
    ssize_t unused = ::write(fd, &b, 1);
    (void)unused;
  }
  errno = saved;
}

// Removes the entries of `dir`, then `dir`; a subdirectory is not removed
// (and `dir` stays then). Tries again while entries appear: the process's
// other threads may still be writing into it.
bool RemoveFlat(const std::string& dir) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno == ENOENT;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") ::unlinkat(::dirfd(d), e->d_name, 0);
    }
    ::closedir(d);
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != ENOTEMPTY && errno != EEXIST) return false;
  }
  return false;
}

void RestoreDefault(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
}

// The cleanup thread: waits for a signal's byte, removes the registered
// directories, then ends the process by that signal.
void CleanUpOnSignal(int read_fd) {
  unsigned char b = 0;
  for (;;) {
    const ssize_t n = ::read(read_fd, &b, 1);
    if (n == 1) break;
    if (n < 0 && errno == EINTR) continue;
    for (int sig : kSignals) RestoreDefault(sig);  // Cannot wait: signals act as by default.
    return;
  }
  const int sig = b;
  const char* name = ::sigabbrev_np(sig);
  Registry& r = TheRegistry();
  r.mu.lock();  // For good: no directory is made or forgotten any more.
  for (const std::string& dir : r.dirs) {
    if (RemoveFlat(dir)) {
      log::Info("{}: removed (SIG{})", dir, name ? name : "?");
    } else {
      log::Warning("{}: SIG{}: cannot remove it whole; left", dir, name ? name : "?");
    }
  }
  RestoreDefault(sig);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // Not reached: the default action of these signals ends the process.
}

// Installs the handlers and starts the cleanup thread. REQUIRES: r.mu held.
void Install(Registry* r) {
  r->installed = true;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    log::Warning("temporary directories: no pipe for signals ({}): a signal leaves them",
                 std::strerror(errno));
    return;
  }
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  g_owner.store(::getpid());
  g_wake_fd.store(fds[1]);
  std::thread(CleanUpOnSignal, fds[0]).detach();
  for (int sig : kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = &OnSignal;
    sigemptyset(&sa.sa_mask);
    for (int s : kSignals) sigaddset(&sa.sa_mask, s);
    sa.sa_flags = SA_RESTART;  // The other threads' system calls go on undisturbed.
    ::sigaction(sig, &sa, nullptr);
  }
}

bool AllOf(std::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return !s.empty();
}

}  // namespace

const std::string& TempHostName() {
  static const std::string host = [] {
    char buf[HOST_NAME_MAX + 1] = {};
    std::string h;
    if (::gethostname(buf, sizeof buf - 1) == 0) h = buf;
    for (char& c : h) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
      if (!ok) c = '_';
    }
    return h.empty() ? std::string("unknown-host") : h;
  }();
  return host;
}

std::string TempPathBeside(std::string_view out) {
  std::random_device rd;
  return fmt::format("{}.tmp-{}-{}-{:08x}", out, TempHostName(), ::getpid(), rd());
}

std::optional<TempDirMaker> ParseTempDirName(std::string_view name, std::string_view out_name) {
  if (!name.starts_with(out_name) || !name.substr(out_name.size()).starts_with(".tmp-")) {
    return std::nullopt;
  }
  std::string_view rest = name.substr(out_name.size() + 5);  // HOST-PID-RANDOM
  const size_t random_at = rest.rfind('-');
  if (random_at == std::string_view::npos) return std::nullopt;
  const std::string_view random = rest.substr(random_at + 1);
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  if (random.size() != 8 || !AllOf(random, +hex)) return std::nullopt;
  rest = rest.substr(0, random_at);
  const size_t pid_at = rest.rfind('-');
  if (pid_at == std::string_view::npos || pid_at == 0) return std::nullopt;
  const std::string_view pid = rest.substr(pid_at + 1);
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (pid.size() > 9 || !AllOf(pid, +digit)) return std::nullopt;
  TempDirMaker maker;
  maker.host = std::string(rest.substr(0, pid_at));
  for (char c : pid) maker.pid = maker.pid * 10 + (c - '0');
  if (maker.pid <= 0) return std::nullopt;
  return maker;
}

bool ProcessGone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

Status MakeTempDir(const std::string& path, mode_t mode) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.installed) Install(&r);
  if (::mkdir(path.c_str(), mode) != 0) {
    return Status::IoError(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  }
  r.dirs.push_back(path);
  return Status::Ok();
}

void ForgetTempDir(const std::string& path) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.dirs.begin(); it != r.dirs.end(); ++it) {
    if (*it == path) {
      r.dirs.erase(it);
      return;
    }
  }
}

void AwaitSignalCleanup() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);  // Held for good once a cleanup began.
}

}  // namespace shardfs
