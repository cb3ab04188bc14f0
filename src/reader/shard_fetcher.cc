#include "src/reader/shard_fetcher.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "base/io.h"
#include "base/log.h"
#include "base/strings.h"
#include "src/remote/curl_api.h"

namespace shardfs::reader {

namespace {

using Clock = std::chrono::steady_clock;

// Chunks of a shard remembered as recently read or fetched ahead: a read of
// one of them is part of the same sweep, not a re-use.
constexpr size_t kRecentChunks = 24;

// A read that starts at most this far past the end of the shard's last read
// follows it: the gap is the next member's tar header (512 bytes, a pax
// header before it).
constexpr uint64_t kFollowGap = 4096;

// Per-shard counters, in shard_counters_[kShardCounters * shard + k].
enum ShardCounter {
  kDelivered,
  kFetched,
  kHits,
  kMisses,
  kFetches,
  kErrors,
  kPushed,
  kShardCounters
};

// A remote read's failure as ChunkedReader promises it: Corruption stays
// (the shard is not the one indexed); anything else, a 404's NotFound
// included, is an IoError marked fetch_failed(), so that the read fails with
// EIO and the Python package can say the fetch gave up.
Status AsShardError(const Status& s, const std::string& location) {
  if (s.ok()) return s;
  if (s.code() == Status::Code::kCorruption) {
    return s.WithContext(fmt::format("shard {}", RedactLocation(location)));
  }
  if (s.code() == Status::Code::kIoError) {
    return s.WithContext(fmt::format("shard {}", RedactLocation(location))).AsFetchFailure();
  }
  return Status::IoError(fmt::format("shard {}: {}", RedactLocation(location), s.message()))
      .AsFetchFailure();
}

}  // namespace

struct ShardFetcher::Inflight {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;          // Guarded by ShardFetcher::mu_.
  bool done = false;             // Guarded by mu.
  Status status;                 // Guarded by mu; set when done.
  std::unique_ptr<char[]> data;  // The chunk, once done and ok.
  size_t len = 0;
};

struct ShardFetcher::Job {
  ShardHandle shard;  // Keeps a local shard's descriptor open.
  ChunkKey key;
  std::shared_ptr<Inflight> inflight;
  bool ahead = false;
  uint64_t range_pos = 0;  // A range (range_len > 0): bytes [range_pos, +range_len) of the shard.
  size_t range_len = 0;
};

struct ShardFetcher::ShardState {
  std::mutex mu;
  bool any = false;                              // Guarded by mu: a read happened.
  uint64_t last = 0;                             // Guarded by mu: the last chunk read.
  uint64_t last_end = 0;                         // Guarded by mu: where the last read ended.
  uint64_t window = 0;                           // Guarded by mu: chunks to fetch ahead.
  std::array<uint64_t, kRecentChunks> recent{};  // Guarded by mu; +1 (0: empty).
  size_t recent_next = 0;                        // Guarded by mu.

  bool Recent(uint64_t chunk) const {
    return std::find(recent.begin(), recent.end(), chunk + 1) != recent.end();
  }
  void Remember(uint64_t chunk) {
    if (Recent(chunk)) return;
    recent[recent_next] = chunk + 1;
    recent_next = (recent_next + 1) % recent.size();
  }
};

struct ShardFetcher::Counters {
  std::atomic<uint64_t> fetched_ahead{0};
  std::atomic<uint64_t> ahead_dropped{0};
  std::atomic<uint64_t> wait_timeouts{0};
  std::atomic<uint64_t> cache_write_errors{0};
  std::atomic<uint64_t> located_reads{0};
  std::atomic<uint64_t> running{0};
  std::atomic<uint64_t> range_reads{0};
  std::atomic<uint64_t> range_bytes{0};
  std::atomic<uint64_t> demand_waits{0};
  std::atomic<uint64_t> demand_wait_us{0};
};

Result<std::unique_ptr<ShardFetcher>> ShardFetcher::Create(FetcherOptions options,
                                                           std::vector<FetchShard> shards,
                                                           std::unique_ptr<ChunkCache> cache) {
  std::vector<remote::RemoteUrl> urls(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].remote) continue;
    Result<remote::RemoteUrl> u = remote::ParseRemoteUrl(shards[i].location);
    if (!u.ok()) return u.status().WithContext(fmt::format("shard {}", i));
    urls[i] = std::move(u).value();
  }
  if (options.threads == 0) options.threads = 1;
  return std::unique_ptr<ShardFetcher>(
      new ShardFetcher(std::move(options), std::move(shards), std::move(urls), std::move(cache)));
}

ShardFetcher::ShardFetcher(FetcherOptions options, std::vector<FetchShard> shards,
                           std::vector<remote::RemoteUrl> urls, std::unique_ptr<ChunkCache> cache)
    : options_(std::move(options)),
      shards_(std::move(shards)),
      urls_(std::move(urls)),
      cache_(std::move(cache)),
      state_(std::make_unique<ShardState[]>(shards_.size())),
      shard_counters_(std::make_unique<std::atomic<uint64_t>[]>(shards_.size() * kShardCounters)),
      counters_(std::make_unique<Counters>()) {
  options_.fetch.cancel = &cancel_;
}

ShardFetcher::~ShardFetcher() { Stop(); }

void ShardFetcher::Start() {
  // libcurl is loaded here, once, not by the first fetcher thread: a fork
  // (a DataLoader worker) while a thread is in the middle of that one-time
  // load would leave the child waiting for it for ever. Fetcher threads
  // make their HttpClient at their first fetch of a remote shard, so idle
  // ones (and those of local shards) hold nothing a fork could catch.
  if (std::any_of(shards_.begin(), shards_.end(), [](const FetchShard& s) { return s.remote; })) {
    (void)remote::Curl(nullptr);
  }
  for (unsigned i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Run(); });
}

void ShardFetcher::Stop() {
  std::deque<Job> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
    dropped.swap(demand_);
    for (Job& j : ahead_) dropped.push_back(std::move(j));
    ahead_.clear();
    for (Job& j : ranges_) dropped.push_back(std::move(j));
    ranges_.clear();
  }
  cancel_ = true;
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (Job& j : dropped) {
    std::lock_guard<std::mutex> lock(j.inflight->mu);
    if (j.inflight->done) continue;
    j.inflight->done = true;
    j.inflight->status = Status::IoError("the mount is stopping");
    j.inflight->cv.notify_all();
  }
}

std::chrono::milliseconds ShardFetcher::wait_bound() const {
  const remote::FetchOptions& f = options_.fetch;
  return cache_->claim_wait() + f.retry_budget + f.connect_timeout + f.stall_timeout +
         std::chrono::milliseconds{2000};
}

uint64_t ShardFetcher::ChunkCount(uint32_t shard) const {
  return (shards_[shard].size + options_.chunk_size - 1) / options_.chunk_size;
}

void ShardFetcher::NoteRead(uint32_t shard, uint64_t pos, uint64_t len, uint64_t first,
                            uint64_t last, uint64_t* reuse, uint64_t* ahead_from,
                            uint64_t* ahead_to, bool* follows) {
  ShardState& s = state_[shard];
  std::lock_guard<std::mutex> lock(s.mu);
  *follows = s.any && pos >= s.last_end && pos - s.last_end <= kFollowGap;
  s.last_end = pos + len;
  *reuse = 0;
  for (uint64_t c = first; c <= last && c - first < 64; ++c) {
    if (!s.Recent(c)) *reuse |= uint64_t{1} << (c - first);
  }
  // Pushes run ahead of the program's own READs, which then land a chunk or
  // two behind the furthest read: still the same sweep.
  const bool sequential = s.any && first <= s.last + 1 && first + options_.max_ahead + 1 >= s.last;
  if (!sequential) {
    s.window = 0;
    s.last = last;
  } else if (last > s.last) {
    s.window = std::min<uint64_t>(s.window == 0 ? 1 : s.window * 2, options_.max_ahead);
    s.last = last;
  }
  s.any = true;
  for (uint64_t c = first; c <= last; ++c) s.Remember(c);
  *ahead_from = s.last + 1;
  *ahead_to = std::min(s.last + 1 + s.window, ChunkCount(shard));
  for (uint64_t c = *ahead_from; c < *ahead_to; ++c) s.Remember(c);
}

std::shared_ptr<ShardFetcher::Inflight> ShardFetcher::Request(const ShardHandle& shard,
                                                              ChunkKey key, bool ahead,
                                                              bool* cached, bool even_if_cached) {
  *cached = false;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return nullptr;
  auto it = inflight_.find(key);
  if (it != inflight_.end()) {
    // A reader now waits for a chunk queued to be fetched ahead: it goes to
    // the front queue too (the fetcher that starts it first wins).
    if (!ahead && !it->second->started) {
      demand_.push_back(Job{shard, key, it->second, false});
      cv_.notify_one();
    }
    return it->second;
  }
  // A fetch stores its chunk before it leaves inflight_, so a chunk neither
  // in flight nor cached now is not being fetched: no chunk is fetched twice
  // by a reader that missed the cache just before the store.
  if (!even_if_cached && cache_->Contains(key)) {
    *cached = true;
    return nullptr;
  }
  if (ahead && ahead_.size() >= options_.threads * options_.max_ahead) {
    counters_->ahead_dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto f = std::make_shared<Inflight>();
  inflight_.emplace(key, f);
  (ahead ? ahead_ : demand_).push_back(Job{shard, key, f, ahead});
  cv_.notify_one();
  return f;
}

bool ShardFetcher::WholeSlotFree() const {
  const unsigned n = options_.threads;
  const unsigned kept = options_.demand_range == 0 ? 0 : n / 4;
  return whole_running_ < n - kept;
}

std::shared_ptr<ShardFetcher::Inflight> ShardFetcher::RequestRange(const ShardHandle& shard,
                                                                   ChunkKey key, uint64_t offset,
                                                                   size_t len, bool* range) {
  *range = false;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return nullptr;
  auto it = inflight_.find(key);
  if (it != inflight_.end() && it->second->started) return it->second;
  *range = true;
  auto f = std::make_shared<Inflight>();
  ranges_.push_back(Job{shard, key, f, false, key.index * options_.chunk_size + offset, len});
  cv_.notify_one();
  return f;
}

Status ShardFetcher::Await(Inflight& f, ChunkKey key, uint64_t offset, size_t len, char* buf) {
  std::unique_lock<std::mutex> lock(f.mu);
  const Clock::time_point t0 = Clock::now();
  const bool done = f.cv.wait_for(lock, wait_bound(), [&] { return f.done; });
  counters_->demand_waits.fetch_add(1, std::memory_order_relaxed);
  counters_->demand_wait_us.fetch_add(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count(),
      std::memory_order_relaxed);
  if (!done) {
    counters_->wait_timeouts.fetch_add(1, std::memory_order_relaxed);
    return Status::IoError(fmt::format("shard {}: chunk {} not fetched within {} s",
                                       RedactLocation(shards_[key.shard].location), key.index,
                                       wait_bound().count() / 1000))
        .AsFetchFailure();
  }
  if (!f.status.ok()) return f.status;
  if (offset + len > f.len) {
    return Status::IoError(fmt::format("shard {}: chunk {} is {} bytes, read to byte {}",
                                       RedactLocation(shards_[key.shard].location), key.index,
                                       f.len, offset + len));
  }
  std::memcpy(buf, f.data.get() + offset, len);
  return Status::Ok();
}

Status ShardFetcher::ReadShard(const ShardHandle& shard, uint64_t pos, size_t len, char* buf) {
  return ReadShardOrLocate(shard, pos, len, buf, nullptr);
}

bool ShardFetcher::Holds(const ShardHandle& shard, uint64_t pos, size_t len) {
  const uint32_t id = shard->id().value;
  if (id >= shards_.size() || pos > shards_[id].size || len > shards_[id].size - pos) return false;
  if (len == 0) return true;
  const uint64_t cs = options_.chunk_size;
  for (uint64_t c = pos / cs; c <= (pos + len - 1) / cs; ++c) {
    if (!cache_->Contains(ChunkKey{id, c})) return false;
  }
  return true;
}

Status ShardFetcher::ReadShardOrLocate(const ShardHandle& shard, uint64_t pos, size_t len,
                                       char* buf, FileRange* at) {
  const uint32_t id = shard->id().value;
  if (id >= shards_.size()) return Status::Corruption(fmt::format("shard id {} out of range", id));
  if (len == 0) return Status::Ok();
  if (pos > shards_[id].size || len > shards_[id].size - pos) {
    return Status::IoError(fmt::format("shard {}: read to byte {} of a {}-byte shard",
                                       RedactLocation(shards_[id].location), pos + len,
                                       shards_[id].size));
  }
  const uint64_t cs = options_.chunk_size;
  const uint64_t first = pos / cs, last = (pos + len - 1) / cs;
  uint64_t reuse, ahead_from, ahead_to;
  bool follows;
  NoteRead(id, pos, len, first, last, &reuse, &ahead_from, &ahead_to, &follows);
  const bool ranges =
      options_.demand_range > 0 && len <= options_.demand_range && !shards_[id].remote && !follows;
  std::atomic<uint64_t>* sc = &shard_counters_[size_t{id} * kShardCounters];
  // Every chunk is looked up (or its fetch requested) before any wait, so
  // the chunks of a read that spans several are fetched side by side.
  struct Part {
    uint64_t chunk;
    uint64_t offset;
    size_t len;
    char* dst;
    std::shared_ptr<Inflight> fetch;
    bool range = false;  // fetch holds [offset, offset + len) alone.
  };
  std::vector<Part> parts;
  for (uint64_t c = first; c <= last; ++c) {
    const uint64_t start = std::max(pos, c * cs);
    const uint64_t end = std::min(pos + len, (c + 1) * cs);
    Part p{c, start - c * cs, static_cast<size_t>(end - start), buf + (start - pos), nullptr};
    const bool reused = c - first < 64 && (reuse >> (c - first) & 1);
    // The cache, or the chunk's fetch. A chunk stored between the two looks
    // is read from the cache after all (a few times at most: it may be
    // evicted again at once by a tiny cache; then it is fetched).
    bool cached = false;
    if (at != nullptr && first == last &&
        cache_->Locate(ChunkKey{id, c}, p.offset, p.len, reused, &at->file, &at->pos)) {
      sc[kHits].fetch_add(1, std::memory_order_relaxed);
      counters_->located_reads.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (cache_->Read(ChunkKey{id, c}, p.offset, p.len, p.dst, reused)) {
        cached = true;
        break;
      }
      bool stored;
      if (ranges) {
        p.fetch = RequestRange(shard, ChunkKey{id, c}, p.offset, p.len, &p.range);
        if (p.range) Request(shard, ChunkKey{id, c}, true, &stored);  // Its chunk, behind.
        break;
      }
      p.fetch = Request(shard, ChunkKey{id, c}, false, &stored);
      if (!stored) break;
    }
    if (cached) {
      sc[kHits].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    sc[kMisses].fetch_add(1, std::memory_order_relaxed);
    if (!p.fetch) {
      // Evicted as fast as it was stored, three times over: fetch it anyway.
      bool stored;
      p.fetch = Request(shard, ChunkKey{id, c}, false, &stored, /*even_if_cached=*/true);
    }
    if (!p.fetch) return Status::IoError("the mount is stopping");
    parts.push_back(std::move(p));
  }
  for (uint64_t c = ahead_from; c < ahead_to; ++c) {
    bool stored;
    Request(shard, ChunkKey{id, c}, true, &stored);
  }
  for (const Part& p : parts) {
    SHARDFS_RETURN_IF_ERROR(
        Await(*p.fetch, ChunkKey{id, p.chunk}, p.range ? 0 : p.offset, p.len, p.dst));
  }
  return Status::Ok();
}

void ShardFetcher::NoteDelivered(index::ShardId shard, uint64_t bytes, bool pushed) {
  if (shard.value >= shards_.size()) return;
  std::atomic<uint64_t>* sc = &shard_counters_[size_t{shard.value} * kShardCounters];
  sc[kDelivered].fetch_add(bytes, std::memory_order_relaxed);
  if (pushed) sc[kPushed].fetch_add(bytes, std::memory_order_relaxed);
}

Status ShardFetcher::Warm(const ShardHandle& shard, uint64_t pos, uint64_t len, uint64_t* fetched) {
  const uint32_t id = shard->id().value;
  if (id >= shards_.size() || len == 0) return Status::Ok();
  const uint64_t cs = options_.chunk_size;
  const uint64_t first = pos / cs;
  const uint64_t last = std::min((pos + len - 1) / cs, ChunkCount(id) - 1);
  std::deque<std::pair<uint64_t, std::shared_ptr<Inflight>>> pending;
  Status first_error;
  auto wait_one = [&] {
    const uint64_t c = pending.front().first;
    std::shared_ptr<Inflight> f = std::move(pending.front().second);
    pending.pop_front();
    std::unique_lock<std::mutex> lock(f->mu);
    if (!f->cv.wait_for(lock, wait_bound(), [&] { return f->done; })) {
      if (first_error.ok()) {
        first_error = Status::IoError(fmt::format("shard {}: chunk {} not fetched within {} s",
                                                  RedactLocation(shards_[id].location), c,
                                                  wait_bound().count() / 1000))
                          .AsFetchFailure();
      }
    } else if (!f->status.ok()) {
      if (first_error.ok()) first_error = f->status;
    } else {
      *fetched += f->len;
    }
  };
  for (uint64_t c = first; c <= last && first_error.ok(); ++c) {
    bool stored;
    std::shared_ptr<Inflight> f = Request(shard, ChunkKey{id, c}, false, &stored);
    if (stored) continue;
    if (!f) return Status::IoError("the mount is stopping");
    pending.emplace_back(c, std::move(f));
    if (pending.size() >= options_.threads) wait_one();
  }
  while (!pending.empty()) wait_one();
  return first_error;
}

Status ShardFetcher::CheckRemote(uint32_t id) {
  if (id >= shards_.size() || !shards_[id].remote) return Status::Ok();
  const FetchShard& s = shards_[id];
  remote::HttpClient client(options_.fetch, options_.aws, &requests_);
  return AsShardError(client.Check(urls_[id], {s.size, s.etag, s.mtime_ns}), s.location);
}

Status ShardFetcher::Fetch(std::unique_ptr<remote::HttpClient>& client, const Job& job, char* data,
                           size_t len) {
  const FetchShard& s = shards_[job.key.shard];
  const uint64_t pos = job.range_len > 0 ? job.range_pos : job.key.index * options_.chunk_size;
  if (options_.before_fetch) options_.before_fetch(job.key, job.range_len > 0);
  if (s.remote) {
    if (!client)
      client = std::make_unique<remote::HttpClient>(options_.fetch, options_.aws, &requests_);
    return AsShardError(
        client->GetRange(urls_[job.key.shard], pos, len, {s.size, s.etag, s.mtime_ns}, data),
        s.location);
  }
  return PreadExact(job.shard->fd(), data, len, pos)
      .WithContext(fmt::format("shard {}", RedactLocation(s.location)));
}

void ShardFetcher::Run() {
  std::unique_ptr<remote::HttpClient> client;  // Made by the first fetch of a remote shard.
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !ranges_.empty() ||
               (WholeSlotFree() && (!demand_.empty() || !ahead_.empty()));
      });
      if (stop_) return;
      std::deque<Job>& q = !ranges_.empty() ? ranges_ : !demand_.empty() ? demand_ : ahead_;
      job = std::move(q.front());
      q.pop_front();
      if (job.inflight->started) continue;  // Queued twice; already taken.
      job.inflight->started = true;
      if (job.range_len == 0) ++whole_running_;
    }
    if (job.range_len > 0) {
      RunRange(client, job);
      continue;
    }
    counters_->running.fetch_add(1, std::memory_order_relaxed);
    const uint64_t len = cache_->ChunkLength(job.key);
    std::atomic<uint64_t>* sc = &shard_counters_[size_t{job.key.shard} * kShardCounters];
    auto data = std::make_unique<char[]>(len);
    // Another process of the node may be fetching it, or have stored it.
    const ChunkCache::Claimed claim = cache_->Claim(job.key, &cancel_);
    const bool stored =
        claim == ChunkCache::Claimed::kStored && cache_->Read(job.key, 0, len, data.get(), false);
    Status st = stored ? Status::Ok() : Fetch(client, job, data.get(), len);
    if (st.ok() && !stored) {
      sc[kFetched].fetch_add(len, std::memory_order_relaxed);
      sc[kFetches].fetch_add(1, std::memory_order_relaxed);
      if (job.ahead) counters_->fetched_ahead.fetch_add(1, std::memory_order_relaxed);
      Status ins = cache_->Insert(job.key, data.get(), len);
      // Said once: a full or unwritable cache directory fails every insert,
      // and reads go on from the shards.
      if (!ins.ok() && counters_->cache_write_errors.fetch_add(1) == 0) {
        log::Warning(
            "chunk cache: {}; chunks are served but not kept (said once; shardfs "
            "stats counts them)",
            ins.message());
      }
    } else if (!st.ok()) {
      sc[kErrors].fetch_add(1, std::memory_order_relaxed);
      // One line per failed chunk: each ends a retry budget, so they are few.
      if (!cancel_.load()) {
        const std::string shard = RedactLocation(shards_[job.key.shard].location);
        log::ErrorAbout({.shard = shard, .path = {}, .reason = st.message()},
                        "{}; reads of it fail with EIO", st.message());
      }
    }
    // After the Insert: a process waiting for the claim finds the chunk.
    if (claim == ChunkCache::Claimed::kMine) cache_->EndClaim(job.key);
    counters_->running.fetch_sub(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.erase(job.key);
      --whole_running_;
    }
    cv_.notify_one();  // A thread held back by WholeSlotFree may start a chunk now.
    std::lock_guard<std::mutex> lock(job.inflight->mu);
    job.inflight->status = st;
    if (st.ok()) {
      job.inflight->data = std::move(data);
      job.inflight->len = len;
    }
    job.inflight->done = true;
    job.inflight->cv.notify_all();
  }
}

void ShardFetcher::RunRange(std::unique_ptr<remote::HttpClient>& client, const Job& job) {
  counters_->running.fetch_add(1, std::memory_order_relaxed);
  auto data = std::make_unique<char[]>(job.range_len);
  Status st = Fetch(client, job, data.get(), job.range_len);
  std::atomic<uint64_t>* sc = &shard_counters_[size_t{job.key.shard} * kShardCounters];
  if (st.ok()) {
    sc[kFetched].fetch_add(job.range_len, std::memory_order_relaxed);
    counters_->range_reads.fetch_add(1, std::memory_order_relaxed);
    counters_->range_bytes.fetch_add(job.range_len, std::memory_order_relaxed);
  } else {
    sc[kErrors].fetch_add(1, std::memory_order_relaxed);
  }
  counters_->running.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(job.inflight->mu);
  job.inflight->status = st;
  if (st.ok()) {
    job.inflight->data = std::move(data);
    job.inflight->len = job.range_len;
  }
  job.inflight->done = true;
  job.inflight->cv.notify_all();
}

FetcherStats ShardFetcher::stats(bool per_shard) const {
  FetcherStats out;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  for (size_t i = 0; i < shards_.size(); ++i) {
    const std::atomic<uint64_t>* sc = &shard_counters_[i * kShardCounters];
    ShardFetchStats s{get(sc[kDelivered]), get(sc[kPushed]),  get(sc[kFetched]), get(sc[kHits]),
                      get(sc[kMisses]),    get(sc[kFetches]), get(sc[kErrors])};
    out.total.bytes_delivered += s.bytes_delivered;
    out.total.bytes_pushed += s.bytes_pushed;
    out.total.bytes_fetched += s.bytes_fetched;
    out.total.chunk_hits += s.chunk_hits;
    out.total.chunk_misses += s.chunk_misses;
    out.total.fetches += s.fetches;
    out.total.errors += s.errors;
    if (per_shard) out.shards.push_back(s);
  }
  out.fetched_ahead = get(counters_->fetched_ahead);
  out.ahead_dropped = get(counters_->ahead_dropped);
  out.wait_timeouts = get(counters_->wait_timeouts);
  out.cache_write_errors = get(counters_->cache_write_errors);
  out.located_reads = get(counters_->located_reads);
  out.fetches_running = get(counters_->running);
  out.range_reads = get(counters_->range_reads);
  out.range_bytes = get(counters_->range_bytes);
  out.demand_waits = get(counters_->demand_waits);
  out.demand_wait_us = get(counters_->demand_wait_us);
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.queued = ranges_.size() + demand_.size() + ahead_.size();
  }
  out.chunk_size = options_.chunk_size;
  out.threads = options_.threads;
  out.cache = cache_->stats();
  out.requests = requests_.Snapshot();
  return out;
}

}  // namespace shardfs::reader
