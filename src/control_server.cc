#include "src/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "base/fd.h"
#include "base/log.h"
#include "base/strings.h"
#include "index/member_path.h"
#include "src/json_writer.h"

namespace shardfs::mount {

namespace {

// A request or an answer larger than this is refused (warm takes paths).
constexpr size_t kMaxMessage = 64 << 20;

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, the name not NUL-terminated.
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

// Reads until EOF, at most kMaxMessage bytes.
Status ReadAll(int fd, std::string* out) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return Status::Ok();
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "control socket: read");
    }
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxMessage) return Status::InvalidArgument("control socket: message too long");
  }
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "control socket: write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// The device number of the mount at `mountpoint`, from /proc/self/mountinfo
// (the last line for it: a later mount over the same path hides earlier ones).
// Field 5 is the mount point (octal escapes for space, tab, newline, '\').
Result<dev_t> MountDevice(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return Status::IoError("cannot read /proc/self/mountinfo");
  auto unescape = [](std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 3 < s.size()) {
        out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 +
                                        (s[i + 3] - '0')));
        i += 3;
      } else {
        out.push_back(s[i]);
      }
    }
    return out;
  };
  std::string line;
  bool found = false;
  unsigned major_n = 0, minor_n = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, devs, root, point;
    if (!(f >> id >> parent >> devs >> root >> point)) continue;
    if (unescape(point) != mountpoint) continue;
    if (std::sscanf(devs.c_str(), "%u:%u", &major_n, &minor_n) == 2) found = true;
  }
  if (!found) return Status::NotFound(fmt::format("{}: not in /proc/self/mountinfo", mountpoint));
  return makedev(major_n, minor_n);
}

std::string Size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string Millis(uint64_t us) { return fmt::format("{:.1f} ms", static_cast<double>(us) / 1000); }

}  // namespace

std::string ControlSocketName(dev_t dev) {
  return fmt::format("shardfs-ctl-{}:{}", major(dev), minor(dev));
}

Result<std::string> ControlRequest(const std::string& mountpoint,
                                   const std::vector<std::string>& words) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("{}", mountpoint));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  socklen_t len;
  sockaddr_un addr = AbstractAddress(ControlSocketName(st.st_dev), &len);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a shardfs mount (no shardfs daemon answers for its device {}:{})", mountpoint,
        major(st.st_dev), minor(st.st_dev)));
  }
  std::string request;
  for (const std::string& w : words) {
    request += w;
    request.push_back('\0');
  }
  SHARDFS_RETURN_IF_ERROR(WriteAll(fd.get(), request));
  ::shutdown(fd.get(), SHUT_WR);
  std::string answer;
  SHARDFS_RETURN_IF_ERROR(ReadAll(fd.get(), &answer));
  if (answer.starts_with("ok\n")) return answer.substr(3);
  if (answer.starts_with("error\n")) return Status::IoError(answer.substr(6));
  return Status::IoError(fmt::format("{}: the daemon gave no answer", mountpoint));
}

ControlServer::ControlServer(Filesystem* fs, ShardFetcher* fetcher, std::string mountpoint)
    : fs_(fs), fetcher_(fetcher), mountpoint_(std::move(mountpoint)) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  SHARDFS_ASSIGN_OR_RETURN(dev_t dev, MountDevice(mountpoint_));
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::FromErrno(errno, "control socket");
  socklen_t len;
  const std::string name = ControlSocketName(dev);
  sockaddr_un addr = AbstractAddress(name, &len);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    Status s = Status::FromErrno(errno, fmt::format("control socket {}", name));
    ::close(listen_fd_);
    listen_fd_ = -1;
    return s;
  }
  accept_thread_ = std::thread([this] { Accept(); });
  log::Debug("control socket @{}", name);
  return Status::Ok();
}

void ControlServer::Stop() {
  if (stop_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  std::vector<std::thread> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(conns_);
  }
  for (std::thread& t : conns) t.join();
}

void ControlServer::Accept() {
  while (!stop_.load()) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // Shut down by Stop.
    }
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 ||
        (cred.uid != 0 && cred.uid != ::geteuid())) {
      (void)WriteAll(fd, "error\nonly the mount's owner may ask its daemon\n");
      ::close(fd);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    conns_.emplace_back([this, fd] { Serve(fd); });
  }
}

void ControlServer::Serve(int raw_fd) {
  UniqueFd fd(raw_fd);
  // A client that never finishes its request does not hold a thread for good.
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string request;
  Status s = ReadAll(fd.get(), &request);
  std::vector<std::string> words;
  for (size_t start = 0; s.ok() && start < request.size();) {
    size_t end = request.find('\0', start);
    if (end == std::string::npos) end = request.size();
    words.emplace_back(request.substr(start, end - start));
    start = end + 1;
  }
  std::string body;
  if (s.ok()) s = Handle(words, &body);
  (void)WriteAll(fd.get(), s.ok() ? "ok\n" + body : "error\n" + s.message() + "\n");
}

Status ControlServer::Handle(const std::vector<std::string>& words, std::string* body) {
  if (words.empty()) return Status::InvalidArgument("empty request");
  const std::string& verb = words[0];
  if (verb == "stats") {
    bool json = false, shards = false;
    for (size_t i = 1; i < words.size(); ++i) {
      if (words[i] == "json") {
        json = true;
      } else if (words[i] == "shards") {
        shards = true;
      } else {
        return Status::InvalidArgument(fmt::format("stats: unknown word '{}'", words[i]));
      }
    }
    FetcherStats st;
    if (fetcher_ != nullptr) st = fetcher_->stats(shards);
    *body = json ? StatsJson(st, shards) : StatsText(st);
    if (shards && !json && fetcher_ != nullptr) {
      const auto& r = fs_->reader();
      for (size_t i = 0; i < st.shards.size(); ++i) {
        const ShardFetchStats& p = st.shards[i];
        if (p.bytes_delivered == 0 && p.bytes_fetched == 0 && p.errors == 0) continue;
        *body += fmt::format("shard {:>5}  delivered {:>10}  fetched {:>10}  hits {:>8}  misses "
                             "{:>6}  errors {}  {}\n",
                             i, Size(p.bytes_delivered), Size(p.bytes_fetched), p.chunk_hits,
                             p.chunk_misses, p.errors,
                             RedactLocation(r.ShardPath(index::ShardId{static_cast<uint32_t>(i)})));
      }
    }
    return Status::Ok();
  }
  if (verb == "drop") {
    if (fetcher_ == nullptr) return Status::InvalidArgument("this mount has no chunk cache");
    fetcher_->DropCache();
    *body = "cache dropped\n";
    return Status::Ok();
  }
  if (verb == "warm") {
    if (fetcher_ == nullptr) {
      return Status::InvalidArgument(
          "this mount has no chunk cache (local shards are cached by the kernel; give -o "
          "cache_dir to put a cache in front of them)");
    }
    std::vector<std::string> paths(words.begin() + 1, words.end());
    if (paths.empty()) paths.push_back("");
    return Warm(paths, body);
  }
  return Status::InvalidArgument(fmt::format("unknown request '{}'", verb));
}

Status ControlServer::Warm(const std::vector<std::string>& paths, std::string* body) {
  const auto start = std::chrono::steady_clock::now();
  const index::IndexReader& reader = fs_->reader();
  const uint64_t cs = fetcher_->options().chunk_size;
  // Chunks to fetch, by shard, from the files under every path.
  std::map<uint32_t, std::vector<uint64_t>> chunks;
  uint64_t files = 0, bytes = 0;
  auto add_file = [&](const EntryRecord& rec) -> Status {
    SHARDFS_RETURN_IF_ERROR(reader.CheckFileRange(rec));
    if (rec.size == 0) return Status::Ok();
    ++files;
    bytes += rec.size;
    std::vector<uint64_t>& v = chunks[rec.shard.value];
    const size_t extents = rec.sparse() ? index::ExtentCount(rec) : 1;
    for (size_t i = 0; i < extents; ++i) {
      index::Extent e = rec.sparse() ? index::GetExtent(rec, i)
                                     : index::Extent{0, rec.size, rec.offset};
      if (e.length == 0) continue;
      for (uint64_t c = e.physical / cs; c <= (e.physical + e.length - 1) / cs; ++c) {
        v.push_back(c);
      }
    }
    return Status::Ok();
  };
  for (const std::string& path : paths) {
    EntryRecord rec;
    index::RecordHolder holder;
    SHARDFS_RETURN_IF_ERROR(fs_->GetAttr(index::kRootInode, &rec, &holder));
    for (std::string_view name : index::PathComponents(path)) {
      Status s = fs_->Lookup(rec.inode, name, &rec, &holder);
      if (!s.ok()) return s.WithContext(fmt::format("warm {}", path));
    }
    if (rec.type == index::EntryType::kFile) {
      SHARDFS_RETURN_IF_ERROR(add_file(rec));
      continue;
    }
    if (rec.type != index::EntryType::kDir) continue;
    std::vector<InodeId> dirs{rec.inode};
    while (!dirs.empty()) {
      InodeId dir = dirs.back();
      dirs.pop_back();
      Status inner;
      SHARDFS_RETURN_IF_ERROR(fs_->ReadDir(dir, "", [&](std::string_view, const EntryRecord& r) {
        if (r.type == index::EntryType::kDir) {
          dirs.push_back(r.inode);
        } else if (r.type == index::EntryType::kFile) {
          inner = add_file(r);
        }
        return inner.ok();
      }));
      SHARDFS_RETURN_IF_ERROR(inner);
    }
  }
  uint64_t fetched = 0, wanted = 0;
  for (auto& [shard, v] : chunks) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    wanted += v.size();
    SHARDFS_ASSIGN_OR_RETURN(ShardHandle h, fs_->shard_cache().Get(index::ShardId{shard}));
    for (size_t i = 0; i < v.size();) {
      size_t j = i + 1;
      while (j < v.size() && v[j] == v[j - 1] + 1) ++j;
      SHARDFS_RETURN_IF_ERROR(fetcher_->Warm(h, v[i] * cs, (v[j - 1] - v[i] + 1) * cs, &fetched));
      i = j;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *body = fmt::format("warmed {} files ({}) in {} chunks: fetched {} in {:.2f} s\n", files,
                      Size(bytes), wanted, Size(fetched), secs);
  return Status::Ok();
}

std::string ControlServer::StatsText(const FetcherStats& s) const {
  if (fetcher_ == nullptr) {
    return "local shards read directly (no chunk cache: the kernel's page cache holds them)\n";
  }
  const ChunkCacheStats& c = s.cache;
  const remote::RequestStatsSnapshot& r = s.requests;
  const double amp = s.total.bytes_delivered == 0
                         ? 0
                         : static_cast<double>(s.total.bytes_fetched) /
                               static_cast<double>(s.total.bytes_delivered);
  const uint64_t lookups = s.total.chunk_hits + s.total.chunk_misses;
  std::string out;
  out += fmt::format("reads      delivered {} ({} of it pushed ahead), fetched {} "
                     "(amplification {:.2f})\n",
                     Size(s.total.bytes_delivered), Size(s.total.bytes_pushed),
                     Size(s.total.bytes_fetched), amp);
  out += fmt::format(
      "cache      {} of {}: {} in {} chunks (small {}, main {}, ghost {}); hit rate {:.1f}% "
      "({} hits, {} misses), {} evictions, {} reused at mount, {} corrupt dropped\n",
      c.capacity == 0 ? "none" : "bounded", Size(c.capacity), Size(c.resident_bytes),
      c.resident_chunks, c.small_chunks, c.main_chunks, c.ghost_keys,
      lookups == 0 ? 0.0 : 100.0 * static_cast<double>(s.total.chunk_hits) / lookups,
      s.total.chunk_hits, s.total.chunk_misses, c.evictions, c.reused_at_open, c.corrupt_dropped);
  std::string errors;
  for (int k = 0; k < remote::kErrorKinds; ++k) {
    if (r.errors[k] == 0) continue;
    errors += fmt::format("{}{} {}", errors.empty() ? "" : ", ",
                          remote::ErrorKindName(static_cast<remote::ErrorKind>(k)), r.errors[k]);
  }
  if (errors.empty()) errors = "none";
  if (r.unverified != 0) {
    errors += fmt::format("; {} responses without the indexed ETag or Last-Modified", r.unverified);
  }
  out += fmt::format(
      "requests   {} ({} retries, {} in flight); errors: {}; latency p50 {}, p90 {}, p99 {}, "
      "max {}\n",
      r.requests, r.retries, r.in_flight, errors, Millis(r.latency_p50_us),
      Millis(r.latency_p90_us), Millis(r.latency_p99_us), Millis(r.latency_max_us));
  out += fmt::format(
      "fetching   {} threads, {} chunks; {} chunks fetched ({} ahead of a reader, {} not "
      "queued), {} failed; {} running, {} queued; {} reads gave up waiting\n",
      s.threads, Size(s.chunk_size), s.total.fetches, s.fetched_ahead, s.ahead_dropped,
      s.total.errors, s.fetches_running, s.queued, s.wait_timeouts);
  return out;
}

std::string ControlServer::StatsJson(const FetcherStats& s, bool shards) const {
  using cli::JsonObject;
  const ChunkCacheStats& c = s.cache;
  const remote::RequestStatsSnapshot& r = s.requests;
  JsonObject errors;
  for (int k = 0; k < remote::kErrorKinds; ++k) {
    errors.UNum(remote::ErrorKindName(static_cast<remote::ErrorKind>(k)), r.errors[k]);
  }
  JsonObject o;
  o.Bool("chunked", fetcher_ != nullptr)
      .UNum("bytes_delivered", s.total.bytes_delivered)
      .UNum("bytes_pushed", s.total.bytes_pushed)
      .UNum("bytes_fetched", s.total.bytes_fetched)
      .UNum("cache_hits", s.total.chunk_hits)
      .UNum("cache_misses", s.total.chunk_misses)
      .UNum("cache_evictions", c.evictions)
      .UNum("cache_capacity", c.capacity)
      .UNum("cache_resident_bytes", c.resident_bytes)
      .UNum("cache_resident_chunks", c.resident_chunks)
      .UNum("cache_small_chunks", c.small_chunks)
      .UNum("cache_main_chunks", c.main_chunks)
      .UNum("cache_ghost_keys", c.ghost_keys)
      .UNum("cache_reused_at_open", c.reused_at_open)
      .UNum("cache_corrupt_dropped", c.corrupt_dropped)
      .UNum("requests", r.requests)
      .UNum("retries", r.retries)
      .Num("in_flight", r.in_flight)
      .Raw("errors", errors.Finish())
      .UNum("responses_unverified", r.unverified)
      .UNum("latency_p50_us", r.latency_p50_us)
      .UNum("latency_p90_us", r.latency_p90_us)
      .UNum("latency_p99_us", r.latency_p99_us)
      .UNum("latency_max_us", r.latency_max_us)
      .UNum("chunks_fetched", s.total.fetches)
      .UNum("chunks_fetched_ahead", s.fetched_ahead)
      .UNum("fetch_errors", s.total.errors)
      .UNum("fetches_running", s.fetches_running)
      .UNum("fetches_queued", s.queued)
      .UNum("wait_timeouts", s.wait_timeouts)
      .UNum("chunk_size", s.chunk_size)
      .UNum("fetch_threads", s.threads);
  if (shards) {
    std::string arr = "[";
    const auto& reader = fs_->reader();
    for (size_t i = 0; i < s.shards.size(); ++i) {
      const ShardFetchStats& p = s.shards[i];
      JsonObject so;
      so.UNum("shard", i)
          .Str("location",
               RedactLocation(reader.ShardPath(index::ShardId{static_cast<uint32_t>(i)})))
          .UNum("bytes_delivered", p.bytes_delivered)
          .UNum("bytes_pushed", p.bytes_pushed)
          .UNum("bytes_fetched", p.bytes_fetched)
          .UNum("cache_hits", p.chunk_hits)
          .UNum("cache_misses", p.chunk_misses)
          .UNum("chunks_fetched", p.fetches)
          .UNum("errors", p.errors)
          .UNum("resident_bytes", i < c.shard_resident_bytes.size() ? c.shard_resident_bytes[i] : 0);
      if (i > 0) arr += ",";
      arr += so.Finish();
    }
    o.Raw("shards", arr + "]");
  }
  return o.Finish() + "\n";
}

}  // namespace shardfs::mount
