#include "src/reader/decoded_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace shardfs::reader {
namespace {

using std::chrono::milliseconds;

DecodedCache::Decoder Make(std::string bytes, std::atomic<int>* calls,
                           milliseconds delay = milliseconds(0)) {
  return [bytes = std::move(bytes), calls, delay]() -> Result<std::string> {
    ++*calls;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    return bytes;
  };
}

TEST(DecodedCache, KeepsWhatItDecodedAndAnswersFromIt) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  auto a = cache.Get({1, 7}, Make("alpha", &calls), milliseconds(100));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(**a, "alpha");
  auto b = cache.Get({1, 7}, Make("other", &calls), milliseconds(100));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(**b, "alpha");
  // Another shard, same block number: another key.
  auto c = cache.Get({2, 7}, Make("gamma", &calls), milliseconds(100));
  EXPECT_EQ(**c, "gamma");
  EXPECT_EQ(calls, 2);
  DecodedCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.decodes, 2u);
  EXPECT_EQ(s.resident_blocks, 2u);
  EXPECT_EQ(s.resident_bytes, 10u);
}

TEST(DecodedCache, StaysWithinCapacity) {
  DecodedCache cache(10 * 1000);
  std::atomic<int> calls = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(cache.Get({0, i}, Make(std::string(1000, 'x'), &calls), milliseconds(10)).ok());
    EXPECT_LE(cache.stats().resident_bytes, 10u * 1000);
  }
  EXPECT_GT(cache.stats().evictions, 80u);
}

TEST(DecodedCache, BlockLargerThanCapacityIsReturnedNotKept) {
  DecodedCache cache(100);
  std::atomic<int> calls = 0;
  auto a = cache.Get({0, 0}, Make(std::string(101, 'y'), &calls), milliseconds(10));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->size(), 101u);
  EXPECT_EQ(cache.stats().resident_blocks, 0u);
  DecodedCache none(0);
  ASSERT_TRUE(none.Get({0, 0}, Make("z", &calls), milliseconds(10)).ok());
  ASSERT_TRUE(none.Get({0, 0}, Make("z", &calls), milliseconds(10)).ok());
  EXPECT_EQ(calls, 3);
}

TEST(DecodedCache, ASweepDoesNotFlushTheReusedBlocks) {
  // 100 blocks of 1 KB fit; 20 are read again and again while a sweep of
  // 2,000 new blocks, each read once, passes through.
  DecodedCache cache(100 * 1000);
  std::atomic<int> calls = 0;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(cache.Get({0, i}, Make(std::string(1000, 'h'), &calls), milliseconds(10)).ok());
    }
  }
  const int before = calls;
  for (uint64_t i = 1000; i < 3000; ++i) {
    ASSERT_TRUE(cache.Get({0, i}, Make(std::string(1000, 's'), &calls), milliseconds(10)).ok());
    if (i % 50 == 0) {
      for (uint64_t j = 0; j < 20; ++j) {
        ASSERT_TRUE(cache.Get({0, j}, Make(std::string(1000, 'h'), &calls), milliseconds(10)).ok());
      }
    }
  }
  // Only the sweep's blocks were decoded: every reused block stayed.
  EXPECT_EQ(calls - before, 2000);
}

TEST(DecodedCache, ConcurrentReadersOfOneBlockDecodeItOnce) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  std::vector<std::thread> threads;
  std::atomic<int> good = 0;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      auto r = cache.Get({3, 3}, Make("shared", &calls, milliseconds(200)), milliseconds(10000));
      if (r.ok() && **r == "shared") ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good, 16);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.stats().joined, 15u);
}

TEST(DecodedCache, AWaitHasABoundThenTheReaderDecodesItself) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  std::thread slow([&] {
    ASSERT_TRUE(cache.Get({0, 1}, Make("late", &calls, milliseconds(2000)), milliseconds(10)).ok());
  });
  while (calls == 0) std::this_thread::sleep_for(milliseconds(1));
  const auto start = std::chrono::steady_clock::now();
  auto r = cache.Get({0, 1}, Make("own", &calls), milliseconds(50));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, "own");
  EXPECT_LT(waited, milliseconds(1500));
  EXPECT_EQ(cache.stats().gave_up, 1u);
  slow.join();
  EXPECT_EQ(calls, 2);
}

TEST(DecodedCache, ErrorsReachWaitersAndAreNotCached) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  auto fail = [&]() -> Result<std::string> {
    ++calls;
    std::this_thread::sleep_for(milliseconds(100));
    return Status::IoError("archive a.zip: bad data at 42");
  };
  std::vector<std::thread> threads;
  std::atomic<int> errors = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto r = cache.Get({0, 9}, fail, milliseconds(10000));
      if (!r.ok() && r.status().message().find("a.zip") != std::string::npos) ++errors;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors, 4);
  EXPECT_EQ(calls, 1);
  auto again = cache.Get({0, 9}, Make("good", &calls), milliseconds(10));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(**again, "good");
  EXPECT_EQ(cache.stats().errors, 1u);
}

// A prefix answers only callers that need no more of it; a longer decode
// replaces it under the same key, and the bytes held follow.
TEST(DecodedCache, AShortBlockIsAMissForALongerNeedAndIsReplaced) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  auto a = cache.Get({1, 0}, 3, Make("abc", &calls), milliseconds(10));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(**a, "abc");
  auto b = cache.Get({1, 0}, 2, Make("xx", &calls), milliseconds(10));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(**b, "abc");  // Long enough: a hit.
  EXPECT_EQ(calls, 1);
  auto c = cache.Get({1, 0}, 6, Make("abcdef", &calls), milliseconds(10));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(**c, "abcdef");
  EXPECT_EQ(calls, 2);
  DecodedCacheStats s = cache.stats();
  EXPECT_EQ(s.too_short, 1u);
  EXPECT_EQ(s.resident_blocks, 1u);
  EXPECT_EQ(s.resident_bytes, 6u);
  // A shorter block made later (a racing decode) does not replace it.
  auto d = cache.Get({1, 0}, 7, Make("abcd", &calls), milliseconds(10));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(**d, "abcd");  // The caller gets what it made; its size is for it to check.
  auto e = cache.Get({1, 0}, 0, Make("zz", &calls), milliseconds(10));
  EXPECT_EQ(**e, "abcdef");
  EXPECT_EQ(cache.stats().resident_bytes, 6u);
  // Replacements count against the capacity like inserts.
  DecodedCache small(100);
  ASSERT_TRUE(small.Get({0, 0}, 0, Make(std::string(40, 'a'), &calls), milliseconds(10)).ok());
  ASSERT_TRUE(small.Get({0, 1}, 0, Make(std::string(40, 'b'), &calls), milliseconds(10)).ok());
  ASSERT_TRUE(small.Get({0, 0}, 90, Make(std::string(90, 'a'), &calls), milliseconds(10)).ok());
  EXPECT_LE(small.stats().resident_bytes, 100u);
}

TEST(DecodedCache, AReaderNeedingMoreThanADecodeInFlightDoesNotWaitForIt) {
  DecodedCache cache(1 << 20);
  std::atomic<int> calls = 0;
  std::atomic<bool> release = false, first_done = false;
  std::thread first([&] {
    auto slow = [&]() -> Result<std::string> {
      ++calls;
      // Held until the second reader is done (bounded, so a bug fails the
      // test instead of hanging it).
      for (int i = 0; i < 20000 && !release; ++i) std::this_thread::sleep_for(milliseconds(1));
      return std::string("ab");
    };
    auto r = cache.Get({2, 5}, 2, slow, milliseconds(10));
    ASSERT_TRUE(r.ok());
    first_done = true;
  });
  while (calls == 0) std::this_thread::sleep_for(milliseconds(1));
  auto r = cache.Get({2, 5}, 5, Make("abcde", &calls), milliseconds(30000));
  EXPECT_FALSE(first_done);  // It did not wait for the shorter decode.
  release = true;
  first.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, "abcde");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.stats().too_short, 1u);
  EXPECT_EQ(cache.stats().joined, 0u);
  // The longer block stays; the shorter one that finished later did not
  // replace it.
  auto again = cache.Get({2, 5}, 5, Make("other", &calls), milliseconds(10));
  EXPECT_EQ(**again, "abcde");
  // A reader needing no more than a decode in flight waits for it.
  std::atomic<bool> go = false;
  std::thread third([&] {
    auto slow = [&]() -> Result<std::string> {
      ++calls;
      for (int i = 0; i < 20000 && !go; ++i) std::this_thread::sleep_for(milliseconds(1));
      return std::string("0123456789");
    };
    ASSERT_TRUE(cache.Get({2, 6}, 10, slow, milliseconds(10)).ok());
  });
  while (calls == 2) std::this_thread::sleep_for(milliseconds(1));
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(200));
    go = true;
  });
  auto joined = cache.Get({2, 6}, 4, Make("wrong", &calls), milliseconds(30000));
  third.join();
  releaser.join();
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(**joined, "0123456789");
  EXPECT_EQ(calls, 3);  // Its own decoder never ran: it joined (or, if late, hit).
}

}  // namespace
}  // namespace shardfs::reader
