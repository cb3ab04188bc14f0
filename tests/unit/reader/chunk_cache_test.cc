// src/reader/chunk_cache.h: S3-FIFO accounting and scan resistance (against an LRU
// model of the same trace), the capacity bound in memory and on disk,
// restarts, damaged and leftover files, a kill -9 mid-Insert, one directory
// shared by several caches and processes (found by name, published whole,
// claimed before a fetch, one bound), and readers racing inserters,
// evictions and Clear.
#include "src/reader/chunk_cache.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "src/reader/cache_dir.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint64_t kChunk = 4096;
// Each shard: 100 full chunks and a short last one.
constexpr uint64_t kShardSize = 100 * kChunk + 100;

std::vector<ChunkShard> Shards(int n, const std::string& tag = "v1") {
  std::vector<ChunkShard> shards;
  for (int i = 0; i < n; ++i) {
    shards.push_back({"https://example.invalid/s" + std::to_string(i) + ".tar " + tag, kShardSize});
  }
  return shards;
}

// The true bytes of a chunk: a fixed function of its key.
std::string Bytes(ChunkKey key, uint64_t chunk = kChunk, uint64_t size = kShardSize) {
  uint64_t len = std::min(chunk, size - key.index * chunk);
  return shardfs::testing::PseudoRandomBytes(len, key.shard * 1000003ull + key.index);
}

std::unique_ptr<ChunkCache> OpenOk(ChunkCacheOptions o, std::vector<ChunkShard> shards) {
  auto r = ChunkCache::Open(std::move(o), std::move(shards));
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

void InsertOk(ChunkCache& c, ChunkKey key) {
  std::string b = Bytes(key);
  Status st = c.Insert(key, b.data(), b.size());
  ASSERT_TRUE(st.ok()) << st.message();
}

// Reads the whole chunk; true if resident and equal to its true bytes.
bool ReadMatches(ChunkCache& c, ChunkKey key, bool reference = false) {
  std::string want = Bytes(key);
  std::string got(want.size(), '\0');
  if (!c.Read(key, 0, got.size(), got.data(), reference)) return false;
  EXPECT_EQ(got, want) << "shard " << key.shard << " chunk " << key.index;
  return got == want;
}

// Where the cache keeps its files: a subdirectory of cache_dir.
std::string Files(const std::string& cache_dir) { return cache_dir + "/" + ChunkCache::kChunkDir; }

// The names in cache_dir's subdirectory that end with `suffix` (or, for
// "tmp-", begin with it).
std::vector<std::string> Names(const std::string& cache_dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(Files(cache_dir))) {
    std::string name = e.path().filename();
    if (name.ends_with(suffix) || (suffix == "tmp-" && name.starts_with("tmp-"))) {
      out.push_back(name);
    }
  }
  return out;
}

// A process that has exited (its pid free again, or someone else's).
ProcessStamp DeadProcess() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return ProcessStamp{pid, 1};  // No process of ours started at tick 1.
}

uint64_t ChunkFileBytes(const std::string& dir) {
  uint64_t sum = 0;
  for (const std::string& n : Names(dir, ".chunk")) {
    std::error_code ec;  // Deleted meanwhile by another writer: not there.
    const uint64_t size = fs::file_size(Files(dir) + "/" + n, ec);
    if (!ec) sum += size;
  }
  return sum;
}

// Processes that open one fresh cache directory at once all get it: one
// writes the marker and then its lock file, and another that looked for the
// marker just before must not take the lock file for a stranger's.
TEST(CacheDirTest, AFreshDirectoryOpenedByManyProcessesAtOnce) {
  testing::TempDir dir;
  for (int round = 0; round < 40; ++round) {
    const std::string top = dir / fmt::format("c{}", round);
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < 4; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // Released all at once.
        reader::OpenCacheDir(top, "sub", std::chrono::seconds(10)).ok() ? ::_exit(0) : ::_exit(1);
      }
      ASSERT_GT(pid, 0);
      children.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    for (pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
  }
}

TEST(ChunkCacheTest, HitMissEvictAccounting) {
  auto c = OpenOk({"", 4 * kChunk, kChunk}, Shards(1));
  ASSERT_TRUE(c);
  for (uint64_t i = 0; i < 4; ++i) InsertOk(*c, {0, i});
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(ReadMatches(*c, {0, i}));
  char buf[16];
  EXPECT_FALSE(c->Read({0, 7}, 0, sizeof(buf), buf, false));
  // A range inside the chunk.
  std::string want = Bytes({0, 2});
  ASSERT_TRUE(c->Read({0, 2}, 1000, sizeof(buf), buf, true));
  EXPECT_EQ(std::string(buf, sizeof(buf)), want.substr(1000, sizeof(buf)));
  // Past the chunk's end: a miss, not a copy.
  EXPECT_FALSE(c->Read({0, 2}, kChunk - 8, sizeof(buf), buf, false));
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.hits, 5u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.inserts, 4u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.resident_chunks, 4u);
  EXPECT_EQ(s.resident_bytes, 4 * kChunk);
  EXPECT_EQ(s.shard_resident_bytes, std::vector<uint64_t>{4 * kChunk});

  InsertOk(*c, {0, 4});
  InsertOk(*c, {0, 4});  // Already resident: nothing changes.
  s = c->stats();
  EXPECT_EQ(s.inserts, 5u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.resident_chunks, 4u);
  EXPECT_LE(s.resident_bytes, s.capacity);
  // Chunk 2 was referenced, so chunk 0 (the oldest unreferenced) went.
  EXPECT_FALSE(c->Contains({0, 0}));
  EXPECT_TRUE(c->Contains({0, 2}));

  // The short last chunk, and lengths and keys that do not fit.
  InsertOk(*c, {0, 100});
  EXPECT_TRUE(ReadMatches(*c, {0, 100}));
  std::string b = Bytes({0, 5});
  Status st = c->Insert({0, 5}, b.data(), b.size() - 1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("expected 4096"));
  EXPECT_EQ(c->Insert({0, 101}, b.data(), b.size()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Insert({1, 0}, b.data(), b.size()).code(), Status::Code::kInvalidArgument);
}

TEST(ChunkCacheTest, BadOptionsRefused) {
  auto r = ChunkCache::Open({"", kChunk - 1, kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("below one chunk"));
  TempDir dir;
  // On disk a chunk costs its header too.
  r = ChunkCache::Open({dir.path(), kChunk, kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("on-disk overhead"));
  EXPECT_FALSE(ChunkCache::Open({"", kChunk, 0}, Shards(1)).ok());
}

// Random inserts and reads of ~3x capacity: the bound holds after every step,
// in the bookkeeping and in the bytes on disk.
void CheckCapacityBound(const std::string& dir) {
  const uint64_t capacity = dir.empty() ? 10 * kChunk + 123 : 10 * (kChunk + 4096) + 123;
  auto c = OpenOk({dir, capacity, kChunk}, Shards(3));
  ASSERT_TRUE(c);
  uint64_t x = 12345;
  for (int step = 0; step < 400; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ChunkKey key{static_cast<uint32_t>((x >> 33) % 3), (x >> 40) % 12};
    if (!ReadMatches(*c, key, (x >> 20) % 2 == 0)) InsertOk(*c, key);
    ChunkCacheStats s = c->stats();
    ASSERT_LE(s.resident_bytes, capacity) << "step " << step;
    if (!dir.empty()) {
      ASSERT_LE(ChunkFileBytes(dir), capacity) << "step " << step;
    }
  }
  ChunkCacheStats s = c->stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.small_chunks + s.main_chunks, s.resident_chunks);
  if (!dir.empty()) {
    EXPECT_EQ(Names(dir, ".chunk").size(), s.resident_chunks);
  }
}

TEST(ChunkCacheTest, CapacityNeverExceededInMemory) { CheckCapacityBound(""); }

TEST(ChunkCacheTest, CapacityNeverExceededOnDisk) {
  TempDir dir;
  CheckCapacityBound(dir / "cache");
}

// The point of S3-FIFO: a hot set used a few times survives one sweep of 4x
// capacity of new chunks, each used once. An LRU of the same size, fed the
// same trace, loses all of it.
TEST(ChunkCacheTest, ScanResistance) {
  constexpr uint64_t kCap = 20;  // Chunks.
  auto c = OpenOk({"", kCap * kChunk, kChunk}, Shards(2));
  ASSERT_TRUE(c);
  std::list<ChunkKey> lru;  // Front = most recent.
  auto lru_use = [&lru](ChunkKey k) {
    for (auto it = lru.begin(); it != lru.end(); ++it) {
      if (*it == k) {
        lru.erase(it);
        break;
      }
    }
    lru.push_front(k);
    if (lru.size() > kCap) lru.pop_back();
  };
  auto lru_has = [&lru](ChunkKey k) {
    for (const ChunkKey& e : lru) {
      if (e == k) return true;
    }
    return false;
  };

  std::vector<ChunkKey> hot;
  for (uint64_t i = 0; i < 8; ++i) hot.push_back({0, i});
  // The hot set is read again soon after it arrives, then once more.
  for (const ChunkKey& k : hot) {
    if (!ReadMatches(*c, k)) InsertOk(*c, k);
    lru_use(k);
    EXPECT_TRUE(ReadMatches(*c, k, /*reference=*/true));
    lru_use(k);
  }
  for (const ChunkKey& k : hot) {
    EXPECT_TRUE(ReadMatches(*c, k, true));
    lru_use(k);
  }
  // One epoch's sweep: 4x capacity of new chunks, each read several times in
  // a row (a sequential reader) but never re-used.
  for (uint64_t i = 0; i < 4 * kCap; ++i) {
    ChunkKey k{1, i};
    EXPECT_FALSE(ReadMatches(*c, k));
    InsertOk(*c, k);
    for (int j = 0; j < 3; ++j) EXPECT_TRUE(ReadMatches(*c, k, false));
    lru_use(k);
  }
  for (const ChunkKey& k : hot) {
    EXPECT_TRUE(ReadMatches(*c, k, true)) << "hot chunk " << k.index << " was flushed";
    EXPECT_FALSE(lru_has(k));
  }
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.main_chunks, hot.size());
  EXPECT_LE(s.resident_bytes, s.capacity);
  EXPECT_EQ(s.evictions, 8 + 4 * kCap - kCap);
}

// A chunk evicted from small before its re-use returns to main on its next
// insert, and then outlives a sweep.
TEST(ChunkCacheTest, GhostPromotion) {
  const uint64_t kCap = 10;
  auto c = OpenOk({"", kCap * kChunk, kChunk}, Shards(2));
  ASSERT_TRUE(c);
  InsertOk(*c, {0, 0});
  for (uint64_t i = 0; i < kCap; ++i) InsertOk(*c, {1, i});
  EXPECT_FALSE(c->Contains({0, 0}));
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.main_chunks, 0u);
  EXPECT_GE(s.ghost_keys, 1u);
  // The loader comes back for it: a miss, a fetch, an insert into main.
  EXPECT_FALSE(ReadMatches(*c, {0, 0}));
  InsertOk(*c, {0, 0});
  s = c->stats();
  EXPECT_EQ(s.ghost_hits, 1u);
  EXPECT_EQ(s.main_chunks, 1u);
  for (uint64_t i = kCap; i < 5 * kCap; ++i) InsertOk(*c, {1, i});
  EXPECT_TRUE(ReadMatches(*c, {0, 0}));
  // A key never seen before goes to small as usual.
  s = c->stats();
  EXPECT_EQ(s.ghost_hits, 1u);
  EXPECT_EQ(s.main_chunks, 1u);
}

// Main's CLOCK: among main chunks the unreferenced go first, and a full main
// of referenced chunks still makes room (frequencies drain).
TEST(ChunkCacheTest, MainQueueDrainsFrequencies) {
  const uint64_t kCap = 10;
  auto c = OpenOk({"", kCap * kChunk, kChunk}, Shards(2));
  ASSERT_TRUE(c);
  for (uint64_t i = 0; i < 40; ++i) {
    InsertOk(*c, {0, i});
    for (int j = 0; j < 3; ++j) ReadMatches(*c, {0, i}, true);
    ASSERT_LE(c->stats().resident_bytes, kCap * kChunk);
  }
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.resident_chunks, kCap);
  EXPECT_EQ(s.evictions, 30u);
}

TEST(ChunkCacheTest, RestartReusesChunks) {
  TempDir dir;
  const std::string d = dir / "cache";
  {
    auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(2));
    ASSERT_TRUE(c);
    for (uint64_t i = 0; i < 10; ++i) InsertOk(*c, {static_cast<uint32_t>(i % 2), i});
    InsertOk(*c, {1, 100});
  }
  auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(2));
  ASSERT_TRUE(c);
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.reused_at_open, 11u);
  EXPECT_EQ(s.resident_chunks, 11u);
  EXPECT_EQ(s.inserts, 0u);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(ReadMatches(*c, {static_cast<uint32_t>(i % 2), i}));
  EXPECT_TRUE(ReadMatches(*c, {1, 100}));
  // Read twice: the second read skips the check and still matches.
  EXPECT_TRUE(ReadMatches(*c, {0, 0}));
  s = c->stats();
  EXPECT_EQ(s.hits, 12u);
  EXPECT_EQ(s.corrupt_dropped, 0u);
}

TEST(ChunkCacheTest, SmallerCapacityAtOpenEvictsDown) {
  TempDir dir;
  const std::string d = dir / "cache";
  {
    auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    for (uint64_t i = 0; i < 20; ++i) InsertOk(*c, {0, i});
  }
  const uint64_t small = 5 * (kChunk + 4096);
  auto c = OpenOk({d, small, kChunk}, Shards(1));
  ASSERT_TRUE(c);
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.resident_chunks, 5u);
  EXPECT_LE(s.resident_bytes, small);
  EXPECT_LE(ChunkFileBytes(d), small);
  EXPECT_EQ(Names(d, ".chunk").size(), 5u);
  int resident = 0;
  for (uint64_t i = 0; i < 20; ++i) resident += ReadMatches(*c, {0, i});
  EXPECT_EQ(resident, 5);
}

TEST(ChunkCacheTest, DamagedAndLeftoverFilesRejected) {
  TempDir dir;
  const std::string d = dir / "cache";
  std::vector<std::string> names;
  {
    auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    for (uint64_t i = 0; i < 6; ++i) InsertOk(*c, {0, i});
  }
  names = Names(d, ".chunk");
  ASSERT_EQ(names.size(), 6u);
  std::sort(names.begin(), names.end());
  auto path = [&d](const std::string& n) { return Files(d) + "/" + n; };
  // Truncated mid-payload (a torn write that somehow got its name).
  fs::resize_file(path(names[0]), 64 + 100);
  // A header byte changed: the header checksum fails.
  {
    std::string b = shardfs::testing::ReadFile(path(names[1]));
    b[13] ^= 1;
    shardfs::testing::WriteFile(path(names[1]), b);
  }
  // A payload byte changed: looks intact at Open, fails on first read.
  {
    std::string b = shardfs::testing::ReadFile(path(names[2]));
    b[64 + 2000] ^= 0x40;
    shardfs::testing::WriteFile(path(names[2]), b);
  }
  // Garbage with a chunk's name, an empty one, a temp file and a claim left
  // by a dead process, a live process's temp file and claim (kept), and a
  // file that is not the cache's (left alone).
  shardfs::testing::WriteFile(Files(d) + "/00000000000000aa-3.chunk", std::string(5000, 'x'));
  shardfs::testing::WriteFile(Files(d) + "/00000000000000aa-4.chunk", "");
  const ProcessStamp dead = DeadProcess();
  const std::string dead_tmp = FormatOwnedTmpName(dead, 1);
  const std::string live_tmp = FormatOwnedTmpName(ThisProcess(), 99);
  shardfs::testing::WriteFile(Files(d) + "/" + dead_tmp, std::string(3000, 'y'));
  shardfs::testing::WriteFile(Files(d) + "/" + live_tmp, std::string(3000, 'y'));
  shardfs::testing::WriteFile(Files(d) + "/00000000000000aa-5.claim", FormatStamp(dead));
  shardfs::testing::WriteFile(Files(d) + "/00000000000000aa-6.claim", FormatStamp(ThisProcess()));
  shardfs::testing::WriteFile(Files(d) + "/notes.txt", "mine");

  auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(c);
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.reused_at_open, 4u);  // 6 written, 2 damaged in the header or length.
  EXPECT_EQ(s.foreign_chunks, 0u);
  EXPECT_THAT(Names(d, "tmp-"), ::testing::ElementsAre(live_tmp));
  EXPECT_THAT(Names(d, ".claim"), ::testing::ElementsAre("00000000000000aa-6.claim"));
  EXPECT_FALSE(fs::exists(path(names[0])));
  EXPECT_FALSE(fs::exists(path(names[1])));
  EXPECT_FALSE(fs::exists(Files(d) + "/00000000000000aa-3.chunk"));
  EXPECT_FALSE(fs::exists(Files(d) + "/00000000000000aa-4.chunk"));
  EXPECT_TRUE(fs::exists(Files(d) + "/notes.txt"));
  EXPECT_EQ(s.other_files, 1u);
  fs::remove(Files(d) + "/" + live_tmp);

  int good = 0;
  for (uint64_t i = 0; i < 6; ++i) good += ReadMatches(*c, {0, i});
  EXPECT_EQ(good, 3);
  s = c->stats();
  EXPECT_EQ(s.corrupt_dropped, 1u);
  EXPECT_EQ(s.resident_chunks, 3u);
  EXPECT_FALSE(fs::exists(path(names[2])));
  EXPECT_EQ(Names(d, ".chunk").size(), 3u);
}

// A partial range read of a damaged chunk is refused too: the first read
// checks the whole payload, not just the bytes asked for.
TEST(ChunkCacheTest, FirstPartialReadChecksWholePayload) {
  TempDir dir;
  const std::string d = dir / "cache";
  {
    auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    InsertOk(*c, {0, 0});
  }
  std::string p = Files(d) + "/" + Names(d, ".chunk").at(0);
  std::string b = shardfs::testing::ReadFile(p);
  b[64 + kChunk - 1] ^= 1;
  shardfs::testing::WriteFile(p, b);
  auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Contains({0, 0}));
  char buf[10];
  EXPECT_FALSE(c->Read({0, 0}, 0, sizeof(buf), buf, false));
  EXPECT_FALSE(c->Contains({0, 0}));
  EXPECT_EQ(c->stats().corrupt_dropped, 1u);
  EXPECT_EQ(c->stats().hits, 0u);
}

TEST(ChunkCacheTest, ChangedIdentityOrChunkSizeDoesNotMatch) {
  TempDir dir;
  const std::string d = dir / "cache";
  const uint64_t cap = 10 * (kChunk + 4096);
  {
    auto c = OpenOk({d, cap, kChunk}, Shards(1, "etag-1"));
    ASSERT_TRUE(c);
    for (uint64_t i = 0; i < 6; ++i) InsertOk(*c, {0, i});
  }
  {
    // The shard was replaced: same URL and size, another ETag.
    auto c = OpenOk({d, cap, kChunk}, Shards(1, "etag-2"));
    ASSERT_TRUE(c);
    ChunkCacheStats s = c->stats();
    EXPECT_EQ(s.reused_at_open, 0u);
    EXPECT_EQ(s.foreign_chunks, 6u);
    EXPECT_FALSE(ReadMatches(*c, {0, 0}));
    EXPECT_LE(s.resident_bytes, cap);
    // Foreign chunks go first: 6 new chunks leave 4 foreign ones.
    for (uint64_t i = 10; i < 16; ++i) InsertOk(*c, {0, i});
    s = c->stats();
    EXPECT_EQ(s.foreign_chunks, 4u);
    EXPECT_EQ(s.resident_chunks, 6u);
    EXPECT_EQ(Names(d, ".chunk").size(), 10u);
  }
  {
    // Back to the first identity: its 4 remaining chunks are found again.
    auto c = OpenOk({d, cap, kChunk}, Shards(1, "etag-1"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->stats().reused_at_open, 4u);
  }
  {
    // Another chunk size: nothing matches.
    auto c = OpenOk({d, 64 * (2 * kChunk + 4096), 2 * kChunk}, Shards(1, "etag-1"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->stats().reused_at_open, 0u);
    EXPECT_EQ(c->stats().foreign_chunks, 10u);
  }
}

// Locate (the splice path): only a disk chunk whose payload has
// been checked in this process, and the range it gives holds the chunk's
// bytes, still readable after the chunk is dropped.
TEST(ChunkCacheTest, LocateGivesACheckedChunkFilesRange) {
  TempDir dir;
  const std::string d = dir / "cache";
  {
    auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    InsertOk(*c, {0, 3});
  }
  auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(c);
  std::shared_ptr<const UniqueFd> file;
  uint64_t pos = 0;
  // Found at open, not checked yet: Read must see it first.
  EXPECT_FALSE(c->Locate({0, 3}, 100, 200, false, &file, &pos));
  EXPECT_FALSE(file);
  EXPECT_EQ(c->stats().hits, 0u);
  char buf[10];
  ASSERT_TRUE(c->Read({0, 3}, 0, sizeof(buf), buf, false));
  ASSERT_TRUE(c->Locate({0, 3}, 100, 200, false, &file, &pos));
  ASSERT_TRUE(file);
  EXPECT_EQ(c->stats().hits, 2u);
  const std::string want = Bytes({0, 3}).substr(100, 200);
  auto read_range = [&] {
    std::string got(200, '\0');
    EXPECT_EQ(::pread(file->get(), got.data(), got.size(), static_cast<off_t>(pos)), 200);
    return got;
  };
  EXPECT_EQ(read_range(), want);
  // Past the chunk's end, or not resident: not located.
  std::shared_ptr<const UniqueFd> none;
  EXPECT_FALSE(c->Locate({0, 3}, kChunk - 10, 11, false, &none, &pos));
  EXPECT_FALSE(c->Locate({0, 4}, 0, 10, false, &none, &pos));
  EXPECT_FALSE(none);
  // Dropped (and its file deleted) while the range is held: still the bytes.
  c->Clear();
  EXPECT_TRUE(Names(d, ".chunk").empty());
  EXPECT_EQ(read_range(), want);
  // A chunk inserted in this process is checked already (the caller's bytes).
  InsertOk(*c, {0, 5});
  EXPECT_TRUE(c->Locate({0, 5}, 0, kChunk, true, &none, &pos));
  // In memory there is no file.
  auto m = OpenOk({"", 8 * kChunk, kChunk}, Shards(1));
  ASSERT_TRUE(m);
  InsertOk(*m, {0, 1});
  EXPECT_FALSE(m->Locate({0, 1}, 0, 10, false, &none, &pos));
}

TEST(ChunkCacheTest, ClearDropsEverything) {
  auto m = OpenOk({"", 8 * kChunk, kChunk}, Shards(1));
  ASSERT_TRUE(m);
  for (uint64_t i = 0; i < 5; ++i) InsertOk(*m, {0, i});
  m->Clear();
  ChunkCacheStats s = m->stats();
  EXPECT_EQ(s.resident_chunks, 0u);
  EXPECT_EQ(s.resident_bytes, 0u);
  EXPECT_EQ(s.shard_resident_bytes, std::vector<uint64_t>{0});
  EXPECT_FALSE(ReadMatches(*m, {0, 1}));
  InsertOk(*m, {0, 1});
  EXPECT_TRUE(ReadMatches(*m, {0, 1}));

  TempDir dir;
  const std::string d = dir / "cache";
  {
    auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1, "other"));
    ASSERT_TRUE(c);
    InsertOk(*c, {0, 7});
  }
  auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(c);
  for (uint64_t i = 0; i < 5; ++i) InsertOk(*c, {0, i});
  EXPECT_EQ(Names(d, ".chunk").size(), 6u);
  c->Clear();
  EXPECT_TRUE(Names(d, ".chunk").empty());
  s = c->stats();
  EXPECT_EQ(s.resident_bytes, 0u);
  EXPECT_EQ(s.foreign_chunks, 0u);
  EXPECT_EQ(s.inserts, 5u);
  c.reset();
  EXPECT_EQ(OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1))->stats().reused_at_open, 0u);
}

// Two caches over one directory, as two processes have them: what one
// stores the other finds by name, and checks before it serves it.
TEST(SharedCacheDirTest, WhatOneStoresTheOtherFindsByName) {
  TempDir dir;
  const std::string d = dir / "cache";
  auto a = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(2));
  auto b = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(2));
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(b->Contains({1, 7}));
  InsertOk(*a, {1, 7});
  EXPECT_TRUE(ReadMatches(*b, {1, 7}));
  EXPECT_TRUE(ReadMatches(*b, {1, 7}));
  EXPECT_EQ(b->stats().adopted, 1u);
  EXPECT_EQ(b->stats().hits, 2u);
  // The other way round, and from another process.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = ChunkCache::Open({d, 64 * (kChunk + 4096), kChunk}, Shards(2));
    if (!c.ok()) ::_exit(2);
    std::string want = Bytes({1, 7});
    std::string got(want.size(), '\0');
    bool found = (*c)->Read({1, 7}, 0, got.size(), got.data(), false) && got == want;
    std::string mine = Bytes({0, 3});
    bool stored = (*c)->Insert({0, 3}, mine.data(), mine.size()).ok();
    ::_exit(found && stored ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  EXPECT_TRUE(ReadMatches(*a, {0, 3}));
  EXPECT_TRUE(ReadMatches(*b, {0, 3}));
  EXPECT_EQ(Names(d, ".chunk").size(), 2u);
}

// A chunk being written is never read by another cache: its temp file is
// not a chunk's name, and a reader racing a writer that stores the chunk
// again and again gets the whole chunk or a miss, never part of one.
TEST(SharedCacheDirTest, APartialChunkIsNeverServed) {
  TempDir dir;
  const std::string d = dir / "cache";
  const uint64_t big = 1 << 20;
  const uint64_t size = 8 * big;
  std::vector<ChunkShard> shards{{"s", size}};
  auto reader = OpenOk({d, 64 * (big + 4096), big}, shards);
  ASSERT_TRUE(reader);
  // Half a chunk under a live writer's temp name: not found, not deleted.
  const std::string tmp = FormatOwnedTmpName(ThisProcess(), 12345);
  shardfs::testing::WriteFile(Files(d) + "/" + tmp, std::string(big / 2, 'p'));
  std::string got(big, '\0');
  EXPECT_FALSE(reader->Read({0, 0}, 0, big, got.data(), false));
  EXPECT_TRUE(OpenOk({d, 64 * (big + 4096), big}, shards));
  EXPECT_TRUE(fs::exists(Files(d) + "/" + tmp));
  fs::remove(Files(d) + "/" + tmp);

  // A writer that stores the chunks again and again (each Insert writes a
  // file and renames it over the name), deleting them now and then, until
  // it is killed.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (int round = 0;; ++round) {
      auto w = ChunkCache::Open({d, 64 * (big + 4096), big}, shards);
      if (!w.ok()) ::_exit(2);
      for (uint64_t i = 0; i < 4; ++i) {
        std::string b = Bytes({0, i}, big, size);
        if (!(*w)->Insert({0, i}, b.data(), b.size()).ok()) ::_exit(1);
      }
      if (round % 4 == 3) (*w)->Clear();
    }
  }
  // Reads until 100 found a chunk (however slow the writer's start).
  uint64_t hits = 0;
  bool wrong = false;
  for (int i = 0; i < 1000000 && hits < 100 && !wrong; ++i) {
    auto r = OpenOk({d, 64 * (big + 4096), big}, shards);
    ASSERT_TRUE(r);
    ChunkKey key{0, static_cast<uint64_t>(i % 4)};
    if (r->Read(key, 0, big, got.data(), false)) {
      ++hits;
      wrong = got != Bytes(key, big, size);
    }
    EXPECT_EQ(r->stats().corrupt_dropped, 0u);
  }
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus)) << wstatus;
  EXPECT_FALSE(wrong);
  EXPECT_GT(hits, 0u);
}

// Two writers of different indexes over one directory: together they keep it
// within the capacity, each trimming what both stored.
TEST(SharedCacheDirTest, TwoWritersKeepTheDirectoryWithinTheBound) {
  TempDir dir;
  const std::string d = dir / "cache";
  const uint64_t cap = 12 * (kChunk + 4096);
  auto a = OpenOk({d, cap, kChunk}, Shards(2, "index a"));
  auto b = OpenOk({d, cap, kChunk}, Shards(2, "index b"));
  ASSERT_TRUE(a && b);
  uint64_t most = 0;
  std::thread other([&] {
    for (uint64_t i = 0; i < 60; ++i) InsertOk(*b, {static_cast<uint32_t>(i % 2), i});
  });
  for (uint64_t i = 0; i < 60; ++i) {
    InsertOk(*a, {static_cast<uint32_t>(i % 2), i});
    most = std::max(most, ChunkFileBytes(d));
  }
  other.join();
  // Each writer trims after each chunk here (capacity / 16 is below one), so
  // the directory passes the bound by at most the other writer's chunk.
  EXPECT_LE(most, cap + 2 * (kChunk + 4096));
  EXPECT_LE(ChunkFileBytes(d), cap);
  EXPECT_GT(a->stats().trimmed + b->stats().trimmed, 0u);
  // What is left reads back right, in either cache.
  for (uint64_t i = 0; i < 60; ++i) {
    ChunkKey key{static_cast<uint32_t>(i % 2), i};
    std::string got(Bytes(key).size(), '\0');
    if (a->Read(key, 0, got.size(), got.data(), false)) {
      EXPECT_EQ(got, Bytes(key));
    }
  }
}

// A chunk damaged on disk is a miss for the cache that finds it, is deleted,
// and the fetch that follows stores it anew for everyone.
TEST(SharedCacheDirTest, ADamagedChunkIsRefusedAndFetchedAgain) {
  TempDir dir;
  const std::string d = dir / "cache";
  auto a = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(a);
  InsertOk(*a, {0, 5});
  const std::string file = Files(d) + "/" + Names(d, ".chunk").at(0);
  std::string raw = shardfs::testing::ReadFile(file);
  raw[64 + 100] ^= 1;
  shardfs::testing::WriteFile(file + ".new", raw);
  fs::rename(file + ".new", file);
  auto b = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(b);
  EXPECT_FALSE(ReadMatches(*b, {0, 5}));
  EXPECT_EQ(b->stats().corrupt_dropped, 1u);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(b->Claim({0, 5}), ChunkCache::Claimed::kMine);
  InsertOk(*b, {0, 5});
  b->EndClaim({0, 5});
  auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
  EXPECT_TRUE(ReadMatches(*c, {0, 5}));
  EXPECT_EQ(c->stats().corrupt_dropped, 0u);
}

// A claim: the first to ask fetches; another waits a bounded time for it,
// then fetches itself; a claim of a process that is gone is taken over at
// once; a chunk stored meanwhile ends the wait.
TEST(SharedCacheDirTest, ClaimsAreBoundedAndDieWithTheirHolder) {
  TempDir dir;
  const std::string d = dir / "cache";
  ChunkCacheOptions o{d, 64 * (kChunk + 4096), kChunk};
  o.claim_wait = std::chrono::milliseconds(300);
  auto a = OpenOk(o, Shards(1));
  auto b = OpenOk(o, Shards(1));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->Claim({0, 1}), ChunkCache::Claimed::kMine);
  EXPECT_EQ(b->Claim({0, 1}), ChunkCache::Claimed::kUnclaimed);
  EXPECT_EQ(b->stats().claim_waits, 1u);
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    InsertOk(*a, {0, 1});
    a->EndClaim({0, 1});
  });
  EXPECT_NE(b->Claim({0, 1}), ChunkCache::Claimed::kMine);
  holder.join();
  EXPECT_EQ(b->Claim({0, 1}), ChunkCache::Claimed::kStored);
  EXPECT_TRUE(ReadMatches(*b, {0, 1}));
  // A dead holder's claim.
  ProcessStamp gone = DeadProcess();
  auto c = OpenOk(o, Shards(1));
  ASSERT_TRUE(c);
  // The claim file for chunk 2, left by a dead process.
  std::string name = Names(d, ".chunk").at(0);
  name = name.substr(0, name.find('-')) + "-2.claim";
  shardfs::testing::WriteFile(Files(d) + "/" + name, FormatStamp(gone));
  EXPECT_EQ(c->Claim({0, 2}), ChunkCache::Claimed::kMine);
  EXPECT_EQ(c->stats().claim_waits, 0u);
  c->EndClaim({0, 2});
  EXPECT_FALSE(fs::exists(Files(d) + "/" + name));
}

TEST(ChunkCacheTest, DirCreatedOrNamedInErrors) {
  TempDir dir;
  // The parent exists: made.
  EXPECT_TRUE(OpenOk({dir / "new", 8 * (kChunk + 4096), kChunk}, Shards(1)));
  EXPECT_TRUE(fs::is_directory(dir / "new"));
  // The parent does not: an error naming the dir.
  auto r = ChunkCache::Open({dir / "no/such", 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cache_dir " + (dir / "no/such")));
  EXPECT_THAT(r.status().message(), HasSubstr("No such file or directory"));
  // A file in its place.
  shardfs::testing::WriteFile(dir / "file", "x");
  r = ChunkCache::Open({dir / "file", 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cache_dir " + (dir / "file") + ": not a directory"));
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Every file below `root`, with its bytes (a symlink: its target).
std::map<std::string, std::string> Tree(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    std::string rel = fs::relative(e.path(), root);
    if (e.is_symlink()) {
      out[rel] = "-> " + fs::read_symlink(e.path()).string();
    } else if (e.is_regular_file()) {
      out[rel] = shardfs::testing::ReadFile(e.path());
    } else {
      out[rel] = "<dir>";
    }
  }
  return out;
}

// The cache's own files: DIR (when it makes it) and its subdirectory 0700,
// every file 0600 whatever the umask; nothing else in DIR.
TEST(ChunkCacheTest, LayoutAndModes) {
  TempDir dir;
  const std::string d = dir / "cache";
  const mode_t old_umask = ::umask(0);  // Modes must not depend on it.
  {
    auto c = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    InsertOk(*c, {0, 0});
    InsertOk(*c, {0, 1});
  }
  ::umask(old_umask);
  EXPECT_EQ(ModeOf(d), 0700u);
  EXPECT_EQ(ModeOf(Files(d)), 0700u);
  std::vector<std::string> top;
  for (const auto& e : fs::directory_iterator(d)) top.push_back(e.path().filename());
  EXPECT_THAT(top, ::testing::ElementsAre(ChunkCache::kChunkDir));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(Files(d))) {
    files.push_back(e.path().filename());
    EXPECT_TRUE(e.is_regular_file()) << e.path();
    EXPECT_EQ(ModeOf(e.path()), 0600u) << e.path();
  }
  EXPECT_THAT(
      files, ::testing::UnorderedElementsAre("shardfs-cache", "lock", ::testing::EndsWith(".chunk"),
                                             ::testing::EndsWith(".chunk")));
  // An existing private DIR keeps its mode.
  const std::string mine = dir / "mine";
  ASSERT_EQ(::mkdir(mine.c_str(), 0750), 0);
  ASSERT_EQ(::chmod(mine.c_str(), 0750), 0);
  EXPECT_TRUE(OpenOk({mine, 8 * (kChunk + 4096), kChunk}, Shards(1)));
  EXPECT_EQ(ModeOf(mine), 0750u);
  EXPECT_EQ(ModeOf(Files(mine)), 0700u);
}

// A symbolic link as DIR or in place of the subdirectory is refused, and
// nothing is written where it points.
TEST(ChunkCacheTest, SymlinkRefused) {
  TempDir dir;
  const std::string real = dir / "real";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), (dir / "link").c_str()), 0);
  auto r = ChunkCache::Open({dir / "link", 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("cache_dir " + (dir / "link") + ": a symbolic link, refused"));
  EXPECT_TRUE(fs::is_empty(real));

  const std::string d = dir / "cache";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), Files(d).c_str()), 0);
  r = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("cache_dir " + Files(d) + ": a symbolic link, refused"));
  EXPECT_TRUE(fs::is_empty(real));
}

// A DIR that group or others may write to (a shared or sticky temp dir too)
// is refused with its mode, and left as it was.
TEST(ChunkCacheTest, GroupOrOtherWritableRefused) {
  TempDir dir;
  struct Case {
    mode_t mode;
    const char* who;
  };
  for (Case c : {Case{0770, "its group"}, Case{0703, "others"}, Case{01777, "others"}}) {
    const std::string d = dir / fmt::format("cache-{:o}", c.mode);
    ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(d.c_str(), c.mode), 0);
    shardfs::testing::WriteFile(d + "/" + "README", "mine");
    auto r = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_FALSE(r.ok()) << d;
    EXPECT_THAT(r.status().message(),
                HasSubstr(fmt::format("cache_dir {}: writable by {} (mode {:04o}), refused", d,
                                      c.who, c.mode)));
    EXPECT_EQ(Tree(d), (std::map<std::string, std::string>{{"README", "mine"}}));
    EXPECT_EQ(ModeOf(d), c.mode);
  }
  // The subdirectory too.
  const std::string d = dir / "cache";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(Files(d).c_str(), 0700), 0);
  ASSERT_EQ(::chmod(Files(d).c_str(), 0770), 0);
  auto r = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cache_dir " + Files(d) + ": writable by its group"));
}

// A DIR another user owns is refused, naming the owner: as root, one chowned
// to nobody; as anyone else, "/" (root's).
TEST(ChunkCacheTest, ForeignOwnedDirRefused) {
  TempDir dir;
  std::string d = "/";
  std::string owner = "uid 0 (root)";
  if (::geteuid() == 0) {
    d = dir / "cache";
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
    shardfs::testing::WriteFile(d + "/00000000000000aa-0-1.chunk", "forged");
    ASSERT_EQ(::chown(d.c_str(), 65534, 65534), 0);
    owner = "uid 65534";
  }
  auto r = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cache_dir " + d + ": owned by " + owner));
  EXPECT_THAT(r.status().message(), HasSubstr("not by this mount's user"));
  EXPECT_FALSE(fs::exists(Files(d)));
  if (::geteuid() == 0) {
    EXPECT_EQ(Tree(d),
              (std::map<std::string, std::string>{{"00000000000000aa-0-1.chunk", "forged"}}));
  }
}

// Files the cache did not write are never deleted: anything in DIR itself
// (an old flat-layout cache included), and in the subdirectory anything not
// named and owned as the cache's own files. Reuse, eviction and Clear leave
// them alone too.
TEST(ChunkCacheTest, FilesOfOthersLeftAlone) {
  TempDir dir;
  const std::string d = dir / "cache";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  // The user's files in DIR, and what an old version's flat layout left.
  shardfs::testing::WriteFile(d + "/tmp-foo", "temp of mine");
  shardfs::testing::WriteFile(d + "/tmp-12", "looks like an old temp file");
  shardfs::testing::WriteFile(d + "/x.chunk", std::string(5000, 'g'));
  shardfs::testing::WriteFile(d + "/00000000000000aa-3-77.chunk", std::string(5000, 'x'));
  shardfs::testing::WriteFile(d + "/README", "read me");
  shardfs::testing::WriteFile(d + "/lock", "");
  {
    auto c = OpenOk({d, 4 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
  }
  // Files in the subdirectory that the cache did not write.
  shardfs::testing::WriteFile(Files(d) + "/notes.txt", "mine");
  shardfs::testing::WriteFile(Files(d) + "/tmp-zz", "not a temp name of the cache");
  shardfs::testing::WriteFile(Files(d) + "/elsewhere", "a link target");
  ASSERT_EQ(::symlink("elsewhere", (Files(d) + "/00000000000000bb-1.chunk").c_str()), 0);
  const std::string dead_tmp = Files(d) + "/" + FormatOwnedTmpName(DeadProcess(), 7);
  ASSERT_EQ(::mkdir(dead_tmp.c_str(), 0700), 0);
  uint64_t others = 5;
  if (::geteuid() == 0) {
    // Only root can put another user's file into the 0700 subdirectory.
    const std::string nobodys_tmp = Files(d) + "/" + FormatOwnedTmpName(DeadProcess(), 8);
    shardfs::testing::WriteFile(Files(d) + "/00000000000000cc-1.chunk", "nobody's");
    shardfs::testing::WriteFile(nobodys_tmp, "nobody's temp");
    ASSERT_EQ(::chown((Files(d) + "/00000000000000cc-1.chunk").c_str(), 65534, 65534), 0);
    ASSERT_EQ(::chown(nobodys_tmp.c_str(), 65534, 65534), 0);
    others += 2;
  }
  std::map<std::string, std::string> before = Tree(d);
  {
    auto c = OpenOk({d, 4 * (kChunk + 4096), kChunk}, Shards(1));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->stats().other_files, others);
    EXPECT_EQ(c->stats().foreign_chunks, 0u);
    for (uint64_t i = 0; i < 10; ++i) InsertOk(*c, {0, i});  // Evicts.
    c->Clear();
  }
  std::map<std::string, std::string> after = Tree(d);
  for (const auto& [name, bytes] : before) {
    const std::string sub = ChunkCache::kChunkDir;
    if (name == sub + "/lock" || name == sub + "/shardfs-cache") continue;
    auto it = after.find(name);
    ASSERT_NE(it, after.end()) << name << " was deleted";
    EXPECT_EQ(it->second, bytes) << name << " was changed";
  }
}

// A subdirectory without the marker is shardfs's only if it is empty (a
// first Open cut short): one holding files is refused, and kept.
TEST(ChunkCacheTest, SubdirWithoutMarkerNotTaken) {
  TempDir dir;
  const std::string d = dir / "cache";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(Files(d).c_str(), 0700), 0);
  EXPECT_TRUE(OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1)));
  EXPECT_TRUE(fs::is_regular_file(Files(d) + "/shardfs-cache"));

  const std::string e = dir / "other";
  ASSERT_EQ(::mkdir(e.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(Files(e).c_str(), 0700), 0);
  shardfs::testing::WriteFile(Files(e) + "/tmp-1", "someone's");
  auto r = ChunkCache::Open({e, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("holds files but no shardfs-cache marker"));
  EXPECT_EQ(Tree(Files(e)), (std::map<std::string, std::string>{{"tmp-1", "someone's"}}));
}

// kill -9 while a child inserts big chunks as fast as it can: every chunk
// found afterwards reads back right, and no temp file survives the reopen.
TEST(ChunkCacheTest, KillDuringInsertNeverLeavesATornChunk) {
  TempDir dir;
  const std::string d = dir / "cache";
  const uint64_t big = 1 << 20;
  const uint64_t size = 64 * big;
  std::vector<ChunkShard> shards{{"s", size}};
  for (int round = 0; round < 3; ++round) {
    // The child says when its first chunk is in, so that the kill lands
    // among inserts however slow the start (a sanitizer build, a loaded
    // machine), not before the first one.
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(ready[0]);
      auto r = ChunkCache::Open({d, 16 * (big + 4096), big}, shards);
      if (!r.ok()) ::_exit(2);
      for (uint64_t i = 0;; i = (i + 1) % 64) {
        std::string b = Bytes({0, i}, big, size);
        (void)(*r)->Insert({0, i}, b.data(), b.size());
        if (ready[1] >= 0) {
          (void)!::write(ready[1], "x", 1);
          ::close(ready[1]);
          ready[1] = -1;
        }
      }
    }
    ::close(ready[1]);
    pollfd pfd{ready[0], POLLIN, 0};
    char got = 0;
    const bool inserted = ::poll(&pfd, 1, 60'000) == 1 && ::read(ready[0], &got, 1) == 1;
    ::close(ready[0]);
    if (!inserted) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      FAIL() << "the child made no chunk within 60 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(15 + 30 * round));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the child stopped by itself: " << wstatus;
  }
  auto c = OpenOk({d, 16 * (big + 4096), big}, shards);
  ASSERT_TRUE(c);
  EXPECT_TRUE(Names(d, "tmp-").empty());
  ChunkCacheStats s = c->stats();
  EXPECT_GT(s.reused_at_open, 0u);
  for (uint64_t i = 0; i < 64; ++i) {
    if (!c->Contains({0, i})) continue;
    std::string want = Bytes({0, i}, big, size);
    std::string got(want.size(), '\0');
    ASSERT_TRUE(c->Read({0, i}, 0, got.size(), got.data(), false)) << "chunk " << i;
    EXPECT_TRUE(got == want) << "chunk " << i;
  }
  EXPECT_EQ(c->stats().corrupt_dropped, 0u);
}

// Readers, inserters and an occasional Clear, on a cache small enough to
// evict all the time: every hit has the right bytes (run under ASan/TSan).
void Hammer(const std::string& dir) {
  const uint64_t cap = dir.empty() ? 8 * kChunk : 8 * (kChunk + 4096);
  auto c = OpenOk({dir, cap, kChunk}, Shards(2));
  ASSERT_TRUE(c);
  std::atomic<bool> wrong{false};
  std::atomic<uint64_t> hits{0};
  std::vector<std::thread> threads;
  ChunkCache* cache = c.get();
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([cache, t, &wrong, &hits] {
      uint64_t x = 77 + t;
      std::string got(kChunk, '\0');
      for (int i = 0; i < 600; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ChunkKey key{static_cast<uint32_t>((x >> 33) % 2), (x >> 40) % 16};
        if (t < 2) {
          std::string b = Bytes(key);
          if (!cache->Insert(key, b.data(), b.size()).ok()) wrong = true;
          if (t == 0 && i % 200 == 199) cache->Clear();
        } else {
          std::string want = Bytes(key);
          uint64_t off = (x >> 12) % 1000;
          size_t len = want.size() - off;
          if (cache->Read(key, off, len, got.data(), (x >> 9) % 3 == 0)) {
            ++hits;
            if (want.compare(off, len, got.data(), len) != 0) wrong = true;
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(wrong.load());
  EXPECT_GT(hits.load(), 0u);
  ChunkCacheStats s = c->stats();
  EXPECT_LE(s.resident_bytes, cap);
  EXPECT_EQ(s.corrupt_dropped, 0u);
  if (!dir.empty()) {
    EXPECT_EQ(Names(dir, ".chunk").size(), s.resident_chunks);
    EXPECT_TRUE(Names(dir, "tmp-").empty());
  }
}

TEST(ChunkCacheTest, ConcurrentReadersAndInsertersInMemory) { Hammer(""); }

TEST(ChunkCacheTest, ConcurrentReadersAndInsertersOnDisk) {
  TempDir dir;
  Hammer(dir / "cache");
}

}  // namespace
}  // namespace shardfs::reader
