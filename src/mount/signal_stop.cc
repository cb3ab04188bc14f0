#include "src/mount/signal_stop.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <utility>

#include "base/log.h"

namespace shardfs::mount {

Result<SignalStop> SignalStop::Install() {
  SignalStop s;
  if (::pipe2(s.pipe_.data(), O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::FromErrno(errno, "signal pipe");
  }
  wake_fd_.store(s.pipe_[1]);
  struct sigaction sa {};
  sa.sa_handler = &SignalStop::OnSignal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &s.old_[i]);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &s.old_pipe_);
  s.installed_ = true;
  return s;
}

SignalStop::SignalStop(SignalStop&& o) noexcept
    : pipe_(std::exchange(o.pipe_, {-1, -1})),
      old_(o.old_),
      old_pipe_(o.old_pipe_),
      installed_(std::exchange(o.installed_, false)) {}

SignalStop::~SignalStop() {
  LoopEnded();
  if (installed_) {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    wake_fd_.store(-1);
  }
  for (int fd : pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void SignalStop::Watch(std::function<void()> before_exit, std::function<void()> end_loop) {
  loop_thread_ = ::pthread_self();
  watcher_ =
      std::thread([this, before_exit = std::move(before_exit), end_loop = std::move(end_loop)] {
        pollfd p{pipe_[0], POLLIN, 0};
        for (;;) {
          if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
          char b[16];
          while (::read(pipe_[0], b, sizeof b) > 0) {
          }
          if (loop_ended_.load()) return;
          if (p.revents & POLLIN) break;
        }
        log::Info("signal: unmounting");
        before_exit();
        exiting_.store(true);
        end_loop();
        // The loop's thread sleeps until a worker or a signal wakes it; a
        // signal sent just before it went to sleep would be lost, so repeat.
        while (!loop_ended_.load()) {
          ::pthread_kill(loop_thread_, SIGTERM);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
}

void SignalStop::LoopEnded() {
  if (!watcher_.joinable()) return;
  loop_ended_.store(true);
  char b = 0;
  ssize_t n = ::write(pipe_[1], &b, 1);
  (void)n;
  watcher_.join();
}

void SignalStop::OnSignal(int) {
  int saved = errno;
  int fd = wake_fd_.load();
  if (fd >= 0 && !exiting_.load()) {
    char b = 1;
    ssize_t n = ::write(fd, &b, 1);
    (void)n;
  }
  errno = saved;
}

}  // namespace shardfs::mount
