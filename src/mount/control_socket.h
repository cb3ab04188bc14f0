// Where a mount's control socket lives, and who may be on either end of it.
//
// The socket is a file, "ctl-MAJOR:MINOR" after the mount's device number, in
// a directory that only the mount's owner (and root) can write:
//
//   owner root      /run/shardfs
//   another owner   /run/user/UID/shardfs  if logind made /run/user/UID (the
//                                          usual $XDG_RUNTIME_DIR) for UID,
//                   /tmp/shardfs-UID       otherwise (tmux's scheme)
//
// The directory is a function of the uid, not of the environment: a client
// run by root (sudo, another $XDG_RUNTIME_DIR) finds the socket of a user's
// mount. The daemon creates the directory 0700; daemon and client open it
// with O_NOFOLLOW and refuse it unless the mount's owner owns it and no one
// else may enter it (a directory another user made first, in /tmp, makes the
// mount fail with a message rather than serve through it). The client looks
// in both candidates of a non-root owner, since /run/user/UID comes and goes
// with the owner's sessions.
//
// Why not the abstract namespace: it has no permissions, so any user can bind
// a predictable name first (the device number is); and why not a random name:
// the client would have to learn it from a file in the same directory anyway.
//
// Before sending a byte the client checks the listener's SO_PEERCRED: its uid
// must be the mount's owner (the user_id= of the mount in
// /proc/self/mountinfo) or root. Connect, send and receive have timeouts.
#ifndef SHARDFS_SRC_MOUNT_CONTROL_SOCKET_H_
#define SHARDFS_SRC_MOUNT_CONTROL_SOCKET_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/status.h"

namespace shardfs::mount {

// A mount as /proc/self/mountinfo has it.
struct MountEntry {
  dev_t dev = 0;
  std::string fstype;  // "fuse.shardfs" for a shardfs mount.
  std::string source;  // What was mounted (the index; a kernel mount's image).
  uid_t owner = 0;     // user_id= of a FUSE mount; 0 when absent.
};

// The mount `path` is on: by stat(2)'s device; when stat is refused (another
// user's mount without allow_other, a daemon gone) by the mount point `path`
// itself. NotFound if neither finds it.
Result<MountEntry> FindMount(const std::string& path);

// The mount whose mount point is `mountpoint` (absolute and normal); the last
// one, as a later mount over the same path hides earlier ones.
Result<MountEntry> FindMountAt(const std::string& mountpoint);

// `path` (absolute and normal) with symbolic links in its parent resolved,
// as /proc/self/mountinfo shows mount points; the last component is not
// looked at, so this does not wait for the mount's daemon.
std::string CanonicalMountpoint(const std::string& path);

// "ctl-MAJOR:MINOR".
std::string ControlSocketName(dev_t dev);

// The directories a client looks in for the sockets of mounts owned by
// `owner`, in order.
std::vector<std::string> ControlDirs(uid_t owner);

// The one of them the daemon of a mount owned by `owner` uses now.
std::string DaemonControlDir(uid_t owner);

// Opens `dir` (O_NOFOLLOW) after creating it 0700 if `create`, and checks it:
// a directory owned by `owner` with no access for group or others. IoError
// naming the directory and what is wrong with it otherwise; NotFound if it
// does not exist and `create` is false.
Result<UniqueFd> OpenControlDir(const std::string& dir, uid_t owner, bool create);

// OK if the peer of the connected Unix socket `fd` runs as `owner` or root;
// IoError naming the peer's uid and pid otherwise.
Status CheckControlPeer(int fd, uid_t owner, const std::string& what);

// Connects to the listener at `path` within `timeout_ms` (a listener that
// never accepts times out) and checks it with CheckControlPeer before
// returning. NotFound if nothing listens there (no file, or a socket left by
// a daemon that is gone). Messages call the socket `what`.
Result<UniqueFd> ConnectControlSocket(const std::string& path, const std::string& what, uid_t owner,
                                      int timeout_ms);

// The control socket of the mount `mountpoint` is on, connected and checked
// as above. InvalidArgument if it is no shardfs mount or no daemon listens
// for it; IoError if its directory or listener is not the owner's.
Result<UniqueFd> ConnectControl(const std::string& mountpoint, int timeout_ms);

// Sends a request of `words` (NUL-terminated) on a connected socket, with a
// send timeout of `send_timeout_ms`, and returns the whole answer; waits at
// most `reply_timeout_ms` between bytes of the answer (0: no limit).
Result<std::string> ControlExchange(int fd, const std::vector<std::string>& words,
                                    int send_timeout_ms, int reply_timeout_ms);

// Reads until EOF (at most kMaxControlMessage bytes); a socket timeout is an
// IoError with the message kControlReadTimedOut (kControlWriteTimedOut).
inline constexpr size_t kMaxControlMessage = 64 << 20;
inline constexpr std::string_view kControlReadTimedOut = "control socket: timed out reading";
inline constexpr std::string_view kControlWriteTimedOut = "control socket: timed out writing";
Status ControlReadAll(int fd, std::string* out);
Status ControlWriteAll(int fd, std::string_view data);

// Sets SO_SNDTIMEO and SO_RCVTIMEO (0 ms: none).
void SetSocketTimeouts(int fd, int send_ms, int receive_ms);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_CONTROL_SOCKET_H_
