#include "src/mount/control_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <system_error>

#include "base/fd.h"
#include "base/io.h"
#include "base/json_writer.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/strings.h"
#include "index/file_reads.h"
#include "index/member_path.h"
#include "src/codec/ctar_codec.h"
#include "src/mount/control_socket.h"

namespace shardfs::mount {

using reader::ChunkCacheStats;
using reader::DecodedCache;
using reader::DecodedCacheStats;
using reader::EntryRecord;
using reader::FetcherStats;
using reader::Filesystem;
using reader::InodeId;
using reader::KernelOp;
using reader::KernelOpName;
using reader::ShardFetcher;
using reader::ShardFetchStats;
using reader::ShardFiles;
using reader::ShardHandle;
using reader::StreamStats;

namespace {

std::string Size(uint64_t bytes) { return HumanBytes(static_cast<double>(bytes)); }

// What a warm request fetches: the chunks of the files under its paths, by
// shard, each chunk once.
class WarmPlan {
 public:
  WarmPlan(const index::IndexReader& reader, uint64_t chunk_size)
      : reader_(reader), cs_(chunk_size) {}

  // Adds the file at `path`, or every file under the directory there.
  // Returns the lookup's error naming the path.
  Status AddPath(const Filesystem& fs, const std::string& path);
  // Adds the chunks of file `rec`: its stored ranges, or for a compressed
  // shard the compressed bytes of the seek intervals that hold it.
  Status AddFile(const EntryRecord& rec);
  // Fetches every chunk planned into the cache, runs of chunks at a time;
  // *wanted: the chunks planned, *fetched: the bytes fetched.
  Status Fetch(ShardFiles& shards, ShardFetcher& fetcher, uint64_t* wanted, uint64_t* fetched);

  uint64_t files() const { return files_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Status AddCompressed(const EntryRecord& rec, std::vector<uint64_t>* v);

  const index::IndexReader& reader_;
  const uint64_t cs_;
  std::map<uint32_t, std::vector<uint64_t>> chunks_;  // By shard.
  // Compressed shards and slices, by shard: a file's offset is in the
  // decoded stream; what a read fetches is the compressed bytes of the seek
  // intervals that hold it, in the file.
  std::map<uint32_t, index::SeekTable> tables_;
  uint64_t files_ = 0;
  uint64_t bytes_ = 0;
};

Status WarmPlan::AddPath(const Filesystem& fs, const std::string& path) {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(fs.GetAttr(index::kRootInode, &rec, &holder));
  for (std::string_view name : index::PathComponents(path)) {
    Status s = fs.Lookup(rec.inode, name, &rec, &holder);
    if (!s.ok()) return s.WithContext(fmt::format("warm {}", path));
  }
  if (rec.type == index::EntryType::kFile) return AddFile(rec);
  if (rec.type != index::EntryType::kDir) return Status::Ok();
  std::vector<InodeId> dirs{rec.inode};
  while (!dirs.empty()) {
    InodeId dir = dirs.back();
    dirs.pop_back();
    Status inner;
    SHARDFS_RETURN_IF_ERROR(fs.ReadDir(dir, "", [&](std::string_view, const EntryRecord& r) {
      if (r.type == index::EntryType::kDir) {
        dirs.push_back(r.inode);
      } else if (r.type == index::EntryType::kFile) {
        inner = AddFile(r);
      }
      return inner.ok();
    }));
    SHARDFS_RETURN_IF_ERROR(inner);
  }
  return Status::Ok();
}

Status WarmPlan::AddFile(const EntryRecord& rec) {
  SHARDFS_RETURN_IF_ERROR(reader_.CheckFileRange(rec));
  if (rec.size == 0) return Status::Ok();
  ++files_;
  bytes_ += rec.size;
  std::vector<uint64_t>& v = chunks_[rec.shard.value];
  if (reader_.shards()[rec.shard.value].codec() != index::Codec::kNone) {
    return AddCompressed(rec, &v);
  }
  const size_t extents = rec.sparse() ? index::ExtentCount(rec) : 1;
  for (size_t i = 0; i < extents; ++i) {
    index::Extent e = rec.sparse() ? index::GetExtent(rec, i) : index::StoredRange(rec);
    if (e.length == 0) continue;
    for (uint64_t c = e.physical / cs_; c <= (e.physical + e.length - 1) / cs_; ++c) {
      v.push_back(c);
    }
  }
  return Status::Ok();
}

Status WarmPlan::AddCompressed(const EntryRecord& rec, std::vector<uint64_t>* v) {
  const index::ShardMeta& meta = reader_.shards()[rec.shard.value];
  auto [it, fresh] = tables_.try_emplace(rec.shard.value);
  if (fresh) {
    std::string value;
    Status s = reader_.GetSeekValue(rec.shard, false, 0, &value);
    if (s.ok()) s = index::DecodeSeekTable(value, &it->second);
    if (!s.ok()) return s.WithContext(fmt::format("warm: shard {} seek table", rec.shard.value));
  }
  const index::SeekTable& t = it->second;
  if (t.points.empty()) return Status::Ok();
  const size_t first = t.Find(rec.offset), last = t.Find(rec.offset + rec.size - 1);
  const uint64_t from = meta.data_base() + codec::IntervalInputStart(t, first);
  const uint64_t to = meta.data_base() + codec::IntervalInputEnd(t, last, meta.data_size());
  for (uint64_t c = from / cs_; to > from && c <= (to - 1) / cs_; ++c) v->push_back(c);
  return Status::Ok();
}

Status WarmPlan::Fetch(ShardFiles& shards, ShardFetcher& fetcher, uint64_t* wanted,
                       uint64_t* fetched) {
  for (auto& [shard, v] : chunks_) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    *wanted += v.size();
    SHARDFS_ASSIGN_OR_RETURN(ShardHandle h, shards.Get(index::ShardId{shard}));
    for (size_t i = 0; i < v.size();) {
      size_t j = i + 1;
      while (j < v.size() && v[j] == v[j - 1] + 1) ++j;
      SHARDFS_RETURN_IF_ERROR(fetcher.Warm(h, v[i] * cs_, (v[j - 1] - v[i] + 1) * cs_, fetched));
      i = j;
    }
  }
  return Status::Ok();
}

// The decoded cache's and the compressed tars' counters, into `o`.
void AddDecodedJson(const DecodedCacheStats& d, const StreamStats& st, JsonObject& o) {
  o.UNum("decoded_capacity", d.capacity)
      .UNum("decoded_hits", d.hits)
      .UNum("decoded_decodes", d.decodes)
      .UNum("decoded_too_short", d.too_short)
      .UNum("decoded_joined", d.joined)
      .UNum("decoded_gave_up", d.gave_up)
      .UNum("decoded_errors", d.errors)
      .UNum("decoded_evictions", d.evictions)
      .UNum("decoded_bytes", d.decoded_bytes)
      .UNum("decoded_resident_bytes", d.resident_bytes)
      .UNum("decoded_resident_blocks", d.resident_blocks)
      .UNum("stream_intervals_whole", st.whole)
      .UNum("stream_intervals_prefix", st.prefixes)
      .UNum("stream_reads_file_checked", st.files_checked);
}

// The per-shard counters of `s`, as a JSON array.
std::string ShardsJson(const FetcherStats& s, const index::IndexReader& reader) {
  std::string arr = "[";
  for (size_t i = 0; i < s.shards.size(); ++i) {
    const ShardFetchStats& p = s.shards[i];
    JsonObject so;
    so.UNum("shard_id", i)
        .Str("location", RedactLocation(reader.ShardPath(index::ShardId{static_cast<uint32_t>(i)})))
        .UNum("bytes_delivered", p.bytes_delivered)
        .UNum("bytes_pushed", p.bytes_pushed)
        .UNum("bytes_fetched", p.bytes_fetched)
        .UNum("cache_hits", p.chunk_hits)
        .UNum("cache_misses", p.chunk_misses)
        .UNum("chunks_fetched", p.fetches)
        .UNum("errors", p.errors)
        .UNum("resident_bytes",
              i < s.cache.shard_resident_bytes.size() ? s.cache.shard_resident_bytes[i] : 0);
    if (i > 0) arr += ",";
    arr += so.Finish();
  }
  return arr + "]";
}

std::string Millis(uint64_t us) { return fmt::format("{:.1f} ms", static_cast<double>(us) / 1000); }

}  // namespace

Result<std::string> ControlRequest(const std::string& mountpoint,
                                   const std::vector<std::string>& words, int reply_timeout_ms) {
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd fd, ConnectControl(mountpoint, kControlConnectTimeoutMs));
  Result<std::string> answer =
      ControlExchange(fd.get(), words, kControlConnectTimeoutMs, reply_timeout_ms);
  if (!answer.ok() && answer.status().message() == kControlReadTimedOut) {
    return Status::IoError(fmt::format("{}: the daemon did not answer within {} s", mountpoint,
                                       reply_timeout_ms / 1000.0));
  }
  if (!answer.ok() && answer.status().message() == kControlWriteTimedOut) {
    return Status::IoError(fmt::format("{}: the daemon did not take the request within {} s",
                                       mountpoint, kControlConnectTimeoutMs / 1000.0));
  }
  return answer;
}

ControlServer::ControlServer(Filesystem* fs, ShardFetcher* fetcher, std::string mountpoint)
    : fs_(fs), fetcher_(fetcher), mountpoint_(std::move(mountpoint)) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  // Not stat(2): the mount's own daemon does not serve yet.
  SHARDFS_ASSIGN_OR_RETURN(MountEntry mount, FindMountAt(CanonicalMountpoint(mountpoint_)));
  owner_ = mount.owner;
  const std::string dir = DaemonControlDir(owner_);
  SHARDFS_ASSIGN_OR_RETURN(dir_fd_, OpenControlDir(dir, owner_, /*create=*/true));
  name_ = ControlSocketName(mount.dev);
  const std::string path = dir + "/" + name_;
  // Only the owner or root can have put a file there: one left by a killed
  // daemon of an earlier mount that had this device number.
  if (::unlinkat(dir_fd_.get(), name_.c_str(), 0) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, fmt::format("control socket {}: unlink", path));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument(fmt::format("control socket {}: path too long", path));
  }
  // Bound by its path (the directory checked above; only its owner or root
  // can replace it in /run or sticky /tmp), so that the socket shows under
  // it in ss -x and /proc/net/unix, where tmpfiles' cleaning looks.
  std::memcpy(addr.sun_path, path.data(), path.size());
  listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return Status::FromErrno(errno, "control socket");
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_.get(), 16) != 0) {
    return Status::FromErrno(errno, fmt::format("control socket {}", path));
  }
  struct stat st;
  if (::fstatat(dir_fd_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    socket_ino_ = st.st_ino;
  }
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return Status::FromErrno(errno, "control socket: eventfd");
  try {
    accept_thread_ = std::thread([this] { Accept(); });
  } catch (const std::system_error& e) {
    return Status::IoError(fmt::format("control socket: cannot start its thread: {}", e.what()));
  }
  log::Debug("control socket {}", path);
  return Status::Ok();
}

void ControlServer::Stop() {
  if (stop_.exchange(true)) return;
  if (accept_thread_.joinable()) {
    Wake();
    accept_thread_.join();
  }
  std::list<Connection> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A connection blocked reading its request or sending its answer returns
    // at once.
    for (Connection& c : conns_) {
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
    }
    conns.swap(conns_);
  }
  for (Connection& c : conns) c.thread.join();
  listen_fd_.reset();
  struct stat st;
  if (dir_fd_.valid() && socket_ino_ != 0 &&
      ::fstatat(dir_fd_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st.st_ino == socket_ino_) {
    ::unlinkat(dir_fd_.get(), name_.c_str(), 0);
  }
  dir_fd_.reset();
}

void ControlServer::Wake() {
  uint64_t one = 1;
  ssize_t unused = ::write(wake_fd_.get(), &one, sizeof one);
  (void)unused;
}

void ControlServer::Refuse(int fd, std::string_view why) {
  const std::string reply = fmt::format("error\n{}\n", why);
  (void)WriteFully(fd, reply.data(), reply.size());
  ::close(fd);
}

void ControlServer::Reap() {
  std::list<Connection> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if (it->done) done.splice(done.end(), conns_, it);
      it = next;
    }
  }
  for (Connection& c : done) c.thread.join();
}

void ControlServer::Accept() {
  pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
  for (;;) {
    Reap();
    if (stop_.load()) return;
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("control socket: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) {
      uint64_t n;
      ssize_t unused = ::read(wake_fd_.get(), &n, sizeof n);
      (void)unused;
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
        log::Warning("control socket: accept: {}", std::strerror(errno));
      }
      continue;
    }
    // A client that stops reading, or never finishes its request, holds its
    // thread for a bounded time only.
    SetSocketTimeouts(fd, kSendTimeoutMs, kRequestTimeoutMs);
    if (Status s = CheckControlPeer(fd, owner_, "control socket client"); !s.ok()) {
      log::Warning("{}", s.message());
      Refuse(fd, "only the mount's owner and root may ask its daemon");
      continue;
    }
    std::string refusal;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (conns_.size() >= kMaxConnections) {
        refusal =
            fmt::format("the daemon is busy: {} requests in progress; try again", kMaxConnections);
      } else {
        Connection& c = conns_.emplace_back();
        c.fd = fd;
        try {
          c.thread = std::thread([this, &c] { Serve(&c); });
        } catch (const std::system_error& e) {
          conns_.pop_back();
          log::Warning("control socket: cannot start a thread: {}", e.what());
          refusal = fmt::format("the daemon cannot start a thread: {}", e.what());
        }
      }
    }
    if (!refusal.empty()) Refuse(fd, refusal);
  }
}

void ControlServer::Serve(Connection* c) {
  const int fd = c->fd;
  std::string request;
  Status s = ControlReadAll(fd, &request);
  std::vector<std::string> words;
  for (size_t start = 0; s.ok() && start < request.size();) {
    size_t end = request.find('\0', start);
    if (end == std::string::npos) end = request.size();
    words.emplace_back(request.substr(start, end - start));
    start = end + 1;
  }
  std::string body;
  try {
    if (s.ok()) s = Handle(words, &body);
  } catch (const std::exception& e) {  // Not the daemon's end.
    s = Status::IoError(fmt::format("the daemon could not answer: {}", e.what()));
  }
  const std::string reply = s.ok() ? "ok\n" + body : "error\n" + s.message() + "\n";
  (void)WriteFully(fd, reply.data(), reply.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ::close(fd);
    c->fd = -1;
    c->done = true;
  }
  Wake();
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
        *body += fmt::format(
            "shard {:>5}  delivered {:>10}  fetched {:>10}  hits {:>8}  misses "
            "{:>6}  errors {}  {}\n",
            i, Size(p.bytes_delivered), Size(p.bytes_fetched), p.chunk_hits, p.chunk_misses,
            p.errors, RedactLocation(r.ShardPath(index::ShardId{static_cast<uint32_t>(i)})));
        // A slice shard (a compressed tar inside a shard): which bytes of the file.
        if (const index::ShardMeta& m = r.shards()[i]; m.slice()) {
          body->insert(body->size() - 1,
                       fmt::format(" (slice at bytes {}..{})", m.base, m.base + m.length));
        }
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
  WarmPlan plan(fs_->reader(), fetcher_->options().chunk_size);
  for (const std::string& path : paths) SHARDFS_RETURN_IF_ERROR(plan.AddPath(*fs_, path));
  uint64_t fetched = 0, wanted = 0;
  SHARDFS_RETURN_IF_ERROR(plan.Fetch(fs_->shard_files(), *fetcher_, &wanted, &fetched));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *body = fmt::format("warmed {} files ({}) in {} chunks: fetched {} in {:.2f} s\n", plan.files(),
                      Size(plan.bytes()), wanted, Size(fetched), secs);
  return Status::Ok();
}

std::string ControlServer::StatsText(const FetcherStats& s) const {
  // Which path serves the mount: this daemon (a kernel mount has none; the
  // CLI answers for it, src/mount/kernel_mount.h).
  std::string out = "path       fuse\n" + KernelRequestsText() + DecodedText();
  if (fetcher_ == nullptr) {
    return out +
           "local shards read directly (no chunk cache: the kernel's page cache holds them)\n";
  }
  const ChunkCacheStats& c = s.cache;
  const remote::RequestStatsSnapshot& r = s.requests;
  const double amp = s.total.bytes_delivered == 0
                         ? 0
                         : static_cast<double>(s.total.bytes_fetched) /
                               static_cast<double>(s.total.bytes_delivered);
  const uint64_t lookups = s.total.chunk_hits + s.total.chunk_misses;
  out += fmt::format(
      "reads      delivered {} ({} of it pushed ahead), fetched {} "
      "(amplification {:.2f})\n",
      Size(s.total.bytes_delivered), Size(s.total.bytes_pushed), Size(s.total.bytes_fetched), amp);
  out += fmt::format(
      "cache      {} of {}: {} in {} chunks (small {}, main {}, ghost {}); hit rate {:.1f}% "
      "({} hits, {} misses), {} evictions, {} reused at mount, {} corrupt dropped; {} stored by "
      "other processes, {} fetches waited for theirs, {} trimmed\n",
      c.capacity == 0 ? "none" : "bounded", Size(c.capacity), Size(c.resident_bytes),
      c.resident_chunks, c.small_chunks, c.main_chunks, c.ghost_keys,
      lookups == 0 ? 0.0 : 100.0 * static_cast<double>(s.total.chunk_hits) / lookups,
      s.total.chunk_hits, s.total.chunk_misses, c.evictions, c.reused_at_open, c.corrupt_dropped,
      c.adopted, c.claim_waits, c.trimmed);
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
      "queued), {} failed; {} running, {} queued; {} reads gave up waiting; {} not kept\n"
      "           {} reads fetched their own bytes first ({}); {} reads waited {} in all\n",
      s.threads, Size(s.chunk_size), s.total.fetches, s.fetched_ahead, s.ahead_dropped,
      s.total.errors, s.fetches_running, s.queued, s.wait_timeouts, s.cache_write_errors,
      s.range_reads, Size(s.range_bytes), s.demand_waits, Millis(s.demand_wait_us));
  return out;
}

std::string ControlServer::KernelRequestsText() const {
  const auto counts = fs_->kernel_requests().Snapshot();
  std::string line;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", KernelOpName(static_cast<KernelOp>(i)),
                        counts[i]);
  }
  return fmt::format(
      "kernel     requests: {}\n"
      "           {} worker threads have served requests; {} reads of the index's files\n",
      line.empty() ? "none" : line, fs_->kernel_requests().workers(), index::IndexFileReads());
}

std::string ControlServer::DecodedText() const {
  const DecodedCache* cache = fs_->options().decoded;
  if (cache == nullptr) return "";
  const DecodedCacheStats d = cache->stats();
  const StreamStats st = fs_->stream_stats();
  if (d.decodes == 0 && d.hits == 0) return "";  // Nothing compressed read yet.
  return fmt::format(
      "decoded    cache of {}: {} in {} blocks; {} hits, {} decodes ({} shorter than needed, {} "
      "joined another's, {} gave up waiting, {} failed) made {}; {} evictions\n"
      "           compressed tars: {} intervals decoded whole, {} only up to a file's end; {} "
      "reads checked against their file's checksum\n",
      Size(d.capacity), Size(d.resident_bytes), d.resident_blocks, d.hits, d.decodes, d.too_short,
      d.joined, d.gave_up, d.errors, Size(d.decoded_bytes), d.evictions, st.whole, st.prefixes,
      st.files_checked);
}

std::string ControlServer::StatsJson(const FetcherStats& s, bool shards) const {
  const ChunkCacheStats& c = s.cache;
  const remote::RequestStatsSnapshot& r = s.requests;
  JsonObject errors;
  for (int k = 0; k < remote::kErrorKinds; ++k) {
    errors.UNum(remote::ErrorKindName(static_cast<remote::ErrorKind>(k)), r.errors[k]);
  }
  JsonObject kernel;
  const auto counts = fs_->kernel_requests().Snapshot();
  for (size_t i = 0; i < counts.size(); ++i) {
    kernel.UNum(KernelOpName(static_cast<KernelOp>(i)), counts[i]);
  }
  JsonObject o;
  o.Str("path", "fuse")
      .Raw("kernel_requests", kernel.Finish())
      .UNum("worker_threads", fs_->kernel_requests().workers())
      .UNum("index_reads", index::IndexFileReads())
      .Bool("chunked", fetcher_ != nullptr)
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
      .UNum("cache_adopted", c.adopted)
      .UNum("cache_claim_waits", c.claim_waits)
      .UNum("cache_trimmed", c.trimmed)
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
      .UNum("chunks_not_kept", s.cache_write_errors)
      .UNum("reads_from_chunk_files", s.located_reads)
      .UNum("range_reads", s.range_reads)
      .UNum("range_bytes", s.range_bytes)
      .UNum("demand_waits", s.demand_waits)
      .UNum("demand_wait_us", s.demand_wait_us)
      .UNum("chunk_size", s.chunk_size)
      .UNum("fetch_threads", s.threads);
  if (const DecodedCache* cache = fs_->options().decoded; cache != nullptr) {
    AddDecodedJson(cache->stats(), fs_->stream_stats(), o);
  }
  if (shards) o.Raw("shards", ShardsJson(s, fs_->reader()));
  return o.Finish() + "\n";
}

}  // namespace shardfs::mount
