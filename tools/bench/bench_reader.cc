// bench_reader: the compiled client of tools/bench/shardfs_bench.py. It does
// the measured work (readdir walk, lstat of a file list, open/read/close of a
// file list) so the timings are of the filesystem, not of Python.
//
//   bench_reader walk [--root DIR]
//   bench_reader lstat FILELIST [--root DIR] [--procs N]
//   bench_reader read FILELIST [--root DIR] [--procs N] [--buffer BYTES]
//   bench_reader lstat-latency FILELIST [--root DIR]
//   bench_reader read-latency FILELIST [--root DIR] [--buffer BYTES]
//
// FILELIST holds one path a line (relative to --root, or as given without
// it). With --procs N the list is split round-robin: process i takes entries
// i, i+N, i+2N, ... The clock starts after every process is forked and ready
// and stops when the last one is done.
//
// Prints one JSON object on stdout:
//   {"mode":..., "procs":N, "files":F, "dirs":D, "bytes":B, "seconds":S,
//    "checksum":"<16 hex>", "errors":E, "first_error":"..."}
// read:  bytes = content read; checksum = sum over files of XXH3-64(content)
//        mod 2^64, which does not depend on the order or the split.
// lstat: bytes = sum of st_size; checksum = sum of XXH3-64(path) + st_size.
// walk:  files = non-directories seen; checksum = sum of XXH3-64(relative
//        path) of every entry; stat_fallbacks counts entries whose d_type was
//        unknown and needed an lstat.
// lstat-latency: lstat of each listed path in one process, each call timed on
//        its own; adds "latency_us":{"p50","p90","p99","p999","max","mean"}
//        (nearest-rank percentiles over the calls that succeeded).
// read-latency: as read in one process, each file's open + read + close timed
//        on its own; adds "latency_us" as lstat-latency does.
// Exit status: 0 when every entry succeeded, 1 when some failed, 2 on usage.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/io.h"

namespace shardfs::bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// What one process (or the sum of all) did.
struct Tally {
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  uint64_t errors = 0;
  uint64_t stat_fallbacks = 0;
  char first_error[240] = {};

  void Fail(const std::string& what, int err) {
    if (errors++ == 0) {
      std::snprintf(first_error, sizeof(first_error), "%s: %s", what.c_str(), std::strerror(err));
    }
  }
  void Add(const Tally& o) {
    files += o.files;
    dirs += o.dirs;
    bytes += o.bytes;
    checksum += o.checksum;  // Wraps: the sum is mod 2^64 by definition.
    stat_fallbacks += o.stat_fallbacks;
    if (errors == 0 && o.errors != 0) std::memcpy(first_error, o.first_error, sizeof(first_error));
    errors += o.errors;
  }
};

struct Args {
  std::string mode;
  std::string list;
  std::string root;
  int procs = 1;
  size_t buffer = 256 * 1024;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "bench_reader: %s\n"
               "usage: bench_reader walk [--root DIR]\n"
               "       bench_reader lstat FILELIST [--root DIR] [--procs N]\n"
               "       bench_reader read FILELIST [--root DIR] [--procs N] [--buffer BYTES]\n"
               "       bench_reader lstat-latency FILELIST [--root DIR]\n"
               "       bench_reader read-latency FILELIST [--root DIR] [--buffer BYTES]\n",
               why);
  return kExitUsage;
}

uint64_t HashPath(const std::string& p) { return XXH3_64bits(p.data(), p.size()); }

// Reads every file of `paths` whose position is `first` mod `step`.
void ReadFiles(int dirfd, const std::vector<std::string>& paths, size_t first, size_t step,
               size_t buffer_bytes, Tally* t) {
  std::unique_ptr<char[]> buf(new char[buffer_bytes]);
  XXH3_state_t* state = XXH3_createState();
  for (size_t i = first; i < paths.size(); i += step) {
    const std::string& p = paths[i];
    int fd = ::openat(dirfd, p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      t->Fail("open " + p, errno);
      continue;
    }
    XXH3_64bits_reset(state);
    bool ok = true;
    for (;;) {
      ssize_t n = ::read(fd, buf.get(), buffer_bytes);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        t->Fail("read " + p, errno);
        ok = false;
        break;
      }
      XXH3_64bits_update(state, buf.get(), static_cast<size_t>(n));
      t->bytes += static_cast<uint64_t>(n);
    }
    ::close(fd);
    if (!ok) continue;
    t->checksum += XXH3_64bits_digest(state);
    ++t->files;
  }
  XXH3_freeState(state);
}

void LstatFiles(int dirfd, const std::vector<std::string>& paths, size_t first, size_t step,
                Tally* t) {
  for (size_t i = first; i < paths.size(); i += step) {
    const std::string& p = paths[i];
    struct stat st;
    if (::fstatat(dirfd, p.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      t->Fail("lstat " + p, errno);
      continue;
    }
    ++t->files;
    t->bytes += static_cast<uint64_t>(st.st_size);
    t->checksum += HashPath(p) + static_cast<uint64_t>(st.st_size);
  }
}

// LstatFiles with a clock around every call: the latency of one LOOKUP (or
// one dentry-cache hit) as a caller sees it. Appends nanoseconds per success.
void LstatLatency(int dirfd, const std::vector<std::string>& paths, Tally* t,
                  std::vector<uint64_t>* nanos) {
  nanos->reserve(paths.size());
  for (const std::string& p : paths) {
    struct stat st;
    auto start = std::chrono::steady_clock::now();
    int rc = ::fstatat(dirfd, p.c_str(), &st, AT_SYMLINK_NOFOLLOW);
    auto end = std::chrono::steady_clock::now();
    if (rc != 0) {
      t->Fail("lstat " + p, errno);
      continue;
    }
    nanos->push_back(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()));
    ++t->files;
    t->bytes += static_cast<uint64_t>(st.st_size);
    t->checksum += HashPath(p) + static_cast<uint64_t>(st.st_size);
  }
}

// Reads each file of `paths` whole (open, read, close), each timed on its own.
void ReadLatency(int dirfd, const std::vector<std::string>& paths, size_t buffer_bytes, Tally* t,
                 std::vector<uint64_t>* nanos) {
  nanos->reserve(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const uint64_t files = t->files;
    auto start = std::chrono::steady_clock::now();
    ReadFiles(dirfd, paths, i, paths.size(), buffer_bytes, t);  // paths[i] alone.
    auto end = std::chrono::steady_clock::now();
    if (t->files == files) continue;  // Failed: counted by ReadFiles.
    nanos->push_back(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()));
  }
}

// Nearest-rank percentile q (0..1] of sorted `v`, in microseconds; 0 if empty.
double PercentileUs(const std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]) / 1e3;
}

// Recursive readdir below the directory open at `fd` (which it closes).
// `rel` is the directory's path relative to the walk root, "" for the root.
void Walk(int fd, const std::string& rel, Tally* t) {
  DIR* d = ::fdopendir(fd);
  if (!d) {
    t->Fail("opendir " + (rel.empty() ? "." : rel), errno);
    ::close(fd);
    return;
  }
  ++t->dirs;
  for (;;) {
    errno = 0;
    dirent* e = ::readdir(d);
    if (!e) {
      if (errno != 0) t->Fail("readdir " + (rel.empty() ? "." : rel), errno);
      break;
    }
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    std::string child = rel.empty() ? std::string(e->d_name) : rel + "/" + e->d_name;
    t->checksum += HashPath(child);
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st;
      ++t->stat_fallbacks;
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        t->Fail("lstat " + child, errno);
        continue;
      }
      type = S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
    }
    if (type != DT_DIR) {
      ++t->files;
      continue;
    }
    int cfd = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cfd < 0) {
      t->Fail("open " + child, errno);
      continue;
    }
    Walk(cfd, child, t);
  }
  ::closedir(d);
}

bool LoadList(const std::string& path, std::vector<std::string>* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out->push_back(std::move(line));
  }
  return true;
}

// Runs `work(i, &tally)` in `procs` forked processes. Each child waits at a
// start gate (a pipe the parent closes) so forking is not timed; each sends
// its Tally back through its own pipe. Returns false if a child died.
template <typename Work>
bool RunForked(int procs, const Work& work, Tally* total, double* seconds) {
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return false;
  std::vector<pid_t> pids;
  std::vector<int> results;
  for (int i = 0; i < procs; ++i) {
    int res[2];
    if (::pipe2(res, O_CLOEXEC) != 0) return false;
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      ::close(gate[1]);
      ::close(res[0]);
      char c;
      while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }
      Tally t;
      work(i, &t);
      _exit(shardfs::WriteFully(res[1], &t, sizeof(t)) ? 0 : 1);
    }
    ::close(res[1]);
    pids.push_back(pid);
    results.push_back(res[0]);
  }
  ::close(gate[0]);
  auto start = std::chrono::steady_clock::now();
  ::close(gate[1]);  // Everyone starts.
  bool ok = true;
  for (int i = 0; i < procs; ++i) {
    Tally t;
    if (shardfs::ReadFully(results[i], &t, sizeof(t))) {
      total->Add(t);
    } else {
      ok = false;
    }
    ::close(results[i]);
  }
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = false;
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ok;
}

void PrintJsonString(const char* s) {
  std::putchar('"');
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p; ++p) {
    if (*p == '"' || *p == '\\') {
      std::printf("\\%c", *p);
    } else if (*p < 0x20 || *p >= 0x7f) {
      std::printf("\\u%04x", *p);  // Paths here are ASCII; keep the output valid JSON anyway.
    } else {
      std::putchar(*p);
    }
  }
  std::putchar('"');
}

bool IsLatencyMode(const Args& a) { return a.mode == "lstat-latency" || a.mode == "read-latency"; }

// Parses argv into *a. Returns kExitOk, or kExitUsage after saying why on stderr.
int ParseArgs(int argc, char** argv, Args* a) {
  if (argc < 2) return Usage("missing mode");
  a->mode = argv[1];
  const bool latency = IsLatencyMode(*a);
  if (a->mode != "walk" && a->mode != "lstat" && a->mode != "read" && !latency) {
    return Usage("unknown mode");
  }
  std::vector<std::string> positional;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        Usage((std::string(name) + " needs a value").c_str());
        std::exit(kExitUsage);
      }
      return argv[++i];
    };
    if (arg == "--root") {
      a->root = value("--root");
    } else if (arg == "--procs") {
      a->procs = std::atoi(value("--procs"));
      if (a->procs < 1 || a->procs > 256) return Usage("--procs must be 1..256");
    } else if (arg == "--buffer") {
      long long b = std::atoll(value("--buffer"));
      if (b < 512 || b > (64ll << 20)) return Usage("--buffer must be 512..64MiB");
      a->buffer = static_cast<size_t>(b);
    } else if (!arg.empty() && arg[0] == '-') {
      return Usage(("unknown option " + arg).c_str());
    } else {
      positional.push_back(arg);
    }
  }
  if (a->mode == "walk") {
    if (!positional.empty()) {
      if (positional.size() > 1 || !a->root.empty()) return Usage("walk takes one root");
      a->root = positional[0];
    }
    if (a->procs != 1) return Usage("walk runs in one process");
  } else {
    if (latency && a->procs != 1) {
      return Usage((a->mode + " runs in one process").c_str());
    }
    if (positional.size() != 1) return Usage("expected one FILELIST");
    a->list = positional[0];
  }
  return kExitOk;
}

// What one run measured: the tally, the wall time, and the per-call latencies of the latency
// modes. ok is false when a worker process failed.
struct Measured {
  Tally total;
  double seconds = 0;
  bool ok = true;
  std::vector<uint64_t> nanos;
};

// Runs a.mode over paths (or the tree under dirfd for walk), timed.
Measured Measure(const Args& a, int dirfd, const std::vector<std::string>& paths) {
  Measured r;
  const size_t step = static_cast<size_t>(a.procs);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (a.mode == "lstat-latency") {
    LstatLatency(dirfd, paths, &r.total, &r.nanos);
    r.seconds = elapsed();
  } else if (a.mode == "read-latency") {
    ReadLatency(dirfd, paths, a.buffer, &r.total, &r.nanos);
    r.seconds = elapsed();
  } else if (a.mode == "walk") {
    Walk(::dup(dirfd), "", &r.total);
    r.seconds = elapsed();
    --r.total.dirs;  // The root itself is not an entry of the tree.
  } else if (a.procs == 1) {
    if (a.mode == "read") {
      ReadFiles(dirfd, paths, 0, 1, a.buffer, &r.total);
    } else {
      LstatFiles(dirfd, paths, 0, 1, &r.total);
    }
    r.seconds = elapsed();
  } else if (a.mode == "read") {
    r.ok = RunForked(
        a.procs, [&](int i, Tally* t) { ReadFiles(dirfd, paths, i, step, a.buffer, t); }, &r.total,
        &r.seconds);
  } else {
    r.ok = RunForked(
        a.procs, [&](int i, Tally* t) { LstatFiles(dirfd, paths, i, step, t); }, &r.total,
        &r.seconds);
  }
  return r;
}

// Prints the one-line JSON result on stdout.
void PrintResult(const Args& a, Measured& r, size_t list_entries) {
  const Tally& total = r.total;
  std::printf("{\"mode\":\"%s\",\"procs\":%d,\"files\":%" PRIu64 ",\"dirs\":%" PRIu64
              ",\"bytes\":%" PRIu64 ",\"seconds\":%.9f,\"checksum\":\"%016" PRIx64
              "\",\"errors\":%" PRIu64 ",\"stat_fallbacks\":%" PRIu64 ",\"list_entries\":%zu",
              a.mode.c_str(), a.procs, total.files, total.dirs, total.bytes, r.seconds,
              total.checksum, total.errors, total.stat_fallbacks, list_entries);
  if (IsLatencyMode(a)) {
    std::vector<uint64_t>& nanos = r.nanos;
    double sum = 0;
    for (uint64_t n : nanos) sum += static_cast<double>(n);
    std::sort(nanos.begin(), nanos.end());
    std::printf(
        ",\"latency_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
        "\"max\":%.3f,\"mean\":%.3f}",
        PercentileUs(nanos, 0.5), PercentileUs(nanos, 0.9), PercentileUs(nanos, 0.99),
        PercentileUs(nanos, 0.999), PercentileUs(nanos, 1.0),
        nanos.empty() ? 0.0 : sum / static_cast<double>(nanos.size()) / 1e3);
  }
  if (total.errors) {
    std::printf(",\"first_error\":");
    PrintJsonString(total.first_error);
  }
  std::printf("}\n");
}

int Main(int argc, char** argv) {
  Args a;
  if (int rc = ParseArgs(argc, argv, &a); rc != kExitOk) return rc;
  int dirfd = AT_FDCWD;
  if (!a.root.empty() || a.mode == "walk") {
    const char* root = a.root.empty() ? "." : a.root.c_str();
    dirfd = ::open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
      std::fprintf(stderr, "bench_reader: open %s: %s\n", root, std::strerror(errno));
      return kExitFailure;
    }
  }
  std::vector<std::string> paths;
  if (!a.list.empty() && !LoadList(a.list, &paths)) {
    std::fprintf(stderr, "bench_reader: cannot read %s: %s\n", a.list.c_str(),
                 std::strerror(errno));
    return kExitFailure;
  }
  Measured r = Measure(a, dirfd, paths);
  if (!r.ok) {
    std::fprintf(stderr, "bench_reader: a worker process failed\n");
    return kExitFailure;
  }
  PrintResult(a, r, paths.size());
  if (r.total.errors) {
    std::fprintf(stderr, "bench_reader: %" PRIu64 " error(s), first: %s\n", r.total.errors,
                 r.total.first_error);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace
}  // namespace shardfs::bench

int main(int argc, char** argv) { return shardfs::bench::Main(argc, argv); }
