// src/mount/dir_prefill.h's AttrPolicy without a mount: listings are names-only
// until a file lookup in the directory, or in a sibling, asks for attributes;
// what a lookup in the root turns on; the inheritance down a subtree.
#include <gtest/gtest.h>

#include "src/mount/dir_prefill.h"

namespace shardfs::mount {

using reader::InodeId;
namespace {

using index::InodeId;
using index::kRootInode;

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
