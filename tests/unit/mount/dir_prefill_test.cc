// src/mount/dir_prefill.h without a mount. PrefillPolicy: when a directory is
// queued for listing on lookup misses, that it is queued once at a time,
// that siblings are listed ahead once, and how many of them. AttrPolicy:
// listings are names-only until a file lookup in the directory, or in a
// sibling, asks for attributes; what a lookup in the root turns on; the
// inheritance down a subtree.
#include "src/mount/dir_prefill.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardfs::mount {
namespace {

using index::InodeId;
using index::kRootInode;
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

// The tree of the tests: root(1) -> train(2) -> {c1(3), c2(4), c3(5)};
// c2 -> deep(6); root -> val(7) -> v1(8).
constexpr InodeId kTrain{2}, kC1{3}, kC2{4}, kC3{5}, kDeep{6}, kVal{7}, kV1{8};

TEST(AttrPolicyTest, NamesOnlyUntilAFileIsLookedUp) {
  AttrPolicy p(100);
  EXPECT_FALSE(p.WantAttrs(kRootInode, kRootInode));
  EXPECT_FALSE(p.WantAttrs(kTrain, kRootInode));
  EXPECT_FALSE(p.WantAttrs(kC1, kTrain));
  EXPECT_FALSE(p.Marked(kC1));
  // Asking again changes nothing.
  EXPECT_FALSE(p.WantAttrs(kC1, kTrain));
}

// The mark that makes the first file lookup list the directory again with
// attributes (DirPrefill::ListNow): without it, push-ahead into a directory
// listed names-only finds no inodes in the kernel.
TEST(AttrPolicyTest, RemembersWhichDirectoriesWentOutNamesOnly) {
  AttrPolicy p(100);
  EXPECT_FALSE(p.ListedNamesOnly(kC1));
  p.NoteNamesOnly(kC1);
  EXPECT_TRUE(p.ListedNamesOnly(kC1));
  EXPECT_FALSE(p.ListedNamesOnly(kC2));
  p.NoteNamesOnly(InodeId{100});
  EXPECT_TRUE(p.ListedNamesOnly(InodeId{100}));
}

TEST(AttrPolicyTest, ALookupSwitchesTheDirectoryAndItsSiblings) {
  AttrPolicy p(100);
  p.NoteFileLookup(kC1, kTrain);
  EXPECT_TRUE(p.Marked(kC1));
  EXPECT_TRUE(p.WantAttrs(kC1, kTrain));  // The rest of its listing.
  EXPECT_TRUE(p.WantAttrs(kC2, kTrain));  // Siblings listed after it.
  EXPECT_TRUE(p.WantAttrs(kC3, kTrain));
  EXPECT_TRUE(p.WantAttrs(kDeep, kC2));  // And below them.
  // The parent itself (whose files a stat walker stats too).
  EXPECT_TRUE(p.WantAttrs(kTrain, kRootInode));
  // Another subtree is not affected.
  EXPECT_FALSE(p.WantAttrs(kVal, kRootInode));
  EXPECT_FALSE(p.WantAttrs(kV1, kVal));
  EXPECT_FALSE(p.WantAttrs(kRootInode, kRootInode));
}

TEST(AttrPolicyTest, SubdirectoriesInheritFromTheirParent) {
  AttrPolicy p(100);
  // du lists c2, stats its files, then descends into deep.
  EXPECT_FALSE(p.WantAttrs(kC2, kTrain));
  p.NoteFileLookup(kC2, kTrain);
  EXPECT_TRUE(p.WantAttrs(kDeep, kC2));
  // A lookup in deep alone switches deep and the directories below it, not
  // c2's siblings.
  AttrPolicy q(100);
  q.NoteFileLookup(kDeep, kC2);
  EXPECT_TRUE(q.WantAttrs(kDeep, kC2));
  EXPECT_TRUE(q.WantAttrs(InodeId{9}, kDeep));
  EXPECT_FALSE(q.WantAttrs(kC1, kTrain));
}

TEST(AttrPolicyTest, ALookupInTheRootSwitchesTheRootAlone) {
  AttrPolicy p(100);
  p.NoteFileLookup(kRootInode, kRootInode);
  EXPECT_TRUE(p.WantAttrs(kRootInode, kRootInode));
  EXPECT_FALSE(p.WantAttrs(kTrain, kRootInode));
  EXPECT_FALSE(p.WantAttrs(kC1, kTrain));
}

TEST(AttrPolicyTest, ALookupInATopDirectorySwitchesTheWholeTree) {
  AttrPolicy p(100);
  p.NoteFileLookup(kTrain, kRootInode);
  EXPECT_TRUE(p.WantAttrs(kVal, kRootInode));
  EXPECT_TRUE(p.WantAttrs(kV1, kVal));
}

TEST(AttrPolicyTest, InodesBeyondTheIndexAlwaysCarryAttributes) {
  AttrPolicy p(10);
  EXPECT_TRUE(p.WantAttrs(InodeId{11}, kRootInode));
  p.NoteFileLookup(InodeId{11}, kRootInode);  // Ignored, no crash.
  EXPECT_FALSE(p.WantAttrs(kTrain, kRootInode));
}

// The prefill's side of a switch: a directory listed names-only is listed
// again at once (no misses counted), once at a time, and is busy until done.
TEST(PrefillPolicyTest, ListNowQueuesAtOnceAndIsBusyUntilDone) {
  PrefillPolicy p;
  EXPECT_FALSE(p.Busy(7));
  EXPECT_TRUE(p.ListNow(7));
  EXPECT_TRUE(p.Busy(7));
  EXPECT_FALSE(p.ListNow(7));
  PrefillPolicy::Job job;
  ASSERT_TRUE(p.Next(&job));
  EXPECT_EQ(job.dir, 7u);
  EXPECT_FALSE(job.sibling);
  EXPECT_TRUE(p.Busy(7));  // Being listed.
  p.Done(7);
  EXPECT_FALSE(p.Busy(7));
  EXPECT_TRUE(p.ListNow(7));  // Later switches list it again.
}

}  // namespace
}  // namespace shardfs::mount
