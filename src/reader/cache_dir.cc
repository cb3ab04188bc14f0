#include "src/reader/cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/io.h"
#include "base/log.h"

namespace shardfs::reader {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kTmpPrefix = "tmp-";
constexpr std::string_view kMarkerText =
    "This directory holds the chunk files of shardfs mounts (see cache_dir in\n"
    "shardfs(1)). shardfs writes and deletes its own files here and leaves any\n"
    "other file alone.\n";

// The start time of process `pid` in clock ticks after boot (field 22 of
// /proc/PID/stat); 0 if it cannot be read.
uint64_t StartTime(int64_t pid) {
  UniqueFd fd(::open(fmt::format("/proc/{}/stat", pid).c_str(), O_RDONLY | O_CLOEXEC));
  char buf[1024];
  const ssize_t n = fd.valid() ? ::read(fd.get(), buf, sizeof(buf) - 1) : -1;
  if (n <= 0) return 0;
  std::string_view text(buf, static_cast<size_t>(n));
  // The command name (field 2) may hold spaces and parentheses: count from
  // the last ')'.
  size_t pos = text.rfind(')');
  if (pos == std::string_view::npos) return 0;
  text.remove_prefix(pos + 1);
  for (int field = 2; field < 22; ++field) {
    size_t sp = text.find(' ');
    if (sp == std::string_view::npos) return 0;
    text.remove_prefix(sp + 1);
  }
  uint64_t start = 0;
  std::from_chars(text.data(), text.data() + text.size(), start);
  return start;
}

// "uid 65534 (nobody)".
std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

// OpenPrivateDir, with `label` beginning each error: "cache_dir DIR" for a
// cache_dir, the root's path for a default root.
Result<UniqueFd> OpenPrivate(int at, const char* name, const std::string& label) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(at, name, kFlags));
  if (!fd.valid() && errno == ENOENT) {
    if (::mkdirat(at, name, 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, fmt::format("{}: cannot create it", label));
    }
    fd.reset(::openat(at, name, kFlags));
  }
  if (!fd.valid()) {
    const int err = errno;
    struct stat lst;
    if ((err == ELOOP || err == ENOTDIR) && ::fstatat(at, name, &lst, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(lst.st_mode)) {
        return Status::InvalidArgument(
            fmt::format("{}: a symbolic link, refused: name the directory itself (whoever "
                        "can change the link could point the cache elsewhere)",
                        label));
      }
      if (!S_ISDIR(lst.st_mode)) {
        return Status::NotADirectory(fmt::format("{}: not a directory", label));
      }
    }
    return Status::FromErrno(err, label);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, label);
  if (st.st_uid != ::geteuid()) {
    return Status::InvalidArgument(fmt::format(
        "{}: owned by {}, mode {:04o}, not by this mount's user ({}), refused: its owner could "
        "plant files (chunks, indexes) that shardfs would trust",
        label, UserName(st.st_uid), st.st_mode & 07777, UserName(::geteuid())));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: writable by {} (mode {:04o}), refused: they could plant files "
        "(chunks, indexes) that shardfs would trust (chmod go-w it)",
        label, (st.st_mode & S_IWOTH) != 0 ? "others" : "its group", st.st_mode & 07777));
  }
  return fd;
}

}  // namespace

Result<UniqueFd> OpenPrivateDir(int at, const char* name, const std::string& shown) {
  return OpenPrivate(at, name, fmt::format("cache_dir {}", shown));
}

Result<UniqueFd> OpenCacheRoot(const std::string& root) {
  const fs::path path = fs::path(root).lexically_normal();
  if (!path.is_absolute() || !path.has_filename()) {
    return Status::InvalidArgument(fmt::format("{}: not an absolute path to a directory", root));
  }
  // The missing directories above `root`, nearest first; `root` itself is
  // always opened from its parent, whether it exists or not.
  std::vector<fs::path> below{path};
  fs::path above = path.parent_path();
  struct stat st;
  while (above.has_relative_path() && ::lstat(above.c_str(), &st) != 0 && errno == ENOENT) {
    below.push_back(above);
    above = above.parent_path();
  }
  UniqueFd at(::open(above.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!at.valid()) return Status::FromErrno(errno, fmt::format("{}: {}", root, above.string()));
  for (auto dir = below.rbegin(); dir != below.rend(); ++dir) {
    const std::string label = *dir == path ? root : fmt::format("{}: {}", root, dir->string());
    SHARDFS_ASSIGN_OR_RETURN(at, OpenPrivate(at.get(), dir->filename().c_str(), label));
  }
  return at;
}

namespace {

// Whether directory `dir_fd` has no entries but . and ..
Result<bool> IsEmptyDir(int dir_fd, const std::string& shown) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    return Status::FromErrno(err, fmt::format("cache_dir {}", shown));
  }
  bool empty = true;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

}  // namespace

Result<CacheDir> OpenSharedCacheDir(const std::string& dir, const char* chunk_subdir) {
  CacheDir out;
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd top, OpenPrivateDir(AT_FDCWD, dir.c_str(), dir));
  out.chunk_dir = fmt::format("{}/{}", dir, chunk_subdir);
  SHARDFS_ASSIGN_OR_RETURN(out.dir_fd, OpenPrivateDir(top.get(), chunk_subdir, out.chunk_dir));
  // The marker says the directory is shardfs's: files are deleted only in a
  // directory that has it, or that was empty (a first Open cut short).
  const std::string marker = fmt::format("{}/{}", out.chunk_dir, kCacheMarker);
  struct stat st;
  auto has_marker = [&] {
    return ::fstatat(out.dir_fd.get(), kCacheMarker, &st, AT_SYMLINK_NOFOLLOW) == 0;
  };
  bool marked = has_marker();
  int marker_errno = errno;
  if (!marked && marker_errno == ENOENT) {
    SHARDFS_ASSIGN_OR_RETURN(bool empty, IsEmptyDir(out.dir_fd.get(), out.chunk_dir));
    // Another process may have made the directory shardfs's between the two
    // looks: it writes the marker before anything else.
    if (!empty) {
      marked = has_marker();
      marker_errno = errno;
      if (!marked && marker_errno == ENOENT) {
        return Status::InvalidArgument(fmt::format(
            "cache_dir {}: {} holds files but no {} marker: not made by shardfs, refused (move "
            "it away to start a new cache)",
            dir, out.chunk_dir, kCacheMarker));
      }
    }
  }
  if (marked) {
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      return Status::InvalidArgument(fmt::format(
          "cache_dir {}: {} is not a file this user wrote; not shardfs's directory, refused", dir,
          marker));
    }
  } else if (marker_errno != ENOENT) {
    return Status::FromErrno(marker_errno, fmt::format("cache_dir {}", marker));
  } else {
    UniqueFd m(::openat(out.dir_fd.get(), kCacheMarker,
                        O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    // EEXIST: another process wrote it meanwhile; the lock below decides.
    if (!m.valid() && errno != EEXIST) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}", marker));
    }
    if (m.valid() && !WriteFully(m.get(), kMarkerText.data(), kMarkerText.size())) {
      return Status::FromErrno(errno, "write").WithContext(fmt::format("cache_dir {}", marker));
    }
  }
  const std::string lock = fmt::format("{}/{}", out.chunk_dir, kCacheLock);
  out.lock_fd.reset(
      ::openat(out.dir_fd.get(), kCacheLock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out.lock_fd.valid()) return Status::FromErrno(errno, fmt::format("cache_dir {}", lock));
  return out;
}

Result<CacheDir> OpenCacheDir(const std::string& dir, const char* chunk_subdir,
                              std::chrono::milliseconds lock_wait) {
  SHARDFS_ASSIGN_OR_RETURN(CacheDir out, OpenSharedCacheDir(dir, chunk_subdir));
  const std::string lock = fmt::format("{}/{}", out.chunk_dir, kCacheLock);
  // flock locks the open file description: a second Open in this process is
  // refused too.
  const auto deadline = std::chrono::steady_clock::now() + lock_wait;
  while (::flock(out.lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}: lock", lock));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::AlreadyExists(
          fmt::format("cache_dir {}: in use by another shardfs process", dir));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

std::string FormatChunkName(uint64_t id_hash, uint64_t index) {
  return fmt::format("{:016x}-{:x}.chunk", id_hash, index);
}

std::string FormatClaimName(uint64_t id_hash, uint64_t index) {
  return fmt::format("{:016x}-{:x}.claim", id_hash, index);
}

namespace {

// Parses "<hex>-<hex><suffix>".
bool ParseKeyName(std::string_view name, std::string_view suffix, uint64_t* id_hash,
                  uint64_t* index) {
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return false;
  name.remove_suffix(suffix.size());
  const char* p = name.data();
  const char* end = name.data() + name.size();
  auto [dash, ec] = std::from_chars(p, end, *id_hash, 16);
  if (ec != std::errc() || dash == p || dash == end || *dash != '-') return false;
  auto [last, ec2] = std::from_chars(dash + 1, end, *index, 16);
  return ec2 == std::errc() && last != dash + 1 && last == end;
}

// Reads "<a><sep><b>..." of hex numbers into `out`; false unless all of
// `text` is exactly `n` numbers.
bool ParseHexFields(std::string_view text, char sep, uint64_t* out, int n) {
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < n; ++i) {
    auto [next, ec] = std::from_chars(p, end, out[i], 16);
    if (ec != std::errc() || next == p) return false;
    p = next;
    if (i + 1 < n) {
      if (p == end || *p != sep) return false;
      ++p;
    }
  }
  return p == end;
}

}  // namespace

bool ParseChunkName(std::string_view name, uint64_t* id_hash, uint64_t* index) {
  return ParseKeyName(name, ".chunk", id_hash, index);
}

bool ParseClaimName(std::string_view name) {
  uint64_t id_hash, index;
  return ParseKeyName(name, ".claim", &id_hash, &index);
}

ProcessStamp ThisProcess() {
  static std::atomic<int64_t> cached_pid{0};
  static std::atomic<uint64_t> cached_start{0};
  const int64_t pid = ::getpid();
  if (cached_pid.load(std::memory_order_acquire) == pid) {
    return {pid, cached_start.load(std::memory_order_relaxed)};
  }
  ProcessStamp p{pid, StartTime(pid)};
  cached_start.store(p.start, std::memory_order_relaxed);
  cached_pid.store(pid, std::memory_order_release);
  return p;
}

bool ProcessGone(const ProcessStamp& p) {
  if (p.pid <= 0) return false;
  if (::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH) return true;
  const uint64_t start = StartTime(p.pid);
  return p.start != 0 && start != 0 && start != p.start;
}

std::string FormatStamp(const ProcessStamp& p) { return fmt::format("{:x} {:x}", p.pid, p.start); }

bool ParseStamp(std::string_view text, ProcessStamp* p) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  uint64_t f[2];
  if (!ParseHexFields(text, ' ', f, 2) || f[0] == 0 || f[0] > INT32_MAX) return false;
  *p = {static_cast<int64_t>(f[0]), f[1]};
  return true;
}

bool LeftByTheDead(int dir_fd, const char* name) {
  ProcessStamp writer;
  if (ParseOwnedTmpName(name, &writer)) return ProcessGone(writer);
  UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  char text[64];
  const ssize_t n = fd.valid() ? ::read(fd.get(), text, sizeof(text)) : -1;
  return n > 0 && ParseStamp(std::string_view(text, static_cast<size_t>(n)), &writer) &&
         ProcessGone(writer);
}

std::string FormatTmpName(uint64_t gen) { return fmt::format("{}{:x}", kTmpPrefix, gen); }

std::string FormatOwnedTmpName(const ProcessStamp& p, uint64_t seq) {
  return fmt::format("{}{:x}-{:x}-{:x}", kTmpPrefix, p.pid, p.start, seq);
}

bool ParseOwnedTmpName(std::string_view name, ProcessStamp* p) {
  if (!name.starts_with(kTmpPrefix)) return false;
  name.remove_prefix(kTmpPrefix.size());
  uint64_t f[3];
  if (!ParseHexFields(name, '-', f, 3) || f[0] == 0 || f[0] > INT32_MAX) return false;
  *p = {static_cast<int64_t>(f[0]), f[1]};
  return true;
}

}  // namespace shardfs::reader
