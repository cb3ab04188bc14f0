#include "src/mount/control_socket.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "base/storage.h"

namespace shardfs::mount {

namespace {

bool TimedOut(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT; }

// The last line of /proc/self/mountinfo that `match(entry, mountpoint)`
// accepts.
template <typename Match>
Result<MountEntry> ScanMountInfo(Match match) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return Status::IoError("cannot read /proc/self/mountinfo");
  std::string line;
  bool found = false;
  MountEntry last;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, devs, root, point, word;
    if (!(f >> id >> parent >> devs >> root >> point)) continue;
    unsigned major_n = 0, minor_n = 0;
    if (std::sscanf(devs.c_str(), "%u:%u", &major_n, &minor_n) != 2) continue;
    MountEntry e;
    e.dev = makedev(major_n, minor_n);
    // Optional fields up to "-", then the type, the source, the super options.
    while (f >> word && word != "-") {
    }
    std::string source, super_options;
    f >> e.fstype >> source >> super_options;
    e.source = UnescapeMountinfo(source);
    std::istringstream opts(super_options);
    for (std::string opt; std::getline(opts, opt, ',');) {
      if (opt.starts_with("user_id=")) e.owner = static_cast<uid_t>(std::stoul(opt.substr(8)));
    }
    if (match(e, UnescapeMountinfo(point))) {
      last = std::move(e);
      found = true;
    }
  }
  if (!found) return Status::NotFound("not in /proc/self/mountinfo");
  return last;
}

}  // namespace

std::string CanonicalMountpoint(const std::string& path) {
  std::filesystem::path p(path);
  char* parent = ::realpath(p.parent_path().c_str(), nullptr);
  if (parent == nullptr) return path;
  std::string out = (std::filesystem::path(parent) / p.filename()).string();
  ::free(parent);
  return out;
}

Result<MountEntry> FindMountAt(const std::string& mountpoint) {
  Result<MountEntry> e =
      ScanMountInfo([&](const MountEntry&, const std::string& p) { return p == mountpoint; });
  if (!e.ok()) return e.status().WithContext(mountpoint);
  return e;
}

Result<MountEntry> FindMount(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    Result<MountEntry> e =
        ScanMountInfo([&](const MountEntry& m, const std::string&) { return m.dev == st.st_dev; });
    if (!e.ok()) return e.status().WithContext(path);
    return e;
  }
  const int err = errno;
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  Result<MountEntry> e =
      ec ? Result<MountEntry>(Status::NotFound(path)) : FindMountAt(CanonicalMountpoint(abs));
  if (!e.ok()) return Status::FromErrno(err, path);
  return e;
}

std::string ControlSocketName(dev_t dev) {
  return fmt::format("ctl-{}:{}", major(dev), minor(dev));
}

std::vector<std::string> ControlDirs(uid_t owner) {
  if (owner == 0) return {"/run/shardfs"};
  return {fmt::format("/run/user/{}/shardfs", owner), fmt::format("/tmp/shardfs-{}", owner)};
}

std::string DaemonControlDir(uid_t owner) {
  std::vector<std::string> dirs = ControlDirs(owner);
  if (owner == 0) return dirs[0];
  struct stat st;
  const std::string runtime = fmt::format("/run/user/{}", owner);
  if (::lstat(runtime.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == owner) {
    return dirs[0];
  }
  return dirs[1];
}

Result<UniqueFd> OpenControlDir(const std::string& dir, uid_t owner, bool create) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, fmt::format("control directory {}: mkdir", dir));
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT && !create) return Status::NotFound(dir);
    if (err == ELOOP || err == ENOTDIR) {
      return Status::IoError(
          fmt::format("control directory {}: not a directory (a symbolic link or another file "
                      "is in its place); refusing it",
                      dir));
    }
    return Status::FromErrno(err, fmt::format("control directory {}", dir));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("control directory {}", dir));
  }
  if (st.st_uid != owner) {
    return Status::IoError(
        fmt::format("control directory {}: owned by uid {}, not by uid {} (the mount's owner); "
                    "another user may have made it to intercept requests: refusing it",
                    dir, st.st_uid, owner));
  }
  if ((st.st_mode & 077) != 0) {
    return Status::IoError(fmt::format(
        "control directory {}: mode {:04o} lets other users in; expected 0700 (chmod 700 {})", dir,
        st.st_mode & 07777, dir));
  }
  return fd;
}

Status CheckControlPeer(int fd, uid_t owner, const std::string& what) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno(errno, fmt::format("{}: SO_PEERCRED", what));
  }
  if (cred.uid != owner && cred.uid != 0) {
    return Status::IoError(fmt::format(
        "{}: the other end runs as uid {} (pid {}), neither uid {} nor root; not talking to it",
        what, cred.uid, cred.pid, owner));
  }
  return Status::Ok();
}

void SetSocketTimeouts(int fd, int send_ms, int receive_ms) {
  timeval snd{send_ms / 1000, (send_ms % 1000) * 1000};
  timeval rcv{receive_ms / 1000, (receive_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
}

Status ControlReadAll(int fd, std::string* out) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return Status::Ok();
    if (n < 0) {
      if (errno == EINTR) continue;
      if (TimedOut(errno)) return Status::IoError(std::string(kControlReadTimedOut));
      return Status::FromErrno(errno, "control socket: read");
    }
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxControlMessage) {
      return Status::InvalidArgument("control socket: message too long");
    }
  }
}

Status ControlWriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (TimedOut(errno)) return Status::IoError(std::string(kControlWriteTimedOut));
      return Status::FromErrno(errno, "control socket: write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<UniqueFd> ConnectControlSocket(const std::string& path, const std::string& what, uid_t owner,
                                      int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument(fmt::format("{}: path too long for a socket", what));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  // A Unix socket's connect waits for room in the listener's backlog at
  // most SO_SNDTIMEO.
  SetSocketTimeouts(fd.get(), timeout_ms, timeout_ms);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if (errno == ENOENT || errno == ECONNREFUSED) {
      return Status::NotFound(fmt::format("{}: no daemon listens", what));
    }
    if (TimedOut(errno)) {
      return Status::IoError(fmt::format("{}: the daemon did not take the connection within {} s",
                                         what, timeout_ms / 1000.0));
    }
    return Status::FromErrno(errno, what);
  }
  SHARDFS_RETURN_IF_ERROR(CheckControlPeer(fd.get(), owner, what));
  return fd;
}

Result<UniqueFd> ConnectControl(const std::string& mountpoint, int timeout_ms) {
  Result<MountEntry> m = FindMount(mountpoint);
  if (!m.ok()) {
    if (m.status().code() == Status::Code::kNotFound) {
      return Status::InvalidArgument(fmt::format("{}: not a shardfs mount", mountpoint));
    }
    return m.status();
  }
  if (!m->fstype.starts_with("fuse")) {
    return Status::InvalidArgument(
        fmt::format("{}: not a shardfs mount (it is on a {} file system)", mountpoint, m->fstype));
  }
  const std::string name = ControlSocketName(m->dev);
  const std::vector<std::string> dirs = ControlDirs(m->owner);
  for (const std::string& dir : dirs) {
    Result<UniqueFd> d = OpenControlDir(dir, m->owner, /*create=*/false);
    if (!d.ok() && d.status().code() == Status::Code::kNotFound) continue;
    SHARDFS_RETURN_IF_ERROR(d.status());
    // Through the checked directory, not its path again.
    Result<UniqueFd> fd = ConnectControlSocket(fmt::format("/proc/self/fd/{}/{}", d->get(), name),
                                               dir + "/" + name, m->owner, timeout_ms);
    if (!fd.ok() && fd.status().code() == Status::Code::kNotFound) continue;
    return fd;
  }
  return Status::InvalidArgument(
      fmt::format("{}: not a shardfs mount, or its daemon is gone (no control socket {} in {})",
                  mountpoint, name, fmt::join(dirs, " or ")));
}

Result<std::string> ControlExchange(int fd, const std::vector<std::string>& words,
                                    int send_timeout_ms, int reply_timeout_ms) {
  SetSocketTimeouts(fd, send_timeout_ms, reply_timeout_ms);
  std::string request;
  for (const std::string& w : words) {
    request += w;
    request.push_back('\0');
  }
  SHARDFS_RETURN_IF_ERROR(ControlWriteAll(fd, request));
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  SHARDFS_RETURN_IF_ERROR(ControlReadAll(fd, &answer));
  if (answer.starts_with("ok\n")) return answer.substr(3);
  if (answer.starts_with("error\n")) return Status::IoError(answer.substr(6));
  return Status::IoError("control socket: the daemon gave no answer");
}

}  // namespace shardfs::mount
