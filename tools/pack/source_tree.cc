#include "tools/pack/source_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "base/fd.h"
#include "base/io.h"
#include "base/strings.h"
#include "index/member_path.h"

namespace shardfs::pack {
namespace {

const char kZeros[kIoChunk] = {};

const char* SpecialName(mode_t mode) {
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  return "file of unknown type";
}

void FillFromStat(const struct stat& st, SourceEntry* e) {
  e->mode = st.st_mode;
  e->uid = st.st_uid;
  e->gid = st.st_gid;
  e->mtime_ns = MtimeNs(st);
  e->ctime_ns = CtimeNs(st);
  e->size = static_cast<uint64_t>(st.st_size);
  e->dev = st.st_dev;
  e->ino = st.st_ino;
  e->nlink = st.st_nlink;
  e->special = "";
  if (S_ISREG(st.st_mode)) {
    e->kind = SourceKind::kFile;
  } else if (S_ISDIR(st.st_mode)) {
    e->kind = SourceKind::kDir;
  } else if (S_ISLNK(st.st_mode)) {
    e->kind = SourceKind::kSymlink;
  } else {
    e->kind = SourceKind::kSpecial;
    e->special = SpecialName(st.st_mode);
  }
}

Status ReadLinkAt(int dir_fd, const char* name, size_t hint, std::string* out) {
  size_t cap = std::max<size_t>(hint + 1, 64);
  for (;;) {
    out->resize(cap);
    ssize_t n = ::readlinkat(dir_fd, name, out->data(), cap);
    if (n < 0) return Status::FromErrno(errno, "readlink");
    if (static_cast<size_t>(n) < cap) {
      out->resize(static_cast<size_t>(n));
      return Status::Ok();
    }
    cap *= 2;
  }
}

// ---- Scanning ---------------------------------------------------------------

class TreeScanner {
 public:
  TreeScanner(const TreeScanOptions& options, int root_fd, std::string root_real,
              Progress* progress)
      : options_(options),
        root_fd_(root_fd),
        root_real_(std::move(root_real)),
        progress_(progress) {}

  Status LoadList() {
    const std::vector<std::string>* paths = options_.only;
    if (!paths) {
      if (options_.from_list.empty()) return Status::Ok();
      SHARDFS_ASSIGN_OR_RETURN(list_order_, ReadPathList(options_.from_list));
      paths = &list_order_;
    }
    for (const std::string& p : *paths) {
      for (std::string_view up = p; !up.empty();) {
        up = index::ParentPath(up);
        above_listed_.emplace(up);
      }
      listed_.insert(p);
    }
    return Status::Ok();
  }

  bool Listing() const { return options_.only || !options_.from_list.empty(); }

  Result<TreeScan> Run() {
    SHARDFS_RETURN_IF_ERROR(LoadList());
    struct stat st;
    if (::fstat(root_fd_, &st) != 0) return Status::FromErrno(errno, root_real_);
    Task root;
    FillFromStat(st, &root.entry);
    root.all = !Listing() || listed_.count("");
    if (root.all && Listing()) found_.insert("");
    if (options_.follow_symlinks) root.chain.push_back("");
    queue_.push_back(std::move(root));

    int jobs = std::max(1, options_.jobs);
    std::vector<std::vector<SourceEntry>> outs(jobs);
    std::vector<std::vector<std::string>> warns(jobs);
    std::vector<std::thread> threads;
    for (int t = 1; t < jobs; ++t) threads.emplace_back([&, t] { Worker(&outs[t], &warns[t]); });
    Worker(&outs[0], &warns[0]);
    for (auto& t : threads) t.join();

    TreeScan scan;
    scan.root = root_real_;
    scan.listed = std::move(list_order_);
    size_t total = 0;
    for (const auto& o : outs) total += o.size();
    scan.entries.reserve(total);
    for (auto& o : outs) {
      std::move(o.begin(), o.end(), std::back_inserter(scan.entries));
      o.clear();
      o.shrink_to_fit();
    }
    std::sort(scan.entries.begin(), scan.entries.end(),
              [](const SourceEntry& a, const SourceEntry& b) {
                return index::TreeOrderLess(a.path, b.path);
              });
    for (auto& w : warns) scan.warnings.insert(scan.warnings.end(), w.begin(), w.end());
    std::sort(scan.warnings.begin(), scan.warnings.end());
    for (const std::string& p : listed_) {
      if (!found_.count(p)) {
        return Status::InvalidArgument(
            fmt::format("--from-list {}: {}: not found in {} (or excluded)", options_.from_list,
                        ShownPath(p), root_real_));
      }
    }
    return scan;
  }

 private:
  struct Task {
    SourceEntry entry;               // The directory itself, stat'ed by its parent.
    bool all = true;                 // Everything below is included (no --from-list filter).
    std::vector<std::string> chain;  // --follow-symlinks: real paths of it and its ancestors.
  };

  bool Excluded(std::string_view path) const {
    for (const std::string& pat : options_.excludes) {
      bool whole = pat.find('/') != std::string::npos;
      std::string subject(whole ? path : index::BaseName(path));
      if (::fnmatch(pat.c_str(), subject.c_str(), 0) == 0) return true;
    }
    return false;
  }

  void Worker(std::vector<SourceEntry>* out, std::vector<std::string>* warnings) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty() || active_ == 0; });
      if (queue_.empty()) return;
      Task task = std::move(queue_.back());  // Depth first: keeps the queue short.
      queue_.pop_back();
      ++active_;
      lock.unlock();
      std::vector<Task> subdirs;
      WalkDir(std::move(task), out, warnings, &subdirs);
      lock.lock();
      for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) queue_.push_back(std::move(*it));
      --active_;
      cv_.notify_all();
    }
  }

  // --follow-symlinks: replaces the symlink `e` by what it names when that
  // lies inside the root. Returns false to keep it a symlink (with a warning).
  bool Follow(const Task& parent, SourceEntry* e, std::vector<std::string>* warnings) {
    std::string full = root_real_ == "/" ? "/" + e->open_path() : root_real_ + "/" + e->open_path();
    char* rp = ::realpath(full.c_str(), nullptr);
    if (!rp) {
      warnings->push_back(fmt::format("{}: symlink kept: target does not resolve: {}",
                                      ShownPath(e->path), std::strerror(errno)));
      return false;
    }
    std::string real = rp;
    std::free(rp);
    std::string rel;
    if (real == root_real_) {
      rel = "";
    } else if (root_real_ == "/") {
      rel = real.substr(1);
    } else if (real.size() > root_real_.size() &&
               real.compare(0, root_real_.size(), root_real_) == 0 &&
               real[root_real_.size()] == '/') {
      rel = real.substr(root_real_.size() + 1);
    } else {
      warnings->push_back(fmt::format("{}: symlink kept: target {} is outside the source",
                                      ShownPath(e->path), real));
      return false;
    }
    struct stat st;
    if (::stat(real.c_str(), &st) != 0) {
      warnings->push_back(
          fmt::format("{}: symlink kept: {}", ShownPath(e->path), std::strerror(errno)));
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      bool loop = rel.empty();
      for (const std::string& c : parent.chain) {
        if (c == rel ||
            (c.size() > rel.size() && c.compare(0, rel.size(), rel) == 0 && c[rel.size()] == '/')) {
          loop = true;
        }
      }
      if (loop) {
        warnings->push_back(
            fmt::format("{}: symlink kept: following it would loop", ShownPath(e->path)));
        return false;
      }
    }
    FillFromStat(st, e);
    e->link_target.clear();
    e->src = rel;
    return true;
  }

  void WalkDir(Task task, std::vector<SourceEntry>* out, std::vector<std::string>* warnings,
               std::vector<Task>* subdirs) {
    SourceEntry& self = task.entry;
    const std::string dir_open = self.open_path().empty() ? "." : self.open_path();
    UniqueFd fd(OpenBeneath(root_fd_, dir_open, O_RDONLY | O_DIRECTORY));
    if (!fd.valid()) {
      self.unreadable = fmt::format("open directory: {}", std::strerror(errno));
      out->push_back(std::move(self));
      return;
    }
    int dfd = ::dup(fd.get());
    DIR* dir = dfd >= 0 ? ::fdopendir(dfd) : nullptr;
    if (!dir) {
      if (dfd >= 0) ::close(dfd);
      self.unreadable = fmt::format("open directory: {}", std::strerror(errno));
      out->push_back(std::move(self));
      return;
    }
    uint64_t entries = 0, bytes = 0;
    for (;;) {
      errno = 0;
      struct dirent* d = ::readdir(dir);
      if (!d) {
        if (errno != 0) self.unreadable = fmt::format("read directory: {}", std::strerror(errno));
        break;
      }
      std::string_view name = d->d_name;
      if (name == "." || name == "..") continue;
      SourceEntry e;
      e.path = JoinPath(self.path, name);
      if (Excluded(e.path)) continue;
      bool listed = !listed_.empty() && listed_.count(e.path);
      if (listed) {
        std::lock_guard<std::mutex> lock(mu_);
        found_.insert(e.path);
      }
      // Without --from-list, or below a listed directory, everything is in;
      // otherwise only listed paths and the directories above them.
      bool all = task.all || listed;
      if (!all && !above_listed_.count(e.path)) continue;
      if (!self.src.empty()) e.src = JoinPath(self.src, name);
      struct stat st;
      if (::fstatat(fd.get(), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        e.unreadable = fmt::format("stat: {}", std::strerror(errno));
        out->push_back(std::move(e));
        continue;
      }
      FillFromStat(st, &e);
      if (e.kind == SourceKind::kSymlink) {
        Status s = ReadLinkAt(fd.get(), d->d_name, e.size, &e.link_target);
        if (!s.ok()) {
          e.unreadable = s.message();
          out->push_back(std::move(e));
          continue;
        }
        if (options_.follow_symlinks) Follow(task, &e, warnings);
      }
      ++entries;
      if (e.kind == SourceKind::kDir) {
        Task sub;
        sub.all = all;
        if (options_.follow_symlinks) {
          sub.chain = task.chain;
          sub.chain.push_back(e.open_path());
        }
        sub.entry = std::move(e);
        subdirs->push_back(std::move(sub));
      } else {
        if (e.kind == SourceKind::kFile) bytes += e.size;
        out->push_back(std::move(e));
      }
    }
    ::closedir(dir);
    out->push_back(std::move(self));
    if (progress_) {
      progress_->Add(entries, bytes);
      progress_->UnitDone();
    }
  }

  const TreeScanOptions& options_;
  const int root_fd_;
  const std::string root_real_;
  Progress* const progress_;
  std::vector<std::string> list_order_;  // options_.from_list's paths, in its order.
  std::unordered_set<std::string> listed_;
  std::unordered_set<std::string> above_listed_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;                 // Guarded by mu_.
  size_t active_ = 0;                      // Guarded by mu_.
  std::unordered_set<std::string> found_;  // Guarded by mu_.
};
}  // namespace

int StatOpenFile(int fd, struct stat* st) {
  struct statx sx;
  constexpr unsigned kMask = STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_GID |
                             STATX_MTIME | STATX_CTIME | STATX_INO | STATX_SIZE | STATX_BLOCKS;
  if (::statx(fd, "", AT_EMPTY_PATH, kMask, &sx) != 0) {
    return errno == ENOSYS ? ::fstat(fd, st) : -1;
  }
  *st = {};
  st->st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  st->st_ino = sx.stx_ino;
  st->st_mode = sx.stx_mode;
  st->st_nlink = sx.stx_nlink;
  st->st_uid = sx.stx_uid;
  st->st_gid = sx.stx_gid;
  st->st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
  st->st_size = static_cast<off_t>(sx.stx_size);
  st->st_blksize = static_cast<blksize_t>(sx.stx_blksize);
  st->st_blocks = static_cast<blkcnt_t>(sx.stx_blocks);
  st->st_mtim = {sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec};
  st->st_ctim = {sx.stx_ctime.tv_sec, sx.stx_ctime.tv_nsec};
  return 0;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * kNanosPerSecond + st.st_mtim.tv_nsec;
}

int64_t CtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_ctim.tv_sec) * kNanosPerSecond + st.st_ctim.tv_nsec;
}

int FuseDevices::IsFuse(dev_t dev, int fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [d, fuse] : known_) {
      if (d == dev) return fuse;
    }
  }
  constexpr decltype(statfs::f_type) kFuseMagic = 0x65735546;
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return -1;
  const bool fuse = fs.f_type == kFuseMagic;
  std::lock_guard<std::mutex> lock(mu_);
  known_.emplace_back(dev, fuse);
  return fuse;
}

bool ReplacedSince(const SourceEntry& e, const struct stat& st, int fd, FuseDevices* fuse) {
  if (!S_ISREG(st.st_mode) || st.st_dev != e.dev) return true;
  if (st.st_ino == e.ino) return false;
  return fuse->IsFuse(st.st_dev, fd) != 1 || CtimeNs(st) != e.ctime_ns;
}

std::string ShownPath(std::string_view path) { return path.empty() ? "." : std::string(path); }

std::string ChangedReason(const SourceEntry& e, const struct stat& st) {
  return fmt::format("changed while being packed (size {} -> {}, mtime {} -> {})", e.size,
                     st.st_size, e.mtime_ns, MtimeNs(st));
}

std::string StoredShardName(const StoredShards& shards, uint32_t shard) {
  if (shard < shards.paths.size()) return shards.paths[shard];
  return fmt::format("shard #{}", shard);
}

std::string StoredChangedReason(const StoredShards& shards, const StoredData& d,
                                std::string_view what) {
  return fmt::format("shard {}: changed since it was indexed: {}", StoredShardName(shards, d.shard),
                     what);
}

Status ReadStoredAt(const StoredShards& shards, const SourceEntry& e, uint64_t pos, char* buf,
                    size_t n) {
  const StoredData& d = *e.stored;
  const int fd = d.shard < shards.fds.size() ? shards.fds[d.shard] : -1;
  if (fd < 0) return Status::IoError(fmt::format("{}: not open", StoredShardName(shards, d.shard)));
  std::memset(buf, 0, n);
  const uint64_t end = pos + n;
  for (const index::Extent& r : d.ranges) {
    uint64_t from = std::max(pos, r.logical), to = std::min(end, r.logical + r.length);
    if (from >= to) continue;
    Status s = PreadExact(fd, buf + (from - pos), static_cast<size_t>(to - from),
                          r.physical + (from - r.logical));
    if (!s.ok()) return Status::IoError(StoredChangedReason(shards, d, s.message()));
  }
  return Status::Ok();
}

void HashZeros(XXH3_state_t* state, uint64_t n) {
  while (n > 0) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, kIoChunk));
    XXH3_64bits_update(state, kZeros, k);
    n -= k;
  }
}

int OpenBeneath(int dir_fd, const std::string& rel, int flags) {
  static std::atomic<bool> have_openat2{true};
  flags |= O_CLOEXEC | O_NOFOLLOW;
  for (int f : {flags | O_NOATIME, flags}) {
    int fd = -1;
    if (have_openat2.load(std::memory_order_relaxed)) {
      struct open_how how {};
      how.flags = static_cast<uint64_t>(f);
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
      fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, rel.c_str(), &how, sizeof how));
      if (fd < 0 && errno == ENOSYS) have_openat2.store(false);
    }
    if (!have_openat2.load(std::memory_order_relaxed)) fd = ::openat(dir_fd, rel.c_str(), f);
    // O_NOATIME is refused on files the caller does not own.
    if (fd >= 0 || errno != EPERM || !(f & O_NOATIME)) return fd;
  }
  return -1;
}

Result<uint64_t> HashFile(int fd, uint64_t size, std::string_view what, bool* short_read,
                          Progress* progress) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(h.get());
  *short_read = false;
  std::unique_ptr<char[]> buf(new char[kIoChunk]);
  uint64_t pos = 0;
  while (pos < size) {
    uint64_t data_end = size;
    off_t d = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (d < 0 && errno == ENXIO) {
      // No data from here on: a hole to the end, or the end of a file that
      // has become shorter than `size` since it was scanned.
      struct stat st;
      if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) < size) {
        *short_read = true;
        return XXH3_64bits_digest(h.get());
      }
    }
    if (d >= 0 || errno == ENXIO) {
      uint64_t data = d < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(d), size);
      if (data > pos) {
        HashZeros(h.get(), data - pos);
        if (progress) progress->Add(0, data - pos);
        pos = data;
        continue;
      }
      off_t hole = ::lseek(fd, static_cast<off_t>(pos), SEEK_HOLE);
      if (hole > 0) data_end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
    }
    while (pos < data_end) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(data_end - pos, kIoChunk));
      ssize_t n = ::pread(fd, buf.get(), len, static_cast<off_t>(pos));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, fmt::format("{}: read at byte {}", what, pos));
      }
      if (n == 0) {
        *short_read = true;
        return XXH3_64bits_digest(h.get());
      }
      XXH3_64bits_update(h.get(), buf.get(), static_cast<size_t>(n));
      pos += static_cast<uint64_t>(n);
      if (progress) progress->Add(0, static_cast<uint64_t>(n));
    }
  }
  return XXH3_64bits_digest(h.get());
}

Result<std::vector<std::string>> ReadPathList(const std::string& file) {
  std::ifstream in(file);
  if (!in) return Status::FromErrno(errno, fmt::format("--from-list {}", file));
  std::vector<std::string> paths;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Result<std::string> norm = index::NormalizeMemberPath(line);
    if (!norm.ok()) {
      return Status::InvalidArgument(
          fmt::format("--from-list {}: '{}': {}", file, line, norm.status().message()));
    }
    paths.push_back(std::move(norm).value());
  }
  if (in.bad()) return Status::IoError(fmt::format("--from-list {}: read failed", file));
  if (paths.empty()) return Status::InvalidArgument(fmt::format("--from-list {}: no paths", file));
  return paths;
}

Result<TreeScan> ScanTree(const std::string& root, const TreeScanOptions& options) {
  char* rp = ::realpath(root.c_str(), nullptr);
  if (!rp) return Status::FromErrno(errno, root);
  std::string real = rp;
  std::free(rp);
  UniqueFd fd(::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, root);
  std::unique_ptr<Progress> progress;
  if (!options.quiet) progress = std::make_unique<Progress>("scan", "dirs", 0, 0, false);
  TreeScanner scanner(options, fd.get(), real, progress.get());
  Result<TreeScan> r = scanner.Run();
  if (progress) progress->Stop();
  return r;
}
}  // namespace shardfs::pack
