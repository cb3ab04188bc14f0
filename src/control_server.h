// The daemon's control socket: how `shardfs stats`, `shardfs cache warm` and
// `shardfs cache drop` reach a running mount.
//
// The socket is a Unix socket in the abstract namespace named after the
// mount's device number, "shardfs-ctl-MAJOR:MINOR" (ControlSocketName). The
// daemon reads its device from /proc/self/mountinfo once mounted, and a
// client from stat(2) of the mountpoint, so neither needs a file anywhere and
// nothing is left behind by a daemon that was killed. Only the daemon's own
// user and root may talk to it (SO_PEERCRED).
//
// Protocol: the client sends one request, its words separated by NUL bytes,
// and shuts down its sending side; the daemon answers "ok\n" or "error\n"
// followed by the body (text or JSON) and closes. Requests:
//   stats [json] [shards]     counters (src/shard_fetcher.h)
//   warm PATH...              fetch the files under each path into the cache
//   drop                      empty the cache
//
// Thread safety: Start and Stop from one thread; each connection is served
// on a thread of its own, joined by Stop.
#ifndef SHARDFS_SRC_CONTROL_SERVER_H_
#define SHARDFS_SRC_CONTROL_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "src/filesystem.h"
#include "src/shard_fetcher.h"

namespace shardfs::mount {

// "shardfs-ctl-MAJOR:MINOR" for the device of a mount.
std::string ControlSocketName(dev_t dev);

// Sends `words` to the daemon of the mount at `mountpoint` and returns its
// answer's body. InvalidArgument if the mountpoint is no shardfs mount (no
// socket for its device), IoError with the daemon's message if it said
// "error".
Result<std::string> ControlRequest(const std::string& mountpoint,
                                   const std::vector<std::string>& words);

class ControlServer {
 public:
  // `fetcher` may be null (a mount of local shards without cache_dir).
  ControlServer(Filesystem* fs, ShardFetcher* fetcher, std::string mountpoint);
  ~ControlServer();  // Stop().
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Finds the mount's device, binds the socket and starts accepting.
  // REQUIRES: the mount is in place.
  Status Start();
  void Stop();

  // The answer to one request (exposed for tests).
  Status Handle(const std::vector<std::string>& words, std::string* body);

 private:
  void Accept();
  void Serve(int fd);
  std::string StatsText(const FetcherStats& s) const;
  std::string StatsJson(const FetcherStats& s, bool shards) const;
  Status Warm(const std::vector<std::string>& paths, std::string* body);

  Filesystem* const fs_;
  ShardFetcher* const fetcher_;
  const std::string mountpoint_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> conns_;  // Guarded by mu_.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_CONTROL_SERVER_H_
