// src/mount/dir_prefill.h's PrefillPolicy without a mount: when a directory is
// queued for listing on lookup misses, that it is queued once at a time,
// that siblings are listed ahead once, and how many of them.
#include "src/mount/dir_prefill.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardfs::mount {
namespace {

using Job = PrefillPolicy::Job;

// Takes every queued job, marking each listing done.
std::vector<uint64_t> Drain(PrefillPolicy& p) {
  std::vector<uint64_t> dirs;
  Job job;
  while (p.Next(&job)) {
    dirs.push_back(job.dir);
    p.Done(job.dir);
  }
  return dirs;
}

// Misses in `dir` until it is queued; returns how many it took.
int MissesUntilQueued(PrefillPolicy& p, uint64_t dir) {
  for (int n = 1; n <= 1000; ++n) {
    if (p.NoteMiss(dir)) return n;
  }
  return -1;
}

TEST(PrefillPolicyTest, TheSecondMissQueuesTheDirectory) {
  PrefillPolicy p;
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(p.NoteMiss(7));
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(p.NoteMiss(7));
  Job job;
  ASSERT_TRUE(p.Next(&job));
  EXPECT_EQ(job.dir, 7u);
  EXPECT_EQ(job.path, "");
  EXPECT_FALSE(job.sibling);
  EXPECT_FALSE(p.Next(&job));
}

TEST(PrefillPolicyTest, MissesCountPerDirectory) {
  PrefillPolicy p;
  EXPECT_FALSE(p.NoteMiss(1));
  EXPECT_FALSE(p.NoteMiss(2));
  EXPECT_TRUE(p.NoteMiss(2));
  EXPECT_TRUE(p.NoteMiss(1));
  EXPECT_EQ(Drain(p), (std::vector<uint64_t>{2, 1}));
}

TEST(PrefillPolicyTest, MissesWhileQueuedOrListedDoNotQueueAgain) {
  PrefillPolicy p;
  EXPECT_EQ(MissesUntilQueued(p, 5), 2);
  // Queued, then being listed: lookups still reach the daemon meanwhile.
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(p.NoteMiss(5));
  Job job;
  ASSERT_TRUE(p.Next(&job));
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(p.NoteMiss(5));
  EXPECT_TRUE(p.empty());
  p.Done(5);
  // Those misses were not counted towards the next listing.
  EXPECT_EQ(MissesUntilQueued(p, 5), 8);
}

// A directory whose entries the kernel keeps dropping, listed with no entry
// count known, is listed again after 4x as many misses each time.
TEST(PrefillPolicyTest, EachListingNeedsFourTimesTheMisses) {
  PrefillPolicy p;
  std::vector<int> needed;
  for (int i = 0; i < 5; ++i) {
    needed.push_back(MissesUntilQueued(p, 9));
    EXPECT_EQ(Drain(p), std::vector<uint64_t>{9});
  }
  EXPECT_EQ(needed, (std::vector<int>{2, 8, 32, 128, 512}));
}

// A directory whose listing gave N entries is listed again after N / 16
// misses (a new epoch after the kernel dropped its dentries), however often
// that happens; never before the second miss.
TEST(PrefillPolicyTest, AListedDirectoryIsListedAgainAfterASixteenthOfItsEntriesMissed) {
  PrefillPolicy p;
  EXPECT_EQ(MissesUntilQueued(p, 9), 2);
  Job job;
  ASSERT_TRUE(p.Next(&job));
  p.Done(9, 800);
  std::vector<int> needed;
  for (int i = 0; i < 4; ++i) {
    needed.push_back(MissesUntilQueued(p, 9));
    ASSERT_TRUE(p.Next(&job));
    p.Done(9, 800);
  }
  EXPECT_EQ(needed, (std::vector<int>{50, 50, 50, 50}));
  EXPECT_EQ(MissesUntilQueued(p, 9), 50);
  ASSERT_TRUE(p.Next(&job));
  p.Done(9, 5);  // A small directory: the second miss, as at first.
  EXPECT_EQ(MissesUntilQueued(p, 9), 2);
  ASSERT_TRUE(p.Next(&job));
  p.Done(9);  // A listing that failed keeps the last count.
  EXPECT_EQ(MissesUntilQueued(p, 9), 2);
}

TEST(PrefillPolicyTest, SiblingsAreListedAheadOnce) {
  PrefillPolicy p;
  EXPECT_TRUE(p.Queue({11, "a/b", true}));
  EXPECT_FALSE(p.Queue({11, "a/b", true}));  // Already queued.
  Job job;
  ASSERT_TRUE(p.Next(&job));
  EXPECT_EQ(job.path, "a/b");
  EXPECT_TRUE(job.sibling);
  p.Done(11);
  EXPECT_FALSE(p.Queue({11, "a/b", true}));  // Listed before.
  EXPECT_TRUE(p.empty());
  // Misses in it later (the kernel dropped its entries) list it again, as
  // for any directory listed once.
  EXPECT_EQ(MissesUntilQueued(p, 11), 8);
}

TEST(PrefillPolicyTest, ADirectoryListedAheadIsNotQueuedTwiceOnMisses) {
  PrefillPolicy p;
  EXPECT_TRUE(p.Queue({3, "x", true}));
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(p.NoteMiss(3));
  EXPECT_EQ(Drain(p), std::vector<uint64_t>{3});
}

TEST(PrefillPolicyTest, SiblingCountDoublesPerParentUpToTheMaximum) {
  PrefillPolicy p;
  std::vector<uint32_t> counts;
  for (int i = 0; i < 8; ++i) counts.push_back(p.TakeSiblingCount(1));
  EXPECT_EQ(counts, (std::vector<uint32_t>{2, 4, 8, 16, 32, 64, 64, 64}));
  EXPECT_EQ(counts.front(), PrefillPolicy::kFirstSiblings);
  EXPECT_EQ(counts.back(), PrefillPolicy::kMaxSiblings);
  // Another parent starts over.
  EXPECT_EQ(p.TakeSiblingCount(2), PrefillPolicy::kFirstSiblings);
}

// Past the entry limit a sampled directory is not listed; one a program goes
// through is, on the kMissesPastLimit-th miss (4x that for a listing more),
// its job marked to be listed over the limit; names-only re-listings are not
// asked for.
TEST(PrefillPolicyTest, PastTheLimitOnlyDirectoriesBeingGoneThroughAreListed) {
  PrefillPolicy p;
  EXPECT_EQ(MissesUntilQueued(p, 1), 2);
  Job job;
  ASSERT_TRUE(p.Next(&job));
  EXPECT_FALSE(job.past_limit);
  p.Done(1);
  p.SetPastLimit();
  EXPECT_TRUE(p.past_limit());
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(p.NoteMiss(2));  // Sampled: not listed.
  EXPECT_EQ(MissesUntilQueued(p, 3), static_cast<int>(PrefillPolicy::kMissesPastLimit));
  ASSERT_TRUE(p.Next(&job));
  EXPECT_EQ(job.dir, 3u);
  EXPECT_TRUE(job.past_limit);
  p.Done(3);
  EXPECT_FALSE(p.ListNow(5));
  EXPECT_TRUE(p.empty());
  // Directory 1, listed once before the limit: 4 x kMissesPastLimit now.
  EXPECT_EQ(MissesUntilQueued(p, 1), -1);  // Not within 1000 misses.
}

}  // namespace
}  // namespace shardfs::mount
