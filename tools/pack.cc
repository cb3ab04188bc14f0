#include "tools/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"
#include "index/fingerprint.h"
#include "index/member_path.h"
#include "tools/tar_writer.h"
#include "tools/verify.h"

namespace shardfs::tools {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kNanos = 1000000000;
// Files up to this size are read whole by a reader thread; larger ones are
// opened by a reader and streamed by the writer in chunks.
constexpr uint64_t kSmallFile = 1 << 20;
constexpr size_t kChunk = 1 << 20;
// Bounds on what readers hold ahead of the writer.
constexpr uint64_t kMaxBytesAhead = 256ull << 20;
constexpr size_t kMaxFilesAhead = 1 << 15;  // Also the size of the slot ring.
constexpr size_t kMaxBigAhead = 32;          // Open fds of big files.

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * kNanos + st.st_mtim.tv_nsec;
}

std::string Join(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string s;
  s.reserve(dir.size() + 1 + name.size());
  s.append(dir).push_back('/');
  s.append(name);
  return s;
}

// How a path is shown in messages: the root as ".".
std::string Shown(std::string_view path) { return path.empty() ? "." : std::string(path); }

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

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// ---- Scanning ---------------------------------------------------------------

class TreeScanner {
 public:
  TreeScanner(const TreeScanOptions& options, int root_fd, std::string root_real,
              Progress* progress)
      : options_(options), root_fd_(root_fd), root_real_(std::move(root_real)),
        progress_(progress) {}

  Status LoadList() {
    if (options_.from_list.empty()) return Status::Ok();
    std::ifstream in(options_.from_list);
    if (!in) return Status::FromErrno(errno, fmt::format("--from-list {}", options_.from_list));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      Result<std::string> norm = index::NormalizeMemberPath(line);
      if (!norm.ok()) {
        return Status::InvalidArgument(fmt::format("--from-list {}: '{}': {}", options_.from_list,
                                                   line, norm.status().message()));
      }
      std::string p = std::move(norm).value();
      for (std::string_view up = p; !up.empty();) {
        up = index::ParentPath(up);
        above_listed_.emplace(up);
      }
      listed_.insert(std::move(p));
    }
    if (listed_.empty()) {
      return Status::InvalidArgument(fmt::format("--from-list {}: no paths", options_.from_list));
    }
    return Status::Ok();
  }

  Result<TreeScan> Run() {
    SHARDFS_RETURN_IF_ERROR(LoadList());
    struct stat st;
    if (::fstat(root_fd_, &st) != 0) return Status::FromErrno(errno, root_real_);
    Task root;
    FillFromStat(st, &root.entry);
    root.all = options_.from_list.empty() || listed_.count("");
    if (root.all && !options_.from_list.empty()) found_.insert("");
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
                        Shown(p), root_real_));
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
                                      Shown(e->path), std::strerror(errno)));
      return false;
    }
    std::string real = rp;
    std::free(rp);
    std::string rel;
    if (real == root_real_) {
      rel = "";
    } else if (root_real_ == "/") {
      rel = real.substr(1);
    } else if (real.size() > root_real_.size() && real.compare(0, root_real_.size(), root_real_) == 0 &&
               real[root_real_.size()] == '/') {
      rel = real.substr(root_real_.size() + 1);
    } else {
      warnings->push_back(
          fmt::format("{}: symlink kept: target {} is outside the source", Shown(e->path), real));
      return false;
    }
    struct stat st;
    if (::stat(real.c_str(), &st) != 0) {
      warnings->push_back(fmt::format("{}: symlink kept: {}", Shown(e->path), std::strerror(errno)));
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      bool loop = rel.empty();
      for (const std::string& c : parent.chain) {
        if (c == rel || (c.size() > rel.size() && c.compare(0, rel.size(), rel) == 0 &&
                         c[rel.size()] == '/')) {
          loop = true;
        }
      }
      if (loop) {
        warnings->push_back(fmt::format("{}: symlink kept: following it would loop",
                                        Shown(e->path)));
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
    Fd fd(OpenBeneath(root_fd_, dir_open, O_RDONLY | O_DIRECTORY));
    if (fd.fd < 0) {
      self.unreadable = fmt::format("open directory: {}", std::strerror(errno));
      out->push_back(std::move(self));
      return;
    }
    int dfd = ::dup(fd.fd);
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
      e.path = Join(self.path, name);
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
      if (!self.src.empty()) e.src = Join(self.src, name);
      struct stat st;
      if (::fstatat(fd.fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        e.unreadable = fmt::format("stat: {}", std::strerror(errno));
        out->push_back(std::move(e));
        continue;
      }
      FillFromStat(st, &e);
      if (e.kind == SourceKind::kSymlink) {
        Status s = ReadLinkAt(fd.fd, d->d_name, e.size, &e.link_target);
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
  std::unordered_set<std::string> listed_;
  std::unordered_set<std::string> above_listed_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;                 // Guarded by mu_.
  size_t active_ = 0;                      // Guarded by mu_.
  std::unordered_set<std::string> found_;  // Guarded by mu_.
};

// ---- Planning ---------------------------------------------------------------

constexpr uint32_t kNoMember = UINT32_MAX;

struct PlannedMember {
  uint32_t entry = 0;
  TarType type = TarType::kFile;
  uint32_t shard = 0;
  // Hard links: the member of the same shard holding the data.
  uint32_t leader = kNoMember;
  // Files that may have several names: the first member of the file, shared
  // by all its names (kNoMember for the others).
  uint32_t group = kNoMember;
  size_t read = 0;  // Regular files with data: position in the read order.
};

TarMember TarMemberOf(const SourceEntry& e, TarType type, std::string_view link) {
  TarMember m;
  m.path = e.path;
  m.type = type;
  m.mode = e.mode & 07777;
  m.uid = e.uid;
  m.gid = e.gid;
  m.mtime_ns = e.mtime_ns;
  m.size = type == TarType::kFile ? e.size : 0;
  m.link_target = link;
  return m;
}

// The part of a name that decides its sample: up to and including the first
// '.', the whole name when it has none. Two names agree up to their first
// '.' exactly when their groups are equal, and name = group + rest.
std::string_view SampleGroup(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot + 1);
}

// Samples: consecutive non-directory members of one directory whose names
// agree up to the first '.'.
bool SameSample(std::string_view a, std::string_view b) {
  return index::ParentPath(a) == index::ParentPath(b) &&
         SampleGroup(index::BaseName(a)) == SampleGroup(index::BaseName(b));
}

// Up to this many examples in a naming warning.
constexpr size_t kExamples = 3;

struct NameProblem {
  uint64_t count = 0;
  std::vector<std::string> examples;

  void Add(std::string example) {
    if (count++ < kExamples) examples.push_back(std::move(example));
  }
  void Report(std::string_view what, std::vector<std::string>* warnings) const {
    if (count == 0) return;
    warnings->push_back(fmt::format("{} {} (e.g. {}{})", count, what,
                                    fmt::join(examples, ", "), count > kExamples ? ", ..." : ""));
  }
};

// One warning per kind of name that a WebDataset reader of the shards will
// not group as the tree does. `members` are in pack order.
void WarnUngroupable(const TreeScan& scan, const std::vector<PlannedMember>& members,
                     std::vector<std::string>* warnings) {
  NameProblem no_dot, hidden, repeated;
  std::string_view sample_key;
  std::vector<std::string> exts;  // Lowercased, of the current key.
  bool sample_repeats = false;
  for (const PlannedMember& pm : members) {
    if (pm.type != TarType::kFile && pm.type != TarType::kHardlink) continue;
    const std::string& path = scan.entries[pm.entry].path;
    std::string_view name = index::BaseName(path);
    if (name.front() == '.') {
      hidden.Add(EscapePath(path));
    } else if (name.find('.') == std::string_view::npos) {
      no_dot.Add(EscapePath(path));
    }
    std::string_view key, ext;
    if (!WebDatasetKey(path, &key, &ext)) continue;
    if (key != sample_key) {
      sample_key = key;
      exts.clear();
      sample_repeats = false;
    }
    // WebDataset lowercases extensions before it looks for repeats.
    std::string lower(ext);
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    if (std::find(exts.begin(), exts.end(), lower) != exts.end()) {
      if (!sample_repeats) repeated.Add(EscapePath(path));
      sample_repeats = true;
    } else {
      exts.push_back(std::move(lower));
    }
  }
  no_dot.Report(
      "file(s) have no '.' in their name: WebDataset finds no sample key and skips them",
      warnings);
  hidden.Report(
      "file(s) have a name starting with '.': their sample key is empty (WebDataset makes "
      "all of a directory's such files one sample, or skips them)",
      warnings);
  repeated.Report(
      "sample(s) have two files whose extensions differ only in case: WebDataset lowercases "
      "extensions and sees a repeated one",
      warnings);
}

// ---- Reading ahead of the writer --------------------------------------------

enum class ReadResult : uint8_t { kOk, kUnreadable, kChanged };

struct Slot {
  // Set (release) by the reader once the rest is filled in; the rest belongs
  // to the reader until then and to the writer until Release.
  std::atomic<bool> ready{false};
  ReadResult result = ReadResult::kOk;
  std::string reason;
  std::unique_ptr<char[]> data;  // Small files: the content.
  int fd = -1;                   // Big files: open and checked.
  bool sparse = false;
  uint64_t xxh3 = 0;
  uint64_t cost = 0;
  bool big = false;
};

std::string ChangedReason(const SourceEntry& e, const struct stat& st) {
  return fmt::format("changed while being packed (size {} -> {}, mtime {} -> {})", e.size,
                     st.st_size, e.mtime_ns, MtimeNs(st));
}

// Reader threads load files (in write order, claimed in small batches) into a
// ring of slots ahead of the writer, within kMaxBytesAhead bytes,
// kMaxFilesAhead files and kMaxBigAhead open big files. The writer takes
// slots strictly in order. Locks are taken per batch, and to sleep or wake a
// sleeper; a slot's readiness and the writer's progress are atomics.
class ReadAhead {
 public:
  ReadAhead(const std::vector<SourceEntry>& entries, std::vector<uint32_t> order, int root_fd)
      : entries_(entries), order_(std::move(order)), root_fd_(root_fd), ring_(kMaxFilesAhead) {}

  ~ReadAhead() {
    Stop();
    for (Slot& s : ring_) {
      if (s.fd >= 0) ::close(s.fd);
    }
  }

  void Start(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Reader(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    readers_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // Readers only open (and close) the files from now on: the pack has failed
  // and goes on only to list every unreadable file.
  void CheckOnly() { check_only_.store(true); }

  // Waits until read `k` is loaded. REQUIRES: k is the writer's next read.
  Slot& Wait(size_t k) {
    Slot& s = ring_[k % kMaxFilesAhead];
    if (s.ready.load(std::memory_order_acquire)) return s;
    std::unique_lock<std::mutex> lock(mu_);
    // Release may have let sleeping readers be; one must claim k now.
    if (readers_waiting_.load() > 0) readers_cv_.notify_all();
    writer_waits_for_.store(k);
    writer_cv_.wait(lock, [&] { return s.ready.load(); });
    writer_waits_for_.store(kNobody);
    return s;
  }

  // The writer is done with read `k`; its slot may be reused.
  void Release(size_t k) {
    Slot& s = ring_[k % kMaxFilesAhead];
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
    s.data.reset();
    s.reason.clear();
    s.ready.store(false, std::memory_order_relaxed);
    bytes_ahead_.fetch_sub(s.cost);
    if (s.big) big_ahead_.fetch_sub(1);
    write_k_.store(k + 1);
    // Waking readers for every file costs more than it gains: every
    // kBatch files, or when the writer has to wait (see Wait).
    if ((k + 1) % kBatch == 0 && readers_waiting_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      readers_cv_.notify_all();
    }
  }

 private:
  static constexpr size_t kBatch = 16;
  static constexpr uint64_t kBatchBytes = 1 << 20;
  static constexpr size_t kNobody = SIZE_MAX;

  uint64_t Cost(size_t k) const {
    uint64_t size = entries_[order_[k]].size;
    return size <= kSmallFile ? size : kChunk;
  }

  // REQUIRES: mu_ held (next_ belongs to the readers).
  bool CanClaim(size_t k) const {
    size_t w = write_k_.load();
    if (k == w) return true;  // The writer needs it: always allowed.
    if (k >= w + kMaxFilesAhead) return false;
    bool big = entries_[order_[k]].size > kSmallFile;
    return bytes_ahead_.load() + Cost(k) <= kMaxBytesAhead &&
           (!big || big_ahead_.load() < kMaxBigAhead);
  }

  void Reader() {
    std::vector<size_t> batch;
    for (;;) {
      batch.clear();
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto can_go = [&] { return stop_ || next_ >= order_.size() || CanClaim(next_); };
        if (!can_go()) {
          readers_waiting_.fetch_add(1);
          readers_cv_.wait(lock, can_go);
          readers_waiting_.fetch_sub(1);
        }
        if (stop_ || next_ >= order_.size()) return;
        uint64_t bytes = 0;
        while (next_ < order_.size() && batch.size() < kBatch && bytes < kBatchBytes &&
               CanClaim(next_)) {
          size_t k = next_++;
          Slot& s = ring_[k % kMaxFilesAhead];
          s.cost = Cost(k);
          s.big = entries_[order_[k]].size > kSmallFile;
          bytes_ahead_.fetch_add(s.cost);
          if (s.big) big_ahead_.fetch_add(1);
          bytes += s.cost;
          batch.push_back(k);
        }
      }
      for (size_t k : batch) {
        Slot& s = ring_[k % kMaxFilesAhead];
        Load(entries_[order_[k]], &s);
        s.ready.store(true);
        if (writer_waits_for_.load() == k) {
          std::lock_guard<std::mutex> lock(mu_);
          writer_cv_.notify_one();
        }
      }
    }
  }

  void Load(const SourceEntry& e, Slot* s) const {
    s->result = ReadResult::kOk;
    auto fail = [&](ReadResult r, std::string reason) {
      s->result = r;
      s->reason = std::move(reason);
    };
    Fd fd(OpenBeneath(root_fd_, e.open_path(), O_RDONLY));
    if (fd.fd < 0) return fail(ReadResult::kUnreadable, fmt::format("open: {}", std::strerror(errno)));
    if (check_only_.load(std::memory_order_relaxed)) return;
    struct stat st;
    if (e.size > kSmallFile) {
      // Checked now and again by the writer once it has streamed the file.
      if (::fstat(fd.fd, &st) != 0) {
        return fail(ReadResult::kUnreadable, fmt::format("stat: {}", std::strerror(errno)));
      }
      if (!S_ISREG(st.st_mode) || st.st_dev != e.dev || st.st_ino != e.ino) {
        return fail(ReadResult::kChanged, "replaced by another file while being packed");
      }
      if (static_cast<uint64_t>(st.st_size) != e.size || MtimeNs(st) != e.mtime_ns) {
        return fail(ReadResult::kChanged, ChangedReason(e, st));
      }
      ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
      s->sparse = static_cast<uint64_t>(st.st_blocks) * 512 < e.size;
      s->fd = fd.fd;
      fd.fd = -1;
      return;
    }
    s->data.reset(new char[std::max<uint64_t>(e.size, 1)]);
    uint64_t got = 0;
    while (got < e.size) {
      ssize_t n = ::pread(fd.fd, s->data.get() + got, e.size - got, static_cast<off_t>(got));
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(ReadResult::kUnreadable,
                    fmt::format("read at byte {}: {}", got, std::strerror(errno)));
      }
      if (n == 0) break;
      got += static_cast<uint64_t>(n);
    }
    // One stat after the read tells whether this is the file the scan saw
    // and whether it changed since: a write moves the mtime.
    if (::fstat(fd.fd, &st) != 0) {
      return fail(ReadResult::kUnreadable, fmt::format("stat: {}", std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode) || st.st_dev != e.dev || st.st_ino != e.ino) {
      return fail(ReadResult::kChanged, "replaced by another file while being packed");
    }
    if (got != e.size || static_cast<uint64_t>(st.st_size) != e.size ||
        MtimeNs(st) != e.mtime_ns) {
      return fail(ReadResult::kChanged, ChangedReason(e, st));
    }
    s->xxh3 = XXH3_64bits(s->data.get(), e.size);
  }

  const std::vector<SourceEntry>& entries_;
  const std::vector<uint32_t> order_;  // Entry of each read, in write order.
  const int root_fd_;
  std::vector<Slot> ring_;
  std::vector<std::thread> threads_;
  std::atomic<bool> check_only_{false};

  std::atomic<size_t> write_k_{0};        // The writer's next read.
  std::atomic<uint64_t> bytes_ahead_{0};  // Cost of the claimed, unreleased reads.
  std::atomic<size_t> big_ahead_{0};
  std::atomic<int> readers_waiting_{0};
  std::atomic<size_t> writer_waits_for_{kNobody};

  std::mutex mu_;
  std::condition_variable readers_cv_;
  std::condition_variable writer_cv_;
  bool stop_ = false;  // Guarded by mu_.
  size_t next_ = 0;    // Next read to claim. Guarded by mu_.
};

const char kZeros[kChunk] = {};

Status SyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0) return Status::FromErrno(errno, dir);
  if (::fsync(fd.fd) != 0) return Status::FromErrno(errno, fmt::format("fsync {}", dir));
  return Status::Ok();
}

// ---- Writing ----------------------------------------------------------------

class ShardWriter {
 public:
  ShardWriter(const PackOptions& options, const ShardNamePattern& pattern, std::string out_dir,
              const TreeScan& scan, const std::vector<PlannedMember>& members,
              ReadAhead* reads, Progress* progress, PackReport* report, bool check_only)
      : options_(options), pattern_(pattern), out_dir_(std::move(out_dir)), scan_(scan),
        members_(members), reads_(reads), progress_(progress), report_(report),
        written_(members.size(), false), data_of_(members.size(), kNoMember),
        hash_(XXH3_createState(), &XXH3_freeState), check_only_(check_only) {
    if (check_only_) reads_->CheckOnly();
  }

  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Writes every member (or, check_only, writes nothing and only lists the
  // files that cannot be opened); on failure removes what it wrote.
  Status Run() {
    Status s = WriteAll();
    if (s.ok() && !report_->errors.empty()) {
      s = Status::InvalidArgument(
          fmt::format("{} entr{} cannot be packed", report_->errors.size(),
                      report_->errors.size() == 1 ? "y" : "ies"));
    }
    if (!s.ok()) RemoveOutput();
    return s;
  }

  index::IndexWriter& index() { return index_; }

 private:
  Status WriteAll() {
    for (size_t i = 0; i < members_.size(); ++i) {
      const PlannedMember& pm = members_[i];
      const SourceEntry& e = scan_.entries[pm.entry];
      if (check_only_) {
        if (pm.type == TarType::kFile) {
          Slot& s = reads_->Wait(pm.read);
          if (s.result == ReadResult::kUnreadable) {
            report_->errors.push_back(fmt::format("{}: {}", Shown(e.path), s.reason));
          }
          reads_->Release(pm.read);
        }
        continue;
      }
      if (fd_ < 0 || pm.shard != shard_) {
        if (fd_ >= 0) SHARDFS_RETURN_IF_ERROR(FinishShard());
        SHARDFS_RETURN_IF_ERROR(OpenShard(pm.shard));
      }
      switch (pm.type) {
        case TarType::kDir:
        case TarType::kSymlink:
          SHARDFS_RETURN_IF_ERROR(WriteNoData(pm, e, e.link_target));
          if (pm.type == TarType::kDir) {
            ++report_->dirs;
          } else {
            ++report_->symlinks;
          }
          break;
        case TarType::kHardlink: {
          const SourceEntry& leader = scan_.entries[members_[pm.leader].entry];
          if (!written_[pm.leader]) {
            report_->skipped.push_back(fmt::format(
                "{}: hard link to {}, which was left out", Shown(e.path), Shown(leader.path)));
            break;
          }
          SHARDFS_RETURN_IF_ERROR(WriteNoData(pm, e, leader.path));
          ++report_->hardlinks;
          break;
        }
        case TarType::kFile:
          SHARDFS_RETURN_IF_ERROR(WriteFile(i, pm, e));
          break;
      }
      // Big files count their bytes as they stream.
      progress_->Add(1, pm.type == TarType::kFile && e.size <= kSmallFile ? e.size : 0);
    }
    if (check_only_) return Status::Ok();
    SHARDFS_RETURN_IF_ERROR(FinishShard());
    return SyncDir(out_dir_);
  }

  Status OpenShard(uint32_t shard) {
    shard_ = shard;
    name_ = pattern_.Format(shard);
    path_ = out_dir_ + "/" + name_;
    tmp_ = path_ + ".tmp";
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::FromErrno(errno, fmt::format("create {}", tmp_));
    tar_ = std::make_unique<TarWriter>(fd_, name_);
    return Status::Ok();
  }

  Status FinishShard() {
    SHARDFS_RETURN_IF_ERROR(tar_->Finish());
    if (::fsync(fd_) != 0) return Status::FromErrno(errno, fmt::format("fsync {}", tmp_));
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, tmp_);
    index::ShardMeta meta;
    meta.size = static_cast<uint64_t>(st.st_size);
    meta.mtime_ns = MtimeNs(st);
    Result<uint64_t> fp = index::ShardFingerprint(fd_, meta.size);
    if (!fp.ok()) return fp.status().WithContext(tmp_);
    meta.fingerprint = *fp;
    meta.path = path_;
    ::close(fd_);
    fd_ = -1;
    tar_.reset();
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return Status::FromErrno(errno, fmt::format("rename {} to {}", tmp_, path_));
    }
    report_->shard_paths.push_back(path_);
    report_->shard_bytes += meta.size;
    ++report_->shards;
    index::ShardId id = index_.AddShard(std::move(meta));
    if (id.value != shard_) {
      return Status::Corruption(fmt::format("shard {}: registered as shard {}", shard_, id.value));
    }
    progress_->UnitDone();
    return Status::Ok();
  }

  void RemoveOutput() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
      ::unlink(tmp_.c_str());
    }
    for (const std::string& p : report_->shard_paths) ::unlink(p.c_str());
    report_->shard_paths.clear();
  }

  index::MemberEntry IndexMember(const PlannedMember& pm, const SourceEntry& e) const {
    index::MemberEntry m;
    m.path = e.path;
    m.mode = e.mode & 07777;
    m.uid = e.uid;
    m.gid = e.gid;
    m.mtime_ns = e.mtime_ns;
    m.shard = index::ShardId{pm.shard};
    switch (pm.type) {
      case TarType::kDir: m.type = index::EntryType::kDir; break;
      case TarType::kSymlink: m.type = index::EntryType::kSymlink; break;
      default: m.type = index::EntryType::kFile; break;
    }
    return m;
  }

  Status WriteNoData(const PlannedMember& pm, const SourceEntry& e, std::string_view link) {
    uint64_t data_offset;
    SHARDFS_RETURN_IF_ERROR(tar_->BeginMember(TarMemberOf(e, pm.type, link), &data_offset));
    SHARDFS_RETURN_IF_ERROR(tar_->EndMember());
    index::MemberEntry m = IndexMember(pm, e);
    m.link_target = std::string(link);
    if (pm.type == TarType::kHardlink) {
      // In the index every name links to the one whose data it uses, which
      // may lie in an earlier shard than the name this tar link names.
      m.is_hardlink = true;
      m.link_target = scan_.entries[members_[data_of_[pm.group]].entry].path;
    }
    index_.AddMember(std::move(m));
    return Status::Ok();
  }

  // An unreadable file: left out with --skip-unreadable, else the pack
  // fails, going on only to find the other unreadable files.
  void Unreadable(const SourceEntry& e, const std::string& reason) {
    std::string line = fmt::format("{}: {}", Shown(e.path), reason);
    if (options_.skip_unreadable) {
      report_->skipped.push_back(std::move(line));
      return;
    }
    report_->errors.push_back(std::move(line));
    check_only_ = true;
    reads_->CheckOnly();
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
      ::unlink(tmp_.c_str());
    }
  }

  Status Changed(const SourceEntry& e, const std::string& reason) {
    report_->errors.push_back(fmt::format("{}: {}", Shown(e.path), reason));
    return Status::Corruption("the source changed while being packed; pack it again when it is "
                              "not being written to");
  }

  Status WriteFile(size_t i, const PlannedMember& pm, const SourceEntry& e) {
    Slot& s = reads_->Wait(pm.read);
    struct Releaser {
      ReadAhead* r;
      size_t k;
      ~Releaser() { r->Release(k); }
    } releaser{reads_, pm.read};
    if (s.result == ReadResult::kChanged) return Changed(e, s.reason);
    if (s.result == ReadResult::kUnreadable) {
      Unreadable(e, s.reason);
      return Status::Ok();
    }
    uint64_t start = tar_->offset();
    uint64_t data_offset;
    SHARDFS_RETURN_IF_ERROR(
        tar_->BeginMember(TarMemberOf(e, TarType::kFile, {}), &data_offset));
    uint64_t xxh3 = s.xxh3;
    if (s.fd < 0) {
      SHARDFS_RETURN_IF_ERROR(tar_->Append(s.data.get(), e.size));
    } else {
      std::string reason;
      ReadResult r = Stream(e, s, &xxh3, &reason);
      if (r == ReadResult::kChanged) return Changed(e, reason);
      if (r == ReadResult::kUnreadable) {
        if (!write_status_.ok()) return write_status_;
        SHARDFS_RETURN_IF_ERROR(tar_->Rollback(start));
        Unreadable(e, reason);
        return Status::Ok();
      }
    }
    SHARDFS_RETURN_IF_ERROR(tar_->EndMember());
    written_[i] = true;
    report_->bytes += e.size;
    index::MemberEntry m = IndexMember(pm, e);
    if (pm.group != kNoMember && data_of_[pm.group] != kNoMember) {
      // A hard link's copy (its file's data is in an earlier shard): the
      // index keeps one inode, with the data first written.
      m.is_hardlink = true;
      m.link_target = scan_.entries[members_[data_of_[pm.group]].entry].path;
      index_.AddMember(std::move(m));
      ++report_->link_copies;
      return Status::Ok();
    }
    if (pm.group != kNoMember) data_of_[pm.group] = static_cast<uint32_t>(i);
    m.size = e.size;
    // An empty file has no data; index build records offset 0 for it too.
    m.offset = e.size ? data_offset : 0;
    m.has_checksum = true;
    m.xxh3 = xxh3;
    index_.AddMember(std::move(m));
    ++report_->files;
    return Status::Ok();
  }

  // Streams a big file into the shard. A write failure is kept in
  // write_status_ and reported as kUnreadable with it.
  ReadResult Stream(const SourceEntry& e, const Slot& s, uint64_t* xxh3, std::string* reason) {
    XXH3_64bits_reset(hash_.get());
    uint64_t pos = 0;
    const uint64_t size = e.size;
    auto write_failed = [&](Status st) {
      write_status_ = std::move(st);
      *reason = write_status_.message();
      return ReadResult::kUnreadable;
    };
    while (pos < size) {
      uint64_t data_end = size;
      if (s.sparse) {
        off_t d = ::lseek(s.fd, static_cast<off_t>(pos), SEEK_DATA);
        uint64_t data = d < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(d), size);
        if (d < 0 && errno != ENXIO) {
          *reason = fmt::format("seek at byte {}: {}", pos, std::strerror(errno));
          return ReadResult::kUnreadable;
        }
        if (data > pos) {  // A hole: zeros, not read, not written.
          for (uint64_t h = pos; h < data;) {
            size_t k = static_cast<size_t>(std::min<uint64_t>(data - h, kChunk));
            XXH3_64bits_update(hash_.get(), kZeros, k);
            h += k;
          }
          Status st = tar_->AppendZeros(data - pos);
          if (!st.ok()) return write_failed(std::move(st));
          progress_->Add(0, data - pos);
          pos = data;
          continue;
        }
        off_t hole = ::lseek(s.fd, static_cast<off_t>(pos), SEEK_HOLE);
        if (hole > 0) data_end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
      }
      while (pos < data_end) {
        char* space;
        size_t len;
        Status st = tar_->DataSpace(std::min<uint64_t>(data_end - pos, kChunk), &space, &len);
        if (!st.ok()) return write_failed(std::move(st));
        ssize_t n = ::pread(s.fd, space, len, static_cast<off_t>(pos));
        if (n < 0) {
          if (errno == EINTR) continue;
          *reason = fmt::format("read at byte {}: {}", pos, std::strerror(errno));
          return ReadResult::kUnreadable;
        }
        if (n == 0) {
          struct stat st2;
          if (::fstat(s.fd, &st2) != 0) st2.st_size = static_cast<off_t>(pos);
          *reason = ChangedReason(e, st2);
          return ReadResult::kChanged;
        }
        XXH3_64bits_update(hash_.get(), space, static_cast<size_t>(n));
        tar_->Commit(static_cast<size_t>(n));
        pos += static_cast<uint64_t>(n);
        progress_->Add(0, static_cast<uint64_t>(n));
      }
    }
    struct stat st;
    if (::fstat(s.fd, &st) != 0) {
      *reason = fmt::format("stat: {}", std::strerror(errno));
      return ReadResult::kUnreadable;
    }
    if (static_cast<uint64_t>(st.st_size) != size || MtimeNs(st) != e.mtime_ns) {
      *reason = ChangedReason(e, st);
      return ReadResult::kChanged;
    }
    *xxh3 = XXH3_64bits_digest(hash_.get());
    return ReadResult::kOk;
  }

  const PackOptions& options_;
  const ShardNamePattern& pattern_;
  const std::string out_dir_;
  const TreeScan& scan_;
  const std::vector<PlannedMember>& members_;
  ReadAhead* const reads_;
  Progress* const progress_;
  PackReport* const report_;
  std::vector<bool> written_;  // Members whose data is in a shard.
  // Hard-link groups (by first member): the member whose data the index uses.
  std::vector<uint32_t> data_of_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_;
  index::IndexWriter index_;
  bool check_only_;
  Status write_status_;

  uint32_t shard_ = 0;
  int fd_ = -1;
  std::string name_, path_, tmp_;
  std::unique_ptr<TarWriter> tar_;
};

// What an earlier pack into `out_dir` with this pattern may have left: files
// named like a shard or NAME.tmp (`files`, whoever wrote them) and
// unpublished index directories (`index_tmps`). A missing `out_dir` holds
// nothing.
Status ListLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                     std::vector<fs::path>* files, std::vector<fs::path>* index_tmps) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out_dir, ec))) return Status::Ok();
  for (fs::directory_iterator de(out_dir, ec); !ec && de != fs::directory_iterator();
       de.increment(ec)) {
    std::string name = de->path().filename().string();
    std::error_code type_ec;
    if (pattern.Matches(name, true)) {
      files->push_back(de->path());
    } else if (name.rfind("index.tmp-", 0) == 0 && de->is_directory(type_ec)) {
      index_tmps->push_back(de->path());
    }
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", out_dir, ec.message()));
  std::sort(files->begin(), files->end());
  std::sort(index_tmps->begin(), index_tmps->end());
  return Status::Ok();
}

// Without --force: AlreadyExists naming the first file in `out_dir` that
// has a shard's name. Adds a warning per index.tmp-* directory to
// `warnings` if not null.
Status RefuseLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                       const std::string& out_shown, std::vector<std::string>* warnings) {
  std::vector<fs::path> taken, index_tmps;
  SHARDFS_RETURN_IF_ERROR(ListLeftovers(out_dir, pattern, &taken, &index_tmps));
  if (!taken.empty()) {
    std::string more =
        taken.size() > 1 ? fmt::format(" (and {} more such files)", taken.size() - 1) : "";
    return Status::AlreadyExists(fmt::format(
        "{}{}: already exists and was not written by this pack{}; pack replaces a file named "
        "like a shard only with --force (or choose another --out or --name)",
        out_shown, taken.front().filename().string(), more));
  }
  if (warnings) {
    for (const fs::path& p : index_tmps) {
      warnings->push_back(fmt::format(
          "{}{}: left by an interrupted index publish; kept (--force removes it)", out_shown,
          p.filename().string()));
    }
  }
  return Status::Ok();
}

// --force: removes the old index and every leftover (see ListLeftovers).
Status CleanOutput(const std::string& out_dir, const ShardNamePattern& pattern,
                   const std::string& index_path) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(index_path, ec))) {
    fs::remove_all(index_path, ec);
    if (ec) return Status::IoError(fmt::format("remove {}: {}", index_path, ec.message()));
  }
  std::vector<fs::path> stale, index_tmps;
  SHARDFS_RETURN_IF_ERROR(ListLeftovers(out_dir, pattern, &stale, &index_tmps));
  stale.insert(stale.end(), index_tmps.begin(), index_tmps.end());
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) return Status::IoError(fmt::format("remove {}: {}", p.string(), ec.message()));
  }
  return Status::Ok();
}

}  // namespace

// ---- Public helpers -----------------------------------------------------------

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
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(),
                                                             &XXH3_freeState);
  XXH3_64bits_reset(h.get());
  *short_read = false;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  uint64_t pos = 0;
  while (pos < size) {
    uint64_t data_end = size;
    off_t d = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
    if (d >= 0 || errno == ENXIO) {
      uint64_t data = d < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(d), size);
      if (data > pos) {
        for (uint64_t p = pos; p < data;) {
          size_t k = static_cast<size_t>(std::min<uint64_t>(data - p, kChunk));
          XXH3_64bits_update(h.get(), kZeros, k);
          p += k;
        }
        if (progress) progress->Add(0, data - pos);
        pos = data;
        continue;
      }
      off_t hole = ::lseek(fd, static_cast<off_t>(pos), SEEK_HOLE);
      if (hole > 0) data_end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
    }
    while (pos < data_end) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(data_end - pos, kChunk));
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

Result<TreeScan> ScanTree(const std::string& root, const TreeScanOptions& options) {
  char* rp = ::realpath(root.c_str(), nullptr);
  if (!rp) return Status::FromErrno(errno, root);
  std::string real = rp;
  std::free(rp);
  Fd fd(::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0) return Status::FromErrno(errno, root);
  std::unique_ptr<Progress> progress;
  if (!options.quiet) progress = std::make_unique<Progress>("scan", "dirs", 0, 0, false);
  TreeScanner scanner(options, fd.fd, real, progress.get());
  Result<TreeScan> r = scanner.Run();
  if (progress) progress->Stop();
  return r;
}

bool WebDatasetKey(std::string_view path, std::string_view* key, std::string_view* ext) {
  size_t slash = path.rfind('/');
  size_t name_at = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', name_at);
  if (dot == std::string_view::npos) return false;
  if (dot > name_at) {
    *key = path.substr(0, dot);
    *ext = path.substr(dot + 1);
    return true;
  }
  // A leading '.': the regex's [^.]+ must then end with the '/' before it,
  // so it takes the parent's name, which must exist and have no '.'.
  if (name_at == 0) return false;
  size_t parent_at = path.rfind('/', name_at - 2);
  parent_at = parent_at == std::string_view::npos ? 0 : parent_at + 1;
  std::string_view parent = path.substr(parent_at, name_at - 1 - parent_at);
  if (parent.empty() || parent.find('.') != std::string_view::npos) return false;
  *key = path.substr(0, name_at);
  *ext = path.substr(name_at + 1);
  return true;
}

bool PackOrderLess(const SourceEntry& a, const SourceEntry& b) {
  std::string_view ra = a.path, rb = b.path;
  for (;;) {
    if (ra.empty()) return !rb.empty();  // `a` is an ancestor of `b`.
    if (rb.empty()) return false;
    size_t sa = ra.find('/'), sb = rb.find('/');
    std::string_view ca = ra.substr(0, sa), cb = rb.substr(0, sb);
    if (ca == cb) {
      ra = sa == std::string_view::npos ? std::string_view() : ra.substr(sa + 1);
      rb = sb == std::string_view::npos ? std::string_view() : rb.substr(sb + 1);
      continue;
    }
    // Siblings: by sample group, then files before directories, then the
    // rest of the name.
    std::string_view ga = SampleGroup(ca), gb = SampleGroup(cb);
    if (ga != gb) return ga < gb;
    bool dir_a = sa != std::string_view::npos || a.kind == SourceKind::kDir;
    bool dir_b = sb != std::string_view::npos || b.kind == SourceKind::kDir;
    if (dir_a != dir_b) return dir_b;
    return ca.substr(ga.size()) < cb.substr(gb.size());
  }
}

std::string ShardNamePattern::Format(uint64_t n) const {
  return zero_pad ? fmt::format("{}{:0{}}{}", prefix, n, width, suffix)
                  : fmt::format("{}{:>{}}{}", prefix, n, width, suffix);
}

bool ShardNamePattern::Matches(std::string_view name, bool or_tmp) const {
  auto exact = [&](std::string_view s) {
    if (s.size() <= prefix.size() + suffix.size()) return false;
    if (s.substr(0, prefix.size()) != prefix || s.substr(s.size() - suffix.size()) != suffix) {
      return false;
    }
    std::string_view mid = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
    size_t first = mid.find_first_not_of(' ');
    if (first == std::string_view::npos || mid.size() - first > 19) return false;
    uint64_t n = 0;
    for (char c : mid.substr(first)) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    return Format(n) == s;
  };
  if (exact(name)) return true;
  constexpr std::string_view kTmp = ".tmp";
  return or_tmp && name.size() > kTmp.size() && name.substr(name.size() - kTmp.size()) == kTmp &&
         exact(name.substr(0, name.size() - kTmp.size()));
}

Result<ShardNamePattern> ParseShardName(std::string_view text) {
  ShardNamePattern p;
  int conversions = 0;
  std::string* part = &p.prefix;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("--name '{}': {}", text, why));
  };
  if (text.find('/') != std::string_view::npos) return bad("must not contain '/'");
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      part->push_back(text[i]);
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '%') {
      part->push_back('%');
      ++i;
      continue;
    }
    size_t j = i + 1;
    if (j < text.size() && text[j] == '0') {
      p.zero_pad = true;
      ++j;
    }
    int width = 0;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') {
      width = width * 10 + (text[j] - '0');
      if (width > 40) return bad("field width too large");
      ++j;
    }
    if (j >= text.size() || (text[j] != 'd' && text[j] != 'u' && text[j] != 'i')) {
      return bad("expected one %d-style conversion such as %06d");
    }
    p.width = width;
    ++conversions;
    part = &p.suffix;
    i = j;
  }
  if (conversions != 1) return bad("needs exactly one %d-style conversion such as %06d");
  return p;
}

// ---- Pack -------------------------------------------------------------------

Status Pack(const PackOptions& options, PackReport* report) {
  const auto start = std::chrono::steady_clock::now();
  *report = PackReport{};
  Result<ShardNamePattern> pattern = ParseShardName(options.name);
  if (!pattern.ok()) return pattern.status();
  if (options.shard_size < kTarBlock + kTarTrailer) {
    return Status::InvalidArgument("--shard-size must be at least 1536 bytes");
  }

  // Paths: the source must be a directory and must not hold the output.
  char* rp = ::realpath(options.src.c_str(), nullptr);
  if (!rp) return Status::FromErrno(errno, fmt::format("source {}", options.src));
  std::string src_real = rp;
  std::free(rp);
  struct stat st;
  if (::stat(src_real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("source {}: not a directory", options.src));
  }
  std::error_code ec;
  fs::path out_abs = fs::absolute(options.out, ec);
  std::string out_real = ec ? std::string() : fs::weakly_canonical(out_abs, ec).string();
  if (ec) return Status::IoError(fmt::format("output {}: {}", options.out, ec.message()));
  while (out_real.size() > 1 && out_real.back() == '/') out_real.pop_back();
  if (out_real == src_real ||
      (out_real.rfind(src_real == "/" ? "/" : src_real + "/", 0) == 0)) {
    return Status::InvalidArgument(fmt::format(
        "output {} lies inside the source {}: the pack would read its own shards", options.out,
        options.src));
  }
  const std::string out_shown = options.out + (options.out.ends_with('/') ? "" : "/");
  const std::string index_path = out_real + "/index";
  report->index_path = out_shown + "index";
  if (fs::exists(fs::symlink_status(index_path, ec)) && !options.force) {
    return Status::AlreadyExists(
        fmt::format("{}: already exists (use --force to pack again)", report->index_path));
  }
  // Nothing but what this run writes is replaced or removed without --force;
  // a shard name taken by any file (an interrupted pack's too) stops the
  // pack here, before anything is written.
  if (!options.force) {
    SHARDFS_RETURN_IF_ERROR(RefuseLeftovers(out_real, *pattern, out_shown, &report->warnings));
  }
  int jobs = options.jobs > 0
                 ? options.jobs
                 : std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency()));

  // 1. Scan.
  TreeScanOptions so;
  so.excludes = options.excludes;
  so.from_list = options.from_list;
  so.follow_symlinks = options.follow_symlinks;
  so.jobs = jobs;
  so.quiet = options.quiet;
  Result<TreeScan> scanned = ScanTree(src_real, so);
  if (!scanned.ok()) return scanned.status();
  const TreeScan& scan = *scanned;
  report->warnings.insert(report->warnings.end(), scan.warnings.begin(), scan.warnings.end());

  // 2. Members in pack order: what is left out, hard links.
  std::vector<uint32_t> order(scan.entries.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return PackOrderLess(scan.entries[a], scan.entries[b]);
  });
  std::vector<PlannedMember> members;
  members.reserve(scan.entries.size());
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, uint32_t>> groups;  // dev -> ino -> member
  for (uint32_t i : order) {
    const SourceEntry& e = scan.entries[i];
    if (!e.unreadable.empty()) {
      std::string line = fmt::format("{}: {}", Shown(e.path), e.unreadable);
      (options.skip_unreadable ? report->skipped : report->errors).push_back(std::move(line));
      continue;
    }
    if (e.kind == SourceKind::kSpecial) {
      if (options.skip_special) {
        report->skipped.push_back(fmt::format("{}: {}", Shown(e.path), e.special));
      } else {
        report->errors.push_back(fmt::format(
            "{}: {} cannot be packed (use --skip-special to leave it out)", Shown(e.path),
            e.special));
      }
      continue;
    }
    PlannedMember pm;
    pm.entry = i;
    switch (e.kind) {
      case SourceKind::kDir: pm.type = TarType::kDir; break;
      case SourceKind::kSymlink: pm.type = TarType::kSymlink; break;
      default: {
        pm.type = TarType::kFile;
        // A file reached through a followed symlink may be one already seen.
        if (e.nlink > 1 || options.follow_symlinks) {
          auto [it, fresh] = groups[e.dev].emplace(e.ino, static_cast<uint32_t>(members.size()));
          pm.group = it->second;
          if (!fresh) pm.type = TarType::kHardlink;  // Until the shards are cut.
        }
      }
    }
    members.push_back(pm);
  }
  groups.clear();
  order.clear();
  order.shrink_to_fit();
  WarnUngroupable(scan, members, &report->warnings);

  // The members read, in write order: regular members (a hard link's copy
  // included).
  std::vector<uint32_t> read_order;
  uint64_t total_bytes = 0;
  auto plan_reads = [&] {
    for (PlannedMember& pm : members) {
      if (pm.type != TarType::kFile) continue;
      pm.read = read_order.size();
      read_order.push_back(pm.entry);
      total_bytes += scan.entries[pm.entry].size;
    }
  };
  Fd root(::open(src_real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.fd < 0) return Status::FromErrno(errno, options.src);
  if (!report->errors.empty()) {
    // The pack fails; open every file (writing nothing) so that the
    // unreadable ones are listed too, not only what the scan found.
    plan_reads();
    ReadAhead reads(scan.entries, std::move(read_order), root.fd);
    Progress progress("pack: check", "shards", 0, 0, true);
    ShardWriter checker(options, *pattern, out_real, scan, members, &reads, &progress, report,
                        /*check_only=*/true);
    reads.Start(jobs);
    Status s = checker.Run();
    reads.Stop();
    return s.ok() ? Status::InvalidArgument("cannot pack") : s;
  }

  // 3. Shards: whole samples, cut before one that would not fit. A hard
  // link stays a link only to a name of its file in the same shard; the
  // first name of the file in a later shard becomes a regular member with
  // the data (a copy), so that every shard extracts alone.
  std::vector<uint32_t> holder(members.size(), kNoMember);  // group -> member with data in its shard.
  std::vector<std::pair<uint32_t, uint32_t>> sample_holders;  // group -> member, inside a sample.
  // Bytes of members [i, j) in shard `shard`; with `commit`, also fixes
  // their shard, type and link leader.
  auto place = [&](size_t i, size_t j, uint32_t shard, bool commit) {
    sample_holders.clear();
    uint64_t bytes = 0;
    for (size_t k = i; k < j; ++k) {
      PlannedMember& pm = members[k];
      const SourceEntry& e = scan.entries[pm.entry];
      TarType type = pm.type;
      uint32_t leader = kNoMember;
      if (pm.group != kNoMember) {
        uint32_t h = holder[pm.group];
        for (const auto& [g, m] : sample_holders) {
          if (g == pm.group) h = m;
        }
        bool here = h != kNoMember && (h >= i ? true : members[h].shard == shard);
        if (here && k != pm.group) {
          type = TarType::kHardlink;
          leader = h;
        } else {
          type = TarType::kFile;
          sample_holders.emplace_back(pm.group, static_cast<uint32_t>(k));
        }
      }
      std::string_view link = type == TarType::kHardlink
                                  ? std::string_view(scan.entries[members[leader].entry].path)
                                  : std::string_view(e.link_target);
      bytes += TarMemberBytes(TarMemberOf(e, type, link));
      if (commit) {
        pm.shard = shard;
        pm.type = type;
        pm.leader = leader;
      }
    }
    if (commit) {
      for (const auto& [g, m] : sample_holders) holder[g] = m;
    }
    return bytes;
  };
  uint32_t shard = 0;
  uint64_t shard_bytes = 0, shard_count = 0;
  for (size_t i = 0; i < members.size();) {
    size_t j = i + 1;
    if (members[i].type != TarType::kDir) {
      const std::string& first = scan.entries[members[i].entry].path;
      while (j < members.size() && members[j].type != TarType::kDir &&
             SameSample(first, scan.entries[members[j].entry].path)) {
        ++j;
      }
    }
    uint64_t bytes = place(i, j, shard, false);
    uint64_t count = j - i;
    if (shard_count > 0 &&
        (shard_bytes + bytes + kTarTrailer > options.shard_size ||
         (options.max_files > 0 && shard_count + count > options.max_files))) {
      ++shard;
      shard_bytes = shard_count = 0;
    }
    shard_bytes += place(i, j, shard, true);
    shard_count += count;
    i = j;
  }
  const uint32_t shard_total = shard + 1;
  holder.clear();
  holder.shrink_to_fit();
  plan_reads();

  // 4. Output directory: created, then cleaned of an earlier pack's
  // leftovers with --force; without, checked again (the scan took a while).
  if (!options.force) {
    SHARDFS_RETURN_IF_ERROR(RefuseLeftovers(out_real, *pattern, out_shown, nullptr));
  }
  fs::create_directories(out_real, ec);
  if (ec) return Status::IoError(fmt::format("create {}: {}", options.out, ec.message()));
  if (options.force) SHARDFS_RETURN_IF_ERROR(CleanOutput(out_real, *pattern, index_path));

  // 5. Read and write.
  ReadAhead reads(scan.entries, std::move(read_order), root.fd);
  Progress progress("pack", "shards", shard_total, total_bytes, options.quiet);
  ShardWriter writer(options, *pattern, out_real, scan, members, &reads, &progress, report,
                     /*check_only=*/false);
  reads.Start(jobs);
  Status s = writer.Run();
  reads.Stop();
  progress.Stop();
  if (!s.ok()) return s;

  // 6. The index, last.
  index::WriteOptions wo;
  wo.force = options.force;
  wo.created_by = "shardfs pack";
  wo.build_options = fmt::format(
      "checksum=xxh3 shard_size={} max_files={} name={} excludes={} from_list={} "
      "skip_unreadable={} skip_special={} follow_symlinks={}",
      options.shard_size, options.max_files, options.name, fmt::join(options.excludes, ","),
      options.from_list.empty() ? "no" : "yes", options.skip_unreadable, options.skip_special,
      options.follow_symlinks);
  Result<index::WriteStats> stats = writer.index().Finish(index_path, wo);
  if (!stats.ok()) {
    for (const std::string& p : report->shard_paths) ::unlink(p.c_str());
    return stats.status();
  }
  report->index_stats = std::move(stats).value();
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace shardfs::tools
