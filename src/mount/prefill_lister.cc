#include "src/mount/prefill_lister.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "base/io.h"
#include "base/log.h"

extern char** environ;

namespace shardfs::mount {

namespace {

struct Reply {
  int32_t error = 0;  // 0, an errno value, or one of the codes below.
  uint32_t pad = 0;
  uint64_t value = 0;  // st_dev at start; entries after a listing.
};

constexpr int32_t kNotMountRoot = -1;
constexpr int32_t kNotOnMount = -2;
constexpr size_t kDentsBuffer = 64 * 1024;
constexpr uint32_t kMaxPath = 1 << 16;

// The root of a FUSE mount: inode 1 on a filesystem of FUSE's type.
Reply CheckMountRoot(const char* mountpoint) {
  constexpr long kFuseSuperMagic = 0x65735546;
  struct stat st;
  struct statfs sf;
  if (::stat(mountpoint, &st) != 0 || ::statfs(mountpoint, &sf) != 0) return {errno, 0, 0};
  if (sf.f_type != kFuseSuperMagic || st.st_ino != 1) return {kNotMountRoot, 0, 0};
  return {0, 0, static_cast<uint64_t>(st.st_dev)};
}

Reply ListOne(const std::string& path, dev_t dev, char* buf) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {errno, 0, 0};
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_dev != dev) {
    ::close(fd);
    return {kNotOnMount, 0, 0};
  }
  long n;
  uint64_t entries = 0;
  while ((n = ::syscall(SYS_getdents64, fd, buf, kDentsBuffer)) > 0) {
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf + off);
      if (d->d_reclen == 0) break;
      off += d->d_reclen;
      ++entries;
    }
  }
  int err = n < 0 ? errno : 0;
  ::close(fd);
  return {err, 0, entries};
}

}  // namespace

int RunPrefillLister(int argc, char** argv) {
  if (argc != 3) return 2;
  // Dies with the daemon's prefill thread (its socket's end closing says the
  // same, unless this process is inside a listing then).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const std::string mountpoint = argv[2];
  Reply start = CheckMountRoot(mountpoint.c_str());
  if (!WriteFully(STDOUT_FILENO, &start, sizeof start) || start.error != 0) return 1;
  const dev_t dev = static_cast<dev_t>(start.value);
  auto buf = std::make_unique<char[]>(kDentsBuffer);
  std::string rel;
  for (;;) {
    uint32_t len;
    if (!ReadFully(STDIN_FILENO, &len, sizeof len)) return 0;  // The daemon closed its end.
    if (len > kMaxPath) return 1;
    rel.resize(len);
    if (len > 0 && !ReadFully(STDIN_FILENO, rel.data(), len)) return 1;
    Reply r = ListOne(rel.empty() ? mountpoint : mountpoint + "/" + rel, dev, buf.get());
    if (!WriteFully(STDOUT_FILENO, &r, sizeof r)) return 1;
  }
}

PrefillLister::~PrefillLister() {
  if (pid_.load() == 0) return;
  ::shutdown(fd_, SHUT_WR);  // The child reads the end: it exits.
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_.load(), nullptr, WNOHANG) != 0) {
      pid_.store(0);
      ::close(fd_);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
}

void PrefillLister::Kill() {
  const pid_t pid = pid_.exchange(0);
  if (pid == 0) return;
  ::kill(pid, SIGKILL);
  // Reaped if it has died; a child stuck in a listing of a mount whose
  // daemon is gone dies when that listing fails, and is reaped by init.
  ::waitpid(pid, nullptr, WNOHANG);
  ::close(fd_);
  fd_ = -1;
}

Status PrefillLister::Start() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::FromErrno(errno, "prefill: socketpair");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, sv[1], STDOUT_FILENO);
  // Nothing else of the daemon's (the /dev/fuse descriptor above all):
  // stderr stays, for the sanitizers' reports.
  posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
  // Not in a directory of anything mounted later.
  posix_spawn_file_actions_addchdir_np(&fa, "/");
  std::string arg0 = "shardfs";
  std::string arg1 = kPrefillListerArg;
  std::string arg2 = mountpoint_;
  char* args[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return Status::FromErrno(rc, "prefill: starting the lister process");
  }
  fd_ = sv[0];
  pid_.store(pid, std::memory_order_release);
  log::Debug("prefill: lister process {} started", pid);
  Reply start;
  SHARDFS_RETURN_IF_ERROR(ReadReply(&start, sizeof start));
  if (start.error == kNotMountRoot) {
    Kill();
    not_mount_root_ = true;
    log::Warning("prefill: {} is not this mount's root; directories are not listed ahead",
                 mountpoint_);
    return Status::NotSupported("not this mount's root");
  }
  if (start.error != 0) {
    Kill();
    return Status::FromErrno(start.error, fmt::format("prefill: {}", mountpoint_));
  }
  return Status::Ok();
}

Status PrefillLister::ReadReply(void* buf, size_t size) {
  char* p = static_cast<char*>(buf);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
  while (size > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd_, POLLIN, 0};
    int rc = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      Kill();
      return Status::IoError(
          fmt::format("prefill: the lister process gave no answer in {} s; "
                      "killed",
                      kReplyTimeoutMs / 1000));
    }
    ssize_t n = rc > 0 ? ::read(fd_, p, size) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Kill();
      return Status::IoError("prefill: the lister process ended");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PrefillLister::List(const std::string& rel, uint64_t* entries) {
  if (not_mount_root_) return Status::NotSupported("not this mount's root");
  if (pid_.load() == 0) SHARDFS_RETURN_IF_ERROR(Start());
  if (rel.size() > kMaxPath) return Status::InvalidArgument("path too long");
  uint32_t len = static_cast<uint32_t>(rel.size());
  if (!WriteFully(fd_, &len, sizeof len) || !WriteFully(fd_, rel.data(), rel.size())) {
    Kill();
    return Status::IoError("prefill: the lister process ended");
  }
  Reply r;
  SHARDFS_RETURN_IF_ERROR(ReadReply(&r, sizeof r));
  if (r.error == kNotOnMount) return Status::NotSupported("not on this mount; not listed");
  if (r.error != 0) return Status::FromErrno(r.error, rel.empty() ? mountpoint_ : rel);
  *entries = r.value;
  return Status::Ok();
}

}  // namespace shardfs::mount
