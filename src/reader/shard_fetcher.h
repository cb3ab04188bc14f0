// ShardFetcher: the read path of shards that are not read straight from a
// local descriptor; it implements ChunkedReader (src/reader/chunked_reader.h), the
// interface through which an OpenShard reads them. Remote shards (http,
// https, s3 URLs in the index), and local ones behind a cache (-o cache_dir
// for a shard directory on NFS or Lustre), are read in aligned chunks: chunk
// i of a shard is bytes [i * chunk_size, min(size, (i + 1) * chunk_size)). A
// read is answered from the ChunkCache (src/reader/chunk_cache.h) or from the
// chunks it needs, fetched whole; a small file thereby brings its neighbours
// along.
//
// Fetching. `threads` fetcher threads, each with its own HttpClient (one
// kept-alive connection each), take jobs from three queues: ranges a reader
// waits for (demand first, below), then chunks a reader waits for, then
// chunks fetched ahead. Each chunk is fetched once at a
// time (single flight): a second reader of a chunk being fetched waits for
// that fetch. A reader whose reads of a shard move chunk by chunk is
// sequential: the chunks ahead of it are requested, a window that starts at
// one chunk and doubles on each step up to `max_ahead` (as the mount's
// push-ahead grows), crossing file boundaries as the shard does. A read a
// little behind the furthest chunk read (the mount's push-ahead reads files
// before the program does) stays sequential; a read anywhere else resets the
// window.
//
// Demand first (FetcherOptions::demand_range; local shards, which sit on a
// network filesystem). A shuffled reader touches a new chunk with nearly
// every read, so waiting for whole chunks would move most of the dataset
// before the first batch. Instead a small read of a chunk that is neither
// cached nor being fetched fetches just its own bytes, on a queue ahead of
// every chunk, and its chunk is queued behind it (as a fetch ahead, which
// may be dropped: a later read queues it again). A read that follows the
// shard's last read (a sequential reader, the mount's push-ahead) waits for
// the whole chunk as before, and so does any read of a chunk whose fetch
// has started. While demand first is on, whole chunks take at most
// threads - threads/4 fetcher threads, so a range never waits for a
// whole chunk to end before it starts. A range's bytes go to its reader
// only; the cache stores whole chunks.
//
// Once per node. Before fetching a chunk a fetcher thread claims it in the
// disk cache (ChunkCache::Claim): a chunk another process of the node stored
// meanwhile is read from there, and one another process is fetching is
// waited for, at most the cache's claim_wait, then fetched here after all.
//
// Never a hang, never wrong bytes. A reader waits for a chunk at most the
// claim's wait plus the fetch's own bound (retry budget + connect and stall
// timeouts + 2 s), then gets IoError; the fetch itself ends within the retry
// budget (the HttpClient's contract). A reader only ever waits for a fetcher
// thread, never for another request, and a fetcher thread holds no lock
// across a fetch that another process waits on. Bytes come from a response the HttpClient has
// proven to be the asked range of the indexed object (the total size, and
// the indexed ETag, else Last-Modified, on the response itself: see
// src/remote/http_client.h), or from a cached chunk whose checksum held.
//
// Errors are those of ChunkedReader: Corruption when the server shows the
// shard is not the one indexed, IoError for everything else, a 404 included
// (a missing shard is an I/O error of the files in it, not "no such file").
//
// What counts as a re-use for the cache's policy: a read of a chunk that is
// not among the last few chunks of that shard read or fetched ahead. The many
// reads of one chunk during a sweep (a chunk holds hundreds of small files)
// are one use; a chunk read again after the reader moved on is a re-use.
//
// Thread safety: every public method may be called from any thread once
// Start has run. Queues and the in-flight table are guarded by mu_, the
// per-shard reader state by its own mutex, the counters are atomics.
#ifndef SHARDFS_SRC_READER_SHARD_FETCHER_H_
#define SHARDFS_SRC_READER_SHARD_FETCHER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "src/reader/chunk_cache.h"
#include "src/reader/chunked_reader.h"
#include "src/reader/shard_files.h"
#include "src/remote/aws_config.h"
#include "src/remote/http_client.h"
#include "src/remote/request_stats.h"
#include "src/remote/url.h"

namespace shardfs::reader {

struct FetcherOptions {
  uint64_t chunk_size = 4 << 20;  // -o chunk_size.
  unsigned threads = 8;           // -o fetch_threads: requests in flight at most.
  unsigned max_ahead = 8;         // -o fetch_ahead: chunks ahead of a sequential reader.
  // Demand first (local shards on a network filesystem): a read of at most
  // this many bytes of a chunk that is neither cached nor being fetched, and
  // that does not follow the shard's last read, fetches its own bytes alone,
  // ahead of every chunk, and its chunk is queued behind it; 0: every read
  // waits for its whole chunk.
  uint64_t demand_range = 1 << 20;
  // For tests: called on a fetcher thread before each fetch of a whole
  // chunk (range false) or of a range.
  std::function<void(ChunkKey key, bool range)> before_fetch;
  remote::FetchOptions fetch;  // -o retry_budget, connect_timeout, stall_timeout, ca_file.
  remote::AwsConfig aws;
};

// A shard as the fetcher reads it.
struct FetchShard {
  std::string location;  // A URL, or a local path (read through the fd of its OpenShard).
  bool remote = false;
  uint64_t size = 0;
  std::string etag;      // Sent as If-Match; "" for none.
  int64_t mtime_ns = 0;  // Last-Modified when indexed, held to where etag is ""; 0: none.
};

// Per shard, since the mount started.
struct ShardFetchStats {
  // Handed to the kernel: READ replies and files pushed ahead (a program that
  // overtakes a push READs the file too, so the sum can pass the files' size).
  uint64_t bytes_delivered = 0;
  uint64_t bytes_pushed = 0;   // Of bytes_delivered, the pushes.
  uint64_t bytes_fetched = 0;  // Fetched from the shard's source.
  uint64_t chunk_hits = 0;     // Chunk reads the cache answered.
  uint64_t chunk_misses = 0;   // Chunk reads that waited for a fetch.
  uint64_t fetches = 0;        // Chunks fetched (completed).
  uint64_t errors = 0;         // Fetches that failed.
};

struct FetcherStats {
  ShardFetchStats total;
  uint64_t fetched_ahead = 0;       // Chunks fetched for a sequential reader ahead of it.
  uint64_t ahead_dropped = 0;       // Fetches ahead not queued: the queue was full.
  uint64_t wait_timeouts = 0;       // Reads that gave up waiting for a fetch.
  uint64_t cache_write_errors = 0;  // Chunks fetched but not kept (a full disk).
  uint64_t located_reads = 0;       // Reads located in a chunk file on disk (spliced), not copied.
  uint64_t range_reads = 0;         // Reads answered by a fetch of their own bytes (demand first).
  uint64_t range_bytes = 0;         // Of total.bytes_fetched, those fetches' bytes.
  uint64_t demand_waits = 0;        // Reads that waited for a fetch (a chunk or their bytes).
  uint64_t demand_wait_us = 0;      // Their waits, summed.
  uint64_t fetches_running = 0;     // Chunks being fetched now.
  uint64_t queued = 0;              // Chunks and ranges waiting for a fetcher thread.
  uint64_t chunk_size = 0;
  unsigned threads = 0;
  ChunkCacheStats cache;
  remote::RequestStatsSnapshot requests;  // Network requests (remote shards).
  std::vector<ShardFetchStats> shards;    // Filled only when asked for.
};

class ShardFetcher : public ChunkedReader {
 public:
  // `shards[i]` is shard id i. `cache` holds the chunks (memory or disk).
  // Returns InvalidArgument naming a shard whose URL does not parse.
  static Result<std::unique_ptr<ShardFetcher>> Create(FetcherOptions options,
                                                      std::vector<FetchShard> shards,
                                                      std::unique_ptr<ChunkCache> cache);
  ~ShardFetcher() override;  // Stop().
  ShardFetcher(const ShardFetcher&) = delete;
  ShardFetcher& operator=(const ShardFetcher&) = delete;

  void Start();
  // Ends the fetcher threads: fetches under way are cancelled, queued ones
  // fail, and readers waiting for them get IoError at once.
  void Stop();

  Status ReadShard(const ShardHandle& shard, uint64_t pos, size_t len, char* buf) override;
  // A read within one chunk that the disk cache holds, checked: located in
  // the chunk file, not copied.
  Status ReadShardOrLocate(const ShardHandle& shard, uint64_t pos, size_t len, char* buf,
                           FileRange* at) override;
  bool Holds(const ShardHandle& shard, uint64_t pos, size_t len) override;
  void NoteDelivered(index::ShardId shard, uint64_t bytes, bool pushed) override;

  // Brings the chunks covering [pos, pos + len) of `shard` into the cache,
  // `threads` at a time, and waits for them. Adds the bytes fetched to
  // *fetched. IoError or Corruption of the first chunk that failed.
  Status Warm(const ShardHandle& shard, uint64_t pos, uint64_t len, uint64_t* fetched);
  // For mount --check and the recheck of a shard marked bad: a HEAD of
  // remote shard `id`, judged like every response (its size, its ETag or
  // Last-Modified). Corruption if it differs, IoError if it cannot be
  // reached within the retry budget or is not there (404). Ok for a local
  // shard.
  Status CheckRemote(uint32_t id);
  Status Recheck(index::ShardId shard) override { return CheckRemote(shard.value); }
  // Empties the cache (memory and disk).
  void DropCache() { cache_->Clear(); }

  FetcherStats stats(bool per_shard) const;
  const FetcherOptions& options() const { return options_; }
  // How long a reader waits for a chunk at most.
  std::chrono::milliseconds wait_bound() const;

 private:
  struct Inflight;
  struct Job;
  struct ShardState;
  struct Counters;
  struct KeyHash {
    size_t operator()(const ChunkKey& k) const noexcept {
      return static_cast<size_t>((k.index * 0x9E3779B97F4A7C15ull) ^ k.shard);
    }
  };

  ShardFetcher(FetcherOptions options, std::vector<FetchShard> shards,
               std::vector<remote::RemoteUrl> urls, std::unique_ptr<ChunkCache> cache);
  uint64_t ChunkCount(uint32_t shard) const;
  // The in-flight fetch of `key`, queued now if there is none. Null, with
  // *cached set, if the chunk is in the cache (stored meanwhile); null when
  // stopping; null for `ahead` (a fetch ahead of a reader) when the queue of
  // such fetches is full.
  std::shared_ptr<Inflight> Request(const ShardHandle& shard, ChunkKey key, bool ahead,
                                    bool* cached, bool even_if_cached = false);
  // Demand first: the started fetch of `key`'s whole chunk if there is one
  // (*range false), else a fetch of bytes [offset, offset + len) of the
  // chunk alone, queued ahead of every chunk (*range true). Null when
  // stopping.
  std::shared_ptr<Inflight> RequestRange(const ShardHandle& shard, ChunkKey key, uint64_t offset,
                                         size_t len, bool* range);
  // Waits for `f` (bounded) and copies [offset, offset + len) of what it
  // fetched (its chunk, or its range from offset 0).
  Status Await(Inflight& f, ChunkKey key, uint64_t offset, size_t len, char* buf);
  // Notes a read of bytes [pos, pos + len), chunks [first, last], of
  // `shard`: whether each chunk is a re-use (bit i of *reuse for chunk
  // first + i, up to 64), the chunks to fetch ahead, [*ahead_from,
  // *ahead_to), and whether the read starts where the shard's last read
  // ended, give or take a member's header (*follows).
  void NoteRead(uint32_t shard, uint64_t pos, uint64_t len, uint64_t first, uint64_t last,
                uint64_t* reuse, uint64_t* ahead_from, uint64_t* ahead_to, bool* follows);
  // Whether a fetcher thread may start a whole chunk now: with demand first,
  // some threads are kept for ranges. REQUIRES: mu_ held.
  bool WholeSlotFree() const;
  void Run();
  // `client`: the thread's own, made here at its first remote fetch.
  Status Fetch(std::unique_ptr<remote::HttpClient>& client, const Job& job, char* data, size_t len);
  // Fetches a range job's bytes and hands them to its waiting reader.
  void RunRange(std::unique_ptr<remote::HttpClient>& client, const Job& job);

  FetcherOptions options_;  // Set in the constructor, then read-only.
  const std::vector<FetchShard> shards_;
  const std::vector<remote::RemoteUrl> urls_;  // By shard; empty for local ones.
  const std::unique_ptr<ChunkCache> cache_;
  std::unique_ptr<ShardState[]> state_;
  std::unique_ptr<std::atomic<uint64_t>[]> shard_counters_;  // 7 per shard: ShardCounter.
  std::unique_ptr<Counters> counters_;
  remote::RequestStats requests_;
  std::atomic<bool> cancel_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> ranges_;                                                     // Guarded by mu_.
  std::deque<Job> demand_;                                                     // Guarded by mu_.
  std::deque<Job> ahead_;                                                      // Guarded by mu_.
  std::unordered_map<ChunkKey, std::shared_ptr<Inflight>, KeyHash> inflight_;  // Guarded by mu_.
  bool stop_ = false;                                                          // Guarded by mu_.
  unsigned whole_running_ = 0;        // Guarded by mu_: whole chunks being fetched.
  std::vector<std::thread> threads_;  // Only touched by Start and Stop.
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_SHARD_FETCHER_H_
