#include "src/mount/mount_and_serve.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "base/log.h"
#include "index/index_reader.h"
#include "src/mount/control_server.h"
#include "src/mount/fuse_adapter.h"
#include "src/mount/kernel_mount.h"
#include "src/reader/filesystem.h"
#include "src/reader/shard_fetcher.h"
#include "src/reader/volume.h"

extern char** environ;

namespace shardfs::mount {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;

Status CheckMountpoint(const std::string& path, bool nonempty) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("mountpoint {}", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("mountpoint {}: not a directory", path));
  }
  if (nonempty) return Status::Ok();
  DIR* d = ::opendir(path.c_str());
  if (!d) return Status::FromErrno(errno, fmt::format("mountpoint {}", path));
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  if (!empty) {
    return Status::InvalidArgument(fmt::format(
        "mountpoint {}: not an empty directory (use -o nonempty to mount over it)", path));
  }
  return Status::Ok();
}

// Raises the soft limit of open files to the hard limit, and returns
// `max_open_shards` clamped so that the cached shards, the descriptors that
// reads and pushes hold a moment longer, and the daemon's own (/dev/fuse
// clones, the index's table files) fit under it.
size_t ClampOpenShards(size_t max_open_shards) {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return max_open_shards;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  // Half the limit for shards, the rest for everything else; at least 1.
  rlim_t room = rl.rlim_cur == RLIM_INFINITY ? max_open_shards : rl.rlim_cur / 2;
  size_t clamped = std::max<size_t>(1, std::min<size_t>(max_open_shards, room));
  if (clamped < max_open_shards) {
    log::Info("max_open_shards={} lowered to {}: the open-files limit is {}", max_open_shards,
              clamped, static_cast<uint64_t>(rl.rlim_cur));
  }
  return clamped;
}

// A cheap look at every shard (one stat each, no reads): an index whose
// shards have all moved is refused; single missing shards are logged and
// their files fail with EIO. --check reads and fingerprints them all.
bool ShardsInPlace(const MountArgs& a, const index::IndexReader& r) {
  size_t missing = 0;
  std::string first_missing;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    if (r.shards()[i].remote()) continue;  // Checked by its requests.
    const std::string& path = r.ShardPath(index::ShardId{i});
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) continue;
    if (missing++ == 0) first_missing = path;
    if (!a.check)
      log::Warning("shard {}: {}; reads of its files fail with EIO", path, std::strerror(errno));
  }
  if (missing > 0 && missing == r.shards().size() && !a.allow_missing) {
    log::Error(
        "index {}: none of its {} shards is where the index says (the first: {}); were "
        "they moved? Not mounting (--allow-missing-shards mounts anyway)",
        a.shown, r.shards().size(), first_missing);
    return false;
  }
  return true;
}

// --check: every shard opened and fingerprinted before mounting; a remote
// one asked for its size and ETag.
bool ShardsPassCheck(const MountArgs& a, reader::Filesystem& fs, reader::ShardFetcher* fetcher) {
  std::vector<Status> problems = fs.shard_files().CheckAll();
  for (uint32_t i = 0; fetcher != nullptr && i < fs.reader().shards().size(); ++i) {
    Status s = fetcher->CheckRemote(i);
    if (!s.ok()) {
      log::Error("{}", s.message());
      problems.push_back(s);
    }
  }
  if (problems.empty()) return true;
  if (!a.allow_missing) {
    log::Error(
        "{} of {} shards failed the check; not mounting (--allow-missing-shards "
        "mounts anyway, their files fail with EIO)",
        problems.size(), fs.shard_files().shard_count());
    return false;
  }
  log::Warning("{} of {} shards failed the check; their files fail with EIO", problems.size(),
               fs.shard_files().shard_count());
  return true;
}

// The volume's options from the mount's.
reader::VolumeOptions VolumeOptionsOf(const MountOptions& o) {
  reader::VolumeOptions v;
  v.reader = o.reader;
  v.fs = o.fs;
  v.cache_dir = o.cache_dir;
  v.cache_size = o.cache_size;
  v.storage = o.storage;
  v.decode_cache = o.decode_cache;
  v.max_index_size = o.max_index_size;
  v.fetch = o.fetch;
  return v;
}

// Opens the index, checks shards if asked, mounts and serves. `on_mounted`
// runs once the mount is in place.
int MountAndServe(const MountArgs& a, const std::function<void()>& on_mounted) {
  // Every FUSE worker thread would otherwise get a malloc arena of its own
  // and keep what it freed (directory listings, iterators): two arenas keep
  // the daemon's memory bounded (about 35 MB instead of 50 MB after a walk of
  // a 1M-file tree) at no measurable cost on this path.
  ::mallopt(M_ARENA_MAX, 2);
  MountOptions options = a.options;
  if (options.push_random_auto) {
    options.push.random_bytes = MountOptions::kAutoPushRandom;
    options.push.random_follows_memory = true;
  }
  options.fs.max_open_shards = ClampOpenShards(options.fs.max_open_shards);
  auto volume = reader::Volume::Open(indexref::LocationOf(a.ref), VolumeOptionsOf(options));
  if (!volume.ok()) {
    log::Error("{}", volume.status().message());
    return kExitFailure;
  }
  reader::Filesystem& fs = (*volume)->fs();
  reader::ShardFetcher* fetcher = (*volume)->fetcher();
  if (!ShardsInPlace(a, fs.reader())) return kExitFailure;
  if (a.check && !ShardsPassCheck(a, fs, fetcher)) return kExitFailure;
  std::string fsname = a.shown;  // Absolute and normal already, or a redacted URL.
  mount::ControlServer control(&fs, fetcher, a.mountpoint);
  Status s = ServeFuse(&fs, options, a.mountpoint, fsname, [&]() -> Status {
    // No mount without its control socket: `shardfs stats` and `cache warm`
    // would find nothing, or whatever another user put in its place.
    Status cs = control.Start();
    if (!cs.ok()) {
      return cs.WithContext("no control socket for shardfs stats and cache, so not mounting");
    }
    on_mounted();
    return Status::Ok();
  });
  // Fetches first (a cache warm in progress ends with them), then the socket.
  if (fetcher) fetcher->Stop();
  control.Stop();
  if (!s.ok()) {
    log::Error("mount {}: {}", a.mountpoint, s.message());
    return kExitFailure;
  }
  return kExitOk;
}

// Without -f: the child mounts and serves, detached, and reports "mounted"
// through a pipe; until then its stderr is ours, so errors reach the user.
// The parent returns 0 once the mount is in place, else the child's failure.
int MountInBackground(const MountArgs& a) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    log::Error("pipe: {}", std::strerror(errno));
    return kExitFailure;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    log::Error("fork: {}", std::strerror(errno));
    return kExitFailure;
  }
  if (pid > 0) {
    ::close(pipefd[1]);
    char byte = 0;
    ssize_t n;
    do {
      n = ::read(pipefd[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) return kExitOk;
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : kExitFailure;
  }
  ::close(pipefd[0]);
  ::setsid();
  if (::chdir("/") != 0) {  // Paths are absolute by now; do not pin the cwd.
    log::Warning("chdir /: {}", std::strerror(errno));
  }
  return MountAndServe(a, [&] {
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      if (null > STDERR_FILENO) ::close(null);
    }
    log::UseSyslog("shardfs");
    log::Info("mounted {} at {}", a.shown, a.mountpoint);
    char ok = 1;
    ssize_t unused = ::write(pipefd[1], &ok, 1);
    (void)unused;
    ::close(pipefd[1]);
  });
}

// Runs `fusermount3 -u mountpoint`; returns its exit status (or -1) and, in
// `err`, what it printed on stderr.
int RunFusermount(const char* mountpoint, std::string* err) {
  err->clear();
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDERR_FILENO);
  const char* args[] = {"fusermount3", "-u", mountpoint, nullptr};
  pid_t pid;
  int rc = ::posix_spawnp(&pid, "fusermount3", &fa, nullptr, const_cast<char**>(args), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    *err = fmt::format("cannot run fusermount3: {}", std::strerror(rc));
    return -1;
  }
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    err->append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// umount2 of a kernel mount, tried again while busy for a few seconds.
int UnmountKernel(const std::string& mountpoint) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::umount2(mountpoint.c_str(), UMOUNT_NOFOLLOW) != 0) {
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) {
      log::Error("umount {}: {}", mountpoint, std::strerror(errno));
      return kExitFailure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return kExitOk;
}

}  // namespace

int Mount(MountArgs a) {
  Status s = CheckMountpoint(a.mountpoint, a.options.nonempty);
  if (!s.ok()) {
    log::Error("{}", s.message());
    return kExitFailure;
  }
  // An index by URL (or bundle) is fetched here, before the daemon forks:
  // errors reach the user, and the child inherits the hold on the copy.
  reader::VolumeOptions vo = VolumeOptionsOf(a.options);
  Result<indexref::IndexRef> ref = indexref::ResolveForVolume(a.index, &vo);
  if (!ref.ok()) {
    log::Error("mount {}: {}", a.mountpoint, ref.status().message());
    return kExitFailure;
  }
  a.ref = std::move(ref).value();
  a.options.reader.resolve_partition = vo.reader.resolve_partition;
  a.index = a.ref.path;
  a.shown = a.ref.shown;
  if (a.options.kernel != KernelMode::kOff) {
    s = MountKernel(a.index, a.ref.cached, a.mountpoint, a.options);
    if (s.ok()) return kExitOk;
    if (s.code() != Status::Code::kNotSupported || a.options.kernel == KernelMode::kOn) {
      log::Error("mount {}: {}{}", a.mountpoint,
                 s.code() == Status::Code::kNotSupported ? "not with the kernel: " : "",
                 s.message());
      return kExitFailure;
    }
    log::Warning("mount {}: not with the kernel: {}; mounting with FUSE", a.mountpoint,
                 s.message());
  }
  if (a.foreground) {
    return MountAndServe(a, [&] { log::Info("mounted {} at {}", a.shown, a.mountpoint); });
  }
  return MountInBackground(a);
}

int Unmount(const std::string& mountpoint) {
  std::string image;
  if (IsKernelMount(std::filesystem::absolute(mountpoint).lexically_normal().string(), &image)) {
    return UnmountKernel(mountpoint);
  }
  // A background directory listing (prefill_dirs) holds a directory of the
  // mount open for a moment: the unmount is then busy, so it is tried again
  // for a few seconds.
  constexpr auto kBusyFor = std::chrono::seconds(5);
  auto deadline = std::chrono::steady_clock::now() + kBusyFor;
  std::string err;
  for (;;) {
    int rc = RunFusermount(mountpoint.c_str(), &err);
    if (rc == 0) return kExitOk;
    bool busy = err.find("busy") != std::string::npos;
    if (!busy || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  while (!err.empty() && err.back() == '\n') err.pop_back();
  log::Error("umount {}: {}", mountpoint, err.empty() ? "fusermount3 failed" : err);
  return kExitFailure;
}

}  // namespace shardfs::mount
