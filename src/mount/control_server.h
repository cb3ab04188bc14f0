// The daemon's control socket: how `shardfs stats`, `shardfs cache warm` and
// `shardfs cache drop` reach a running mount.
//
// The socket is a file named after the mount's device in a directory only the
// mount's owner and root can write (src/mount/control_socket.h). Both ends check
// the other's SO_PEERCRED: only the mount's owner and root may ask (stats show
// where the shards are; warm and drop change what the mount holds), and a
// client talks to nothing but a daemon of the owner or root.
//
// Protocol: the client sends one request, its words separated by NUL bytes,
// and shuts down its sending side; the daemon answers "ok\n" or "error\n"
// followed by the body (text or JSON) and closes. Requests:
//   stats [json] [shards]     counters (src/reader/shard_fetcher.h)
//   warm PATH...              fetch the files under each path into the cache
//   drop                      empty the cache
//
// Each connection is served on a thread of its own, joined as soon as it is
// done; at most kMaxConnections at once (more are answered "error\n...busy"
// and closed), a request must arrive within kRequestTimeoutMs and each send of
// the answer complete within kSendTimeoutMs. Stop shuts every connection
// down, so it waits for none longer than its request takes to handle (a warm
// ends with the fetcher, which is stopped first).
//
// Thread safety: Start and Stop from one thread.
#ifndef SHARDFS_SRC_MOUNT_CONTROL_SERVER_H_
#define SHARDFS_SRC_MOUNT_CONTROL_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "src/reader/filesystem.h"
#include "src/reader/shard_fetcher.h"

namespace shardfs::mount {

using reader::FetcherStats;
using reader::Filesystem;
using reader::ShardFetcher;

// How long a client waits to connect and to send its request.
inline constexpr int kControlConnectTimeoutMs = 10'000;
// How long `stats` and `drop` wait for the answer (`warm` waits as long as
// the daemon fetches).
inline constexpr int kControlReplyTimeoutMs = 60'000;

// Sends `words` to the daemon of the mount at `mountpoint` and returns its
// answer's body, waiting at most `reply_timeout_ms` (0: no limit) between
// bytes of it. InvalidArgument if the mountpoint is no shardfs mount (no
// socket for its device), IoError with the daemon's message if it said
// "error", or if the socket or its listener is not the mount owner's, or on a
// timeout.
Result<std::string> ControlRequest(const std::string& mountpoint,
                                   const std::vector<std::string>& words, int reply_timeout_ms);

class ControlServer {
 public:
  // `fetcher` may be null (a mount of local shards without cache_dir).
  ControlServer(Filesystem* fs, ShardFetcher* fetcher, std::string mountpoint);
  ~ControlServer();  // Stop().
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  static constexpr size_t kMaxConnections = 16;
  static constexpr int kRequestTimeoutMs = 10'000;
  static constexpr int kSendTimeoutMs = 10'000;

  // Finds the mount's device and owner, binds the socket (replacing one left
  // by a daemon that was killed) and starts accepting. IoError naming the
  // directory or socket if it cannot: the mount must then not go on without
  // its socket, since another user may hold the name.
  // REQUIRES: the mount is in place.
  Status Start();
  // Stops accepting, shuts down and joins the connections, removes the socket.
  void Stop();

  // The answer to one request (exposed for tests).
  Status Handle(const std::vector<std::string>& words, std::string* body);

 private:
  struct Connection {
    std::thread thread;
    int fd = -1;  // Closed by its thread, under mu_, when done.
    bool done = false;
  };

  void Accept();
  // Answers "error\n`why`" and closes `fd`, on the accepting thread.
  static void Refuse(int fd, std::string_view why);
  void Serve(Connection* c);
  // Joins the connections that are done.
  void Reap();
  void Wake();
  std::string StatsText(const FetcherStats& s) const;
  // What the kernel asked the daemon, by kind (reader::KernelRequests).
  std::string KernelRequestsText() const;
  // The decoded cache's and compressed reads' lines ("" before any).
  std::string DecodedText() const;
  std::string StatsJson(const FetcherStats& s, bool shards) const;
  Status Warm(const std::vector<std::string>& paths, std::string* body);

  Filesystem* const fs_;
  ShardFetcher* const fetcher_;
  const std::string mountpoint_;
  uid_t owner_ = 0;       // The mount's owner: with root, who may ask.
  UniqueFd dir_fd_;       // The control directory.
  std::string name_;      // The socket's name in it.
  ino_t socket_ino_ = 0;  // Ours, to remove it only if still ours.
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // An eventfd: a connection done, or Stop.
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::list<Connection> conns_;  // Guarded by mu_.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_CONTROL_SERVER_H_
