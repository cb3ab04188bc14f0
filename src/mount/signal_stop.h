// Clean shutdown on SIGINT, SIGTERM and SIGHUP, in an order that cannot
// hang: a pusher may be waiting for a page lock that only the answer to a
// queued READ releases, so the pushers are stopped first, while the workers
// still serve, and only then is the session loop ended. (libfuse's own
// handlers end the loop at once.) The handler only writes to a pipe; a
// watcher thread does the rest. No FUSE types: the caller says how to end
// its loop.
//
// One SignalStop at a time per process: the handler reaches it through a
// static descriptor. Install, Watch and LoopEnded are called from the
// thread that runs the loop.
#ifndef SHARDFS_SRC_MOUNT_SIGNAL_STOP_H_
#define SHARDFS_SRC_MOUNT_SIGNAL_STOP_H_

#include <pthread.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <functional>
#include <thread>

#include "base/status.h"

namespace shardfs::mount {

class SignalStop {
 public:
  // Installs the handlers (and ignores SIGPIPE) until destruction, which
  // restores the previous ones. IoError if the pipe cannot be made.
  static Result<SignalStop> Install();
  SignalStop(SignalStop&& o) noexcept;
  SignalStop& operator=(SignalStop&&) = delete;
  ~SignalStop();  // LoopEnded(), then restores the handlers.

  // Starts watching: on a signal, runs `before_exit`, then `end_loop`, and
  // wakes the calling thread (which is about to run the loop) with SIGTERM
  // until LoopEnded() is called.
  void Watch(std::function<void()> before_exit, std::function<void()> end_loop);

  // The loop returned: the watcher ends.
  void LoopEnded();

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  SignalStop() = default;
  static void OnSignal(int);

  static inline std::atomic<int> wake_fd_{-1};
  static inline std::atomic<bool> exiting_{false};
  std::array<int, 2> pipe_ = {-1, -1};
  std::array<struct sigaction, 3> old_{};
  struct sigaction old_pipe_ {};
  bool installed_ = false;
  pthread_t loop_thread_{};
  std::atomic<bool> loop_ended_{false};
  std::thread watcher_;
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_SIGNAL_STOP_H_
