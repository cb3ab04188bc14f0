// src/chunk_cache.h: S3-FIFO accounting and scan resistance (against an LRU
// model of the same trace), the capacity bound in memory and on disk,
// restarts, damaged and leftover files, a kill -9 mid-Insert, the dir lock,
// and readers racing inserters, evictions and Clear.
#include "src/chunk_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <list>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs::mount {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using shardfs::testing::TempDir;

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

std::vector<std::string> Names(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename();
    if (name.ends_with(suffix) || (suffix == "tmp-" && name.starts_with("tmp-"))) {
      out.push_back(name);
    }
  }
  return out;
}

uint64_t ChunkFileBytes(const std::string& dir) {
  uint64_t sum = 0;
  for (const std::string& n : Names(dir, ".chunk")) sum += fs::file_size(dir + "/" + n);
  return sum;
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
  auto path = [&d](const std::string& n) { return d + "/" + n; };
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
  // Garbage with a chunk's name, an empty one, a leftover temp file, and a
  // file that is not the cache's (left alone).
  shardfs::testing::WriteFile(d + "/00000000000000aa-3-77.chunk", std::string(5000, 'x'));
  shardfs::testing::WriteFile(d + "/00000000000000aa-4-78.chunk", "");
  shardfs::testing::WriteFile(d + "/tmp-99", std::string(3000, 'y'));
  shardfs::testing::WriteFile(d + "/notes.txt", "mine");

  auto c = OpenOk({d, 64 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(c);
  ChunkCacheStats s = c->stats();
  EXPECT_EQ(s.reused_at_open, 4u);  // 6 written, 2 damaged in the header or length.
  EXPECT_EQ(s.foreign_chunks, 0u);
  EXPECT_TRUE(Names(d, "tmp-").empty());
  EXPECT_FALSE(fs::exists(path(names[0])));
  EXPECT_FALSE(fs::exists(path(names[1])));
  EXPECT_FALSE(fs::exists(d + "/00000000000000aa-3-77.chunk"));
  EXPECT_FALSE(fs::exists(d + "/00000000000000aa-4-78.chunk"));
  EXPECT_TRUE(fs::exists(d + "/notes.txt"));

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
  std::string p = d + "/" + Names(d, ".chunk").at(0);
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

TEST(ChunkCacheTest, SecondOpenOfADirRefused) {
  TempDir dir;
  const std::string d = dir / "cache";
  auto first = OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_TRUE(first);
  auto second = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(second.status().message(),
            "cache_dir " + d + ": in use by another shardfs process");
  // Another process is refused as well, and the lock goes with its holder.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto r = ChunkCache::Open({d, 8 * (kChunk + 4096), kChunk}, Shards(1));
    ::_exit(!r.ok() && r.status().message().find("in use") != std::string::npos ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  first.reset();
  EXPECT_TRUE(OpenOk({d, 8 * (kChunk + 4096), kChunk}, Shards(1)));
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

// kill -9 while a child inserts big chunks as fast as it can: every chunk
// found afterwards reads back right, and no temp file survives the reopen.
TEST(ChunkCacheTest, KillDuringInsertNeverLeavesATornChunk) {
  TempDir dir;
  const std::string d = dir / "cache";
  const uint64_t big = 1 << 20;
  const uint64_t size = 64 * big;
  std::vector<ChunkShard> shards{{"s", size}};
  for (int round = 0; round < 3; ++round) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto r = ChunkCache::Open({d, 16 * (big + 4096), big}, shards);
      if (!r.ok()) ::_exit(2);
      for (uint64_t i = 0;; i = (i + 1) % 64) {
        std::string b = Bytes({0, i}, big, size);
        (void)(*r)->Insert({0, i}, b.data(), b.size());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(60 + 45 * round));
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
}  // namespace shardfs::mount
