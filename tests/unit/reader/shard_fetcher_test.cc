// src/reader/shard_fetcher.h on local shards read through it (no network): every
// read returns the file's own bytes, across chunk boundaries and in the short
// last chunk, and a read past the end fails; one fetch per chunk however many
// readers wait for it; a sequential reader is fetched ahead of and a random
// one is not; a sweep's many reads of a chunk count as one use, so a sweep
// leaves the cache's main queue (the re-used set) alone; Warm and DropCache;
// Stop never leaves a reader hanging. Demand first: a small read of a cold
// chunk gets its own bytes while the chunk is still on its way, a read that
// follows waits for the chunk, and whole chunks leave fetcher threads free
// for such reads.
//
// Truth is the file's bytes as written, never the fetcher's own output.
#include "src/reader/shard_fetcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <latch>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

using shardfs::testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kFetchChunk = 64 << 10;
// 64 full chunks and a short last one.
constexpr uint64_t kSize = 64 * kFetchChunk + 1000;
constexpr uint64_t kChunks = 65;
constexpr size_t kPage = 4096;

struct RigOptions {
  uint64_t cache_chunks = kChunks;  // Cache capacity, in full chunks.
  unsigned threads = 4;
  unsigned max_ahead = 4;
  uint64_t demand_range = 0;  // Off unless a test is about it: reads wait for whole chunks.
  bool gate = false;          // Fetches of whole chunks wait for the gate (ChunkGate).
};

// Holds fetches of whole chunks until Open, each for 5 s at most (then it
// notes a timeout: a test that needed the hold fails, it does not hang).
class ChunkGate {
 public:
  void Hold(bool range) {
    if (range) return;
    std::unique_lock<std::mutex> lock(mu_);
    ++held_;
    cv_.notify_all();
    if (!cv_.wait_for(lock, std::chrono::seconds(5), [&] { return open_; })) timed_out_ = true;
    --held_;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits (5 s at most) until `n` fetches are held; true if they are.
  bool WaitHeld(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return held_ >= n; });
  }
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  bool timed_out() {
    std::lock_guard<std::mutex> lock(mu_);
    return timed_out_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int held_ = 0;
  bool timed_out_ = false;
};

uint64_t ChunksCovered(uint64_t pos, uint64_t len) {
  return (pos + len - 1) / kFetchChunk - pos / kFetchChunk + 1;
}

class ShardFetcherTest : public ::testing::Test {
 protected:
  // One local shard of pseudo-random bytes behind a fetcher with a memory
  // cache, started.
  void Make(RigOptions o = {}) {
    path_ = dir_ / "shard-0.bin";
    data_ = shardfs::testing::PseudoRandomBytes(kSize, 20240611);
    shardfs::testing::WriteFile(path_, data_);
    auto cache = ChunkCache::Open(ChunkCacheOptions{"", o.cache_chunks * kFetchChunk, kFetchChunk},
                                  {ChunkShard{path_ + " test", kSize}});
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    FetcherOptions fo;
    fo.chunk_size = kFetchChunk;
    fo.threads = o.threads;
    fo.max_ahead = o.max_ahead;
    fo.demand_range = o.demand_range;
    if (o.gate) fo.before_fetch = [this](ChunkKey, bool range) { gate_.Hold(range); };
    // Short bounds: a reader left waiting shows as a failed deadline in
    // seconds, not as a hung test.
    fo.fetch.retry_budget = std::chrono::milliseconds{200};
    fo.fetch.connect_timeout = std::chrono::milliseconds{100};
    fo.fetch.stall_timeout = std::chrono::milliseconds{100};
    auto f =
        ShardFetcher::Create(fo, {FetchShard{path_, false, kSize, ""}}, std::move(cache).value());
    ASSERT_TRUE(f.ok()) << f.status().message();
    fetcher_ = std::move(f).value();
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path_;
    shard_ = std::make_shared<OpenShard>(index::ShardId{0}, fd, fetcher_.get());
    fetcher_->Start();
  }

  // Reads [pos, pos + len) through the fetcher and compares with the file.
  ::testing::AssertionResult ReadMatches(uint64_t pos, size_t len) {
    std::string buf(len, '\0');
    Status st = shard_->ReadAt(buf.data(), len, pos);
    if (!st.ok()) {
      return ::testing::AssertionFailure()
             << "read [" << pos << ", +" << len << "): " << st.message();
    }
    if (std::memcmp(buf.data(), data_.data() + pos, len) != 0) {
      return ::testing::AssertionFailure() << "read [" << pos << ", +" << len << "): wrong bytes";
    }
    return ::testing::AssertionSuccess();
  }

  // Reads the whole file front to back in 4 KiB reads.
  void Sweep() {
    for (uint64_t pos = 0; pos < kSize; pos += kPage) {
      ASSERT_TRUE(ReadMatches(pos, std::min<uint64_t>(kPage, kSize - pos)));
    }
  }

  // One 4 KiB read at the start of chunk `c`.
  void ReadChunk(uint64_t c) {
    ASSERT_TRUE(ReadMatches(c * kFetchChunk, std::min<uint64_t>(kPage, kSize - c * kFetchChunk)))
        << c;
  }

  FetcherStats Stats() { return fetcher_->stats(false); }

  // Waits until no fetch runs or is queued (twice in a row, 5 ms apart: a
  // job just taken is counted as running a moment later). A fetch ahead
  // nobody waits for, or a second fetch of a chunk (see ...ShareOneFetch),
  // may still end after the read that asked for it.
  void WaitIdle() {
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (int idle = 0; idle < 2;) {
      FetcherStats s = Stats();
      idle = s.fetches_running == 0 && s.queued == 0 ? idle + 1 : 0;
      ASSERT_TRUE(Clock::now() < deadline) << "the fetcher is still busy after 2 s";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void TearDown() override { gate_.Open(); }

  ChunkGate gate_;  // Before fetcher_: its threads may use it until they end.
  TempDir dir_;
  std::string path_;
  std::string data_;
  std::unique_ptr<ShardFetcher> fetcher_;
  ShardHandle shard_;
};

TEST_F(ShardFetcherTest, ReadsReturnTheFilesBytes) {
  ASSERT_NO_FATAL_FAILURE(Make());
  struct Range {
    uint64_t pos, len;
  };
  std::vector<Range> reads = {
      {0, 1},
      {kFetchChunk - 1, 2},                      // Across the first boundary.
      {3 * kFetchChunk - 10, kFetchChunk + 20},  // Three chunks, partly each.
      {5 * kFetchChunk, kFetchChunk},            // Exactly one chunk.
      {kSize - 1000, 1000},                      // The whole short last chunk.
      {kSize - 1, 1},                            // The last byte.
      {64 * kFetchChunk - 5, 1005},              // Into the last chunk, to the end.
      {20 * kFetchChunk + 7, 5 * kFetchChunk},   // Six chunks.
  };
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    uint64_t pos = rng() % kSize;
    uint64_t len = 1 + rng() % std::min<uint64_t>(3 * kFetchChunk, kSize - pos);
    reads.push_back({pos, len});
  }
  reads.push_back({0, kSize});  // Last: every chunk has been fetched then.
  uint64_t parts = 0;
  for (const Range& r : reads) {
    ASSERT_TRUE(ReadMatches(r.pos, r.len));
    parts += ChunksCovered(r.pos, r.len);
  }
  char zero;
  EXPECT_TRUE(shard_->ReadAt(&zero, 0, kSize).ok());  // Empty, at the end: nothing to read.

  ASSERT_NO_FATAL_FAILURE(WaitIdle());
  FetcherStats s = Stats();
  // Delivered bytes are what the caller says it handed on, not what it read.
  EXPECT_EQ(s.total.bytes_delivered, 0u);
  EXPECT_EQ(s.total.chunk_hits + s.total.chunk_misses, parts);
  // The cache holds the file: each chunk fetched and stored once.
  EXPECT_EQ(s.cache.inserts, kChunks);
  EXPECT_EQ(s.total.fetches, kChunks);
  EXPECT_EQ(s.total.bytes_fetched, kSize);
  EXPECT_EQ(s.total.errors, 0u);
  EXPECT_EQ(s.wait_timeouts, 0u);
  EXPECT_EQ(s.cache.resident_chunks, kChunks);
  EXPECT_EQ(s.chunk_size, kFetchChunk);
  shard_->NoteDelivered(1000, false);
  shard_->NoteDelivered(300, true);
  fetcher_->NoteDelivered(index::ShardId{1}, 77, false);  // No such shard: ignored.
  FetcherStats per = fetcher_->stats(true);
  ASSERT_EQ(per.shards.size(), 1u);
  EXPECT_EQ(per.shards[0].bytes_delivered, 1300u);
  EXPECT_EQ(per.shards[0].bytes_pushed, 300u);
  EXPECT_EQ(per.total.bytes_delivered, 1300u);
  EXPECT_EQ(per.shards[0].fetches, per.total.fetches);

  // Past the end: an error, and the buffer is not passed off as data.
  const Range past[] = {{kSize - 10, 20},
                        {kSize, 1},
                        {kSize + kFetchChunk, 10},
                        {0, kSize + 1},
                        {UINT64_MAX - 5, 10}};
  for (const Range& r : past) {
    std::string buf(r.len, '\x5a');
    Status st = shard_->ReadAt(buf.data(), r.len, r.pos);
    EXPECT_FALSE(st.ok()) << r.pos << "+" << r.len;
    EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  }
  FetcherStats after = Stats();
  EXPECT_EQ(after.total.fetches, s.total.fetches);
  EXPECT_EQ(after.total.chunk_hits + after.total.chunk_misses, parts);
}

TEST_F(ShardFetcherTest, ReadersOfAChunkBeingFetchedShareOneFetch) {
  ASSERT_NO_FATAL_FAILURE(Make());
  constexpr int kReaders = 8;
  // Far apart (no reader is sequential, nothing is fetched ahead); the last
  // is the short one.
  const uint64_t chunks[] = {3, 10, 17, 24, 40, 64};
  uint64_t round = 0;
  for (uint64_t c : chunks) {
    ++round;
    std::latch go(kReaders);
    std::vector<std::thread> readers;
    std::atomic<int> bad{0};
    const uint64_t base = c * kFetchChunk;
    const uint64_t clen = std::min(kFetchChunk, kSize - base);
    for (int t = 0; t < kReaders; ++t) {
      readers.emplace_back([&, t] {
        const uint64_t off = uint64_t(t) * 97 % clen;
        const size_t len = static_cast<size_t>(std::min<uint64_t>(900, clen - off));
        std::string buf(len, '\0');
        go.arrive_and_wait();
        Status st = shard_->ReadAt(buf.data(), len, base + off);
        if (!st.ok() || std::memcmp(buf.data(), data_.data() + base + off, len) != 0) ++bad;
      });
    }
    for (std::thread& th : readers) th.join();
    EXPECT_EQ(bad.load(), 0) << "chunk " << c;
    FetcherStats s = Stats();
    EXPECT_EQ(s.cache.inserts, round) << "chunk " << c;
    EXPECT_EQ(s.total.fetches, round) << "chunk " << c;
    EXPECT_EQ(s.total.chunk_hits + s.total.chunk_misses, round * kReaders);
    EXPECT_GE(s.total.chunk_misses, round);
  }
  FetcherStats s = Stats();
  // Readers that asked while the fetch ran shared it; one that missed the
  // cache just before the fetch stored the chunk reads it from the cache.
  EXPECT_EQ(s.total.fetches, round);
  EXPECT_EQ(s.fetched_ahead, 0u);
  EXPECT_EQ(s.total.errors, 0u);
}

TEST_F(ShardFetcherTest, SequentialReaderIsFetchedAhead) {
  ASSERT_NO_FATAL_FAILURE(Make());
  // Like a loader that does something with each file: a pause per chunk, so
  // that on a loaded machine the fetcher threads get to run.
  for (uint64_t pos = 0; pos < kSize; pos += kPage) {
    ASSERT_TRUE(ReadMatches(pos, std::min<uint64_t>(kPage, kSize - pos)));
    if ((pos + kPage) % kFetchChunk == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  FetcherStats s = Stats();
  EXPECT_GT(s.fetched_ahead, kChunks / 2);
  EXPECT_EQ(s.cache.inserts, kChunks);
  // Only the first chunks (window still 0 or 1), and any the reader caught
  // up with, are waited for.
  EXPECT_LT(s.total.chunk_misses, kChunks / 4) << s.fetched_ahead << " fetched ahead";
  EXPECT_EQ(s.total.chunk_hits + s.total.chunk_misses, (kSize + kPage - 1) / kPage);
}

TEST_F(ShardFetcherTest, RandomReaderIsNotFetchedAhead) {
  ASSERT_NO_FATAL_FAILURE(Make());
  // Every chunk once, each 29 or 36 chunks from the one before: never the
  // next chunk nor a few behind (max_ahead + 1), which would count as a
  // sequential step. (A random shuffle has about one such step.)
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < kChunks; ++i) order.push_back(i * 29 % kChunks);
  std::mt19937_64 rng(11);
  for (uint64_t c : order) {
    const uint64_t clen = std::min(kFetchChunk, kSize - c * kFetchChunk);
    const uint64_t off = rng() % (clen - 100);
    ASSERT_TRUE(ReadMatches(c * kFetchChunk + off, 100));
  }
  FetcherStats s = Stats();
  EXPECT_EQ(s.fetched_ahead, 0u);
  EXPECT_EQ(s.total.fetches, kChunks);
  EXPECT_EQ(s.total.chunk_misses, kChunks);
  EXPECT_EQ(s.total.chunk_hits, 0u);
}

// Holds tells, without fetching, whether a range's chunks are all here.
TEST_F(ShardFetcherTest, HoldsSaysWhetherARangeNeedsAFetch) {
  ASSERT_NO_FATAL_FAILURE(Make());
  EXPECT_FALSE(shard_->Holds(100, 3 * kFetchChunk));
  ASSERT_TRUE(ReadMatches(3 * kFetchChunk, kFetchChunk));
  EXPECT_TRUE(shard_->Holds(100, 3 * kFetchChunk));
  EXPECT_TRUE(shard_->Holds(kFetchChunk, 3 * kFetchChunk));
  EXPECT_FALSE(shard_->Holds(kFetchChunk + 1, 3 * kFetchChunk));  // Into chunk 4.
  EXPECT_FALSE(shard_->Holds(2, 3 * kFetchChunk - 1));            // From chunk 2.
  EXPECT_FALSE(shard_->Holds(1, kSize));                          // Past the end.
  EXPECT_EQ(Stats().total.fetches, 1u);                           // Holds fetched nothing.
}

// A cache of a quarter of the file: 16 chunks, of which S3-FIFO's small
// queue would hold 1.6 once main holds anything; the ghost keeps 14 keys.
constexpr uint64_t kQuarter = 16;

TEST_F(ShardFetcherTest, SweepCountsEachChunkAsOneUse) {
  ASSERT_NO_FATAL_FAILURE(Make({.cache_chunks = kQuarter}));
  ASSERT_NO_FATAL_FAILURE(Sweep());
  FetcherStats s = Stats();
  // 16 reads of each chunk, none a re-use: nothing earns main.
  EXPECT_GT(s.total.chunk_hits, 10 * kChunks);
  EXPECT_EQ(s.cache.main_chunks, 0u);
  EXPECT_EQ(s.cache.ghost_hits, 0u);
  EXPECT_EQ(s.cache.small_chunks, kQuarter);
  EXPECT_EQ(s.cache.resident_chunks, kQuarter);
  EXPECT_EQ(s.cache.evictions, kChunks - kQuarter);
  EXPECT_EQ(s.cache.inserts, kChunks);
}

TEST_F(ShardFetcherTest, ReusedChunksSurviveASweep) {
  ASSERT_NO_FATAL_FAILURE(Make({.cache_chunks = kQuarter}));
  const uint64_t reused[] = {2, 5, 8, 11};
  for (uint64_t c : reused) ASSERT_NO_FATAL_FAILURE(ReadChunk(c));
  // Far away: 24 other chunks, descending (never a step forward), so the set
  // is no longer among the recent chunks; 16 inserts push it out of the
  // cache (into the ghost), the 8 after leave it in the ghost.
  for (uint64_t c = 64; c >= 41; --c) ASSERT_NO_FATAL_FAILURE(ReadChunk(c));
  FetcherStats s = Stats();
  ASSERT_EQ(s.total.fetches, 28u);
  ASSERT_EQ(s.cache.main_chunks, 0u);
  // The re-use: each chunk fetched again, straight into main.
  for (uint64_t c : reused) ASSERT_NO_FATAL_FAILURE(ReadChunk(c));
  s = Stats();
  EXPECT_EQ(s.total.fetches, 32u);
  EXPECT_EQ(s.cache.ghost_hits, 4u);
  EXPECT_EQ(s.cache.main_chunks, 4u);

  // The sweep: 61 new chunks pass through small; the set is read from the
  // cache, not fetched.
  const uint64_t inserts = s.cache.inserts;
  ASSERT_NO_FATAL_FAILURE(Sweep());
  ASSERT_NO_FATAL_FAILURE(WaitIdle());
  s = Stats();
  EXPECT_EQ(s.cache.inserts, inserts + kChunks - 4);
  EXPECT_EQ(s.cache.main_chunks, 4u);
  EXPECT_EQ(s.cache.ghost_hits, 4u);
  const uint64_t hits = s.total.chunk_hits, fetches = s.total.fetches;
  for (uint64_t c : reused) ASSERT_NO_FATAL_FAILURE(ReadChunk(c));
  s = Stats();
  EXPECT_EQ(s.total.chunk_hits, hits + 4);
  EXPECT_EQ(s.total.fetches, fetches);
}

TEST_F(ShardFetcherTest, WarmFillsTheCacheAndDropCacheEmptiesIt) {
  ASSERT_NO_FATAL_FAILURE(Make());
  uint64_t fetched = 0;
  // Chunks 10 to 13.
  Status st = fetcher_->Warm(shard_, 10 * kFetchChunk + 100, 3 * kFetchChunk, &fetched);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(fetched, 4 * kFetchChunk);
  FetcherStats s = Stats();
  EXPECT_EQ(s.total.fetches, 4u);
  EXPECT_EQ(s.cache.resident_chunks, 4u);
  EXPECT_EQ(s.total.bytes_delivered, 0u);

  ASSERT_TRUE(ReadMatches(10 * kFetchChunk, 4 * kFetchChunk));
  s = Stats();
  EXPECT_EQ(s.total.fetches, 4u);
  EXPECT_EQ(s.total.chunk_hits, 4u);
  EXPECT_EQ(s.total.chunk_misses, 0u);

  // Warm again: nothing to fetch. Past the end: only the short last chunk.
  fetched = 0;
  ASSERT_TRUE(fetcher_->Warm(shard_, 10 * kFetchChunk, 4 * kFetchChunk, &fetched).ok());
  EXPECT_EQ(fetched, 0u);
  ASSERT_TRUE(fetcher_->Warm(shard_, kSize - 500, 10 * kFetchChunk, &fetched).ok());
  EXPECT_EQ(fetched, kSize - 64 * kFetchChunk);
  EXPECT_EQ(Stats().total.fetches, 5u);

  fetcher_->DropCache();
  s = Stats();
  EXPECT_EQ(s.cache.resident_chunks, 0u);
  EXPECT_EQ(s.cache.resident_bytes, 0u);
  ASSERT_TRUE(ReadMatches(11 * kFetchChunk + 5, 10));
  s = Stats();
  EXPECT_EQ(s.total.fetches, 6u);
  EXPECT_EQ(s.total.chunk_misses, 1u);

  // The whole file, then every read is a hit.
  fetched = 0;
  ASSERT_TRUE(fetcher_->Warm(shard_, 0, kSize, &fetched).ok());
  EXPECT_EQ(fetched, kSize - kFetchChunk);  // Chunk 11 was there.
  const uint64_t misses = Stats().total.chunk_misses;
  ASSERT_NO_FATAL_FAILURE(Sweep());
  s = Stats();
  EXPECT_EQ(s.total.chunk_misses, misses);
  EXPECT_EQ(s.total.fetches, 6u + kChunks - 1);
}

TEST_F(ShardFetcherTest, ReadAfterStopFailsPromptly) {
  ASSERT_NO_FATAL_FAILURE(Make());
  ASSERT_TRUE(ReadMatches(0, 100));
  fetcher_->Stop();
  auto t0 = Clock::now();
  std::string buf(100, '\0');
  Status st = shard_->ReadAt(buf.data(), buf.size(), 30 * kFetchChunk);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.message();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
  // A chunk in the cache may still be served, but only with its own bytes.
  st = shard_->ReadAt(buf.data(), 50, 10);
  if (st.ok()) {
    EXPECT_EQ(0, std::memcmp(buf.data(), data_.data() + 10, 50));
  }
  fetcher_->Stop();  // Again: nothing left to do.
}

TEST_F(ShardFetcherTest, StopWhileReadersWaitEndsEveryRead) {
  // A cache of 2 chunks: nearly every read waits for a fetch.
  ASSERT_NO_FATAL_FAILURE(Make({.cache_chunks = 2, .threads = 2}));
  constexpr int kReaders = 4;
  std::atomic<int> wrong{0}, started{0};
  std::atomic<int> done{0};
  std::vector<Clock::time_point> ended(kReaders);
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::string buf(3 * kFetchChunk, '\0');
      for (;;) {
        const uint64_t pos = rng() % kSize;
        const size_t len = 1 + rng() % std::min<uint64_t>(buf.size(), kSize - pos);
        Status st = shard_->ReadAt(buf.data(), len, pos);
        if (!st.ok()) break;  // Only the stop ends a read with an error here.
        if (std::memcmp(buf.data(), data_.data() + pos, len) != 0) ++wrong;
        ++started;
      }
      ended[t] = Clock::now();
      ++done;
    });
  }
  const auto t0 = Clock::now();
  while (started.load() < 40 * kReaders && done.load() == 0 &&
         Clock::now() - t0 < std::chrono::seconds(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(done.load(), 0) << "a read failed before Stop";
  fetcher_->Stop();
  const auto stopped = Clock::now();
  while (done.load() < kReaders && Clock::now() - stopped < std::chrono::seconds(1)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(done.load(), kReaders) << "a reader still waits 1 s after Stop";
  for (std::thread& th : readers) th.join();  // Bounded by wait_bound() at worst.
  EXPECT_EQ(wrong.load(), 0);
  for (int t = 0; t < kReaders; ++t) EXPECT_LT(ended[t] - stopped, std::chrono::seconds(1)) << t;
  EXPECT_EQ(Stats().total.errors + Stats().wait_timeouts, 0u);
}

}  // namespace
}  // namespace shardfs::reader

namespace shardfs::reader {
namespace {

constexpr uint64_t kRange = 1 << 20;

TEST_F(ShardFetcherTest, DemandReadOfAColdChunkIsAnsweredBeforeItsChunk) {
  ASSERT_NO_FATAL_FAILURE(Make({.demand_range = kRange, .gate = true}));
  const uint64_t base = 5 * kFetchChunk;
  // The chunk's fetch is held; the read gets its own bytes all the same.
  ASSERT_TRUE(ReadMatches(base + 300, 1000));
  FetcherStats s = Stats();
  EXPECT_EQ(s.range_reads, 1u);
  EXPECT_EQ(s.range_bytes, 1000u);
  EXPECT_EQ(s.total.bytes_fetched, 1000u);
  EXPECT_EQ(s.total.chunk_misses, 1u);
  EXPECT_EQ(s.demand_waits, 1u);
  EXPECT_EQ(s.cache.inserts, 0u);
  EXPECT_EQ(s.total.fetches, 0u);
  // The chunk follows behind it.
  ASSERT_TRUE(gate_.WaitHeld(1));

  // A read that follows (the next member, past its 512-byte header) is a
  // sequential reader's or a push's: it waits for the whole chunk.
  std::atomic<bool> done{false};
  bool same = false;
  std::thread follower([&] {
    same = ReadMatches(base + 1300 + 512, 700);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load()) << "a following read was answered while its chunk was held";
  gate_.Open();
  follower.join();
  EXPECT_TRUE(same);
  ASSERT_NO_FATAL_FAILURE(WaitIdle());
  s = Stats();
  EXPECT_EQ(s.range_reads, 1u);
  EXPECT_EQ(s.cache.inserts, 1u);
  EXPECT_EQ(s.total.fetches, 1u);
  EXPECT_EQ(s.fetched_ahead, 1u);
  EXPECT_EQ(s.total.bytes_fetched, 1000u + kFetchChunk);

  // Now cached: a read anywhere in it is a hit.
  ASSERT_TRUE(ReadMatches(base + 40000, 100));
  s = Stats();
  EXPECT_EQ(s.range_reads, 1u);
  EXPECT_EQ(s.total.chunk_hits, 1u);
  EXPECT_FALSE(gate_.timed_out());
}

TEST_F(ShardFetcherTest, WholeChunksLeaveAThreadForDemandReads) {
  // 4 threads: whole chunks take 3 at most.
  ASSERT_NO_FATAL_FAILURE(Make({.threads = 4, .demand_range = kRange, .gate = true}));
  uint64_t fetched = 0;
  Status warm;
  std::thread warmer(
      [&] { warm = fetcher_->Warm(shard_, 10 * kFetchChunk, 8 * kFetchChunk, &fetched); });
  ASSERT_TRUE(gate_.WaitHeld(3));
  // Every thread but one holds a whole chunk, and more chunks wait for one.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(gate_.held(), 3);
  ASSERT_TRUE(ReadMatches(40 * kFetchChunk + 123, 4000));
  ASSERT_TRUE(ReadMatches(kSize - 900, 900));  // The short last chunk.
  EXPECT_EQ(Stats().range_reads, 2u);
  EXPECT_EQ(gate_.held(), 3);
  gate_.Open();
  warmer.join();
  EXPECT_TRUE(warm.ok()) << warm.message();
  EXPECT_EQ(fetched, 8 * kFetchChunk);
  EXPECT_FALSE(gate_.timed_out()) << "a demand read waited for a held chunk";
  ASSERT_TRUE(ReadMatches(12 * kFetchChunk + 5, 2 * kFetchChunk));  // Warmed: hits.
  EXPECT_EQ(Stats().range_reads, 2u);
}

TEST_F(ShardFetcherTest, RandomReaderGetsRangesAndEveryChunkBehind) {
  ASSERT_NO_FATAL_FAILURE(Make({.demand_range = kRange}));
  std::mt19937_64 rng(13);
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < kChunks; ++i) {
    const uint64_t c = i * 29 % kChunks;
    const uint64_t clen = std::min(kFetchChunk, kSize - c * kFetchChunk);
    const uint64_t off = rng() % (clen - 500);
    const size_t len = 1 + rng() % 500;
    ASSERT_TRUE(ReadMatches(c * kFetchChunk + off, len)) << c;
    bytes += len;
  }
  ASSERT_NO_FATAL_FAILURE(WaitIdle());
  FetcherStats s = Stats();
  // Each chunk's first read fetched its own bytes; each chunk was then
  // fetched behind it, or not queued when the queue was full.
  EXPECT_EQ(s.range_reads, kChunks);
  EXPECT_EQ(s.range_bytes, bytes);
  EXPECT_EQ(s.cache.inserts + s.ahead_dropped, kChunks);
  EXPECT_EQ(s.fetched_ahead, s.cache.inserts);
  EXPECT_GT(s.cache.inserts, 0u);
  EXPECT_EQ(s.total.errors, 0u);
  // Reads of larger than demand_range wait for their chunks, and get the
  // file's bytes across every chunk.
  ASSERT_TRUE(ReadMatches(0, kSize));
  EXPECT_EQ(Stats().range_reads, kChunks);
}

}  // namespace
}  // namespace shardfs::reader
