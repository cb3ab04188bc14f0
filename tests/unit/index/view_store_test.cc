// Views and versions: the inode sets, the names and specs, the version
// record (index/view_store.h; versions made by view create and read back:
// tests/unit/builder/view_create_test.cc; rank partitions:
// rank_partition_test.cc).
#include "index/view_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/inode_set.h"

namespace shardfs::index {
namespace {

TEST(InodeSetTest, RunsFromUnsortedInodes) {
  InodeSet s = InodeSet::FromUnsorted({9, 3, 4, 5, 5, 12, 10, 1});
  ASSERT_EQ(s.runs().size(), 4u);  // [1], [3..5], [9..10], [12].
  EXPECT_EQ(s.size(), 7u);
  for (uint64_t i : {1, 3, 4, 5, 9, 10, 12}) EXPECT_TRUE(s.Contains(i)) << i;
  for (uint64_t i : {0, 2, 6, 8, 11, 13, 1000}) EXPECT_FALSE(s.Contains(i)) << i;
}

TEST(InodeSetTest, EncodeDecodeRoundTripAndDamage) {
  std::mt19937_64 rnd(7);
  std::vector<uint64_t> v;
  for (int i = 0; i < 5000; ++i) v.push_back(rnd() % 100000 + 1);
  InodeSet s = InodeSet::FromUnsorted(v);
  std::string enc;
  s.Encode(&enc);
  Result<InodeSet> d = InodeSet::Decode(enc);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->size(), s.size());
  for (uint64_t i = 0; i < 100010; ++i) ASSERT_EQ(d->Contains(i), s.Contains(i)) << i;
  // About 2 bytes per scattered inode.
  EXPECT_LT(enc.size(), 3 * s.size());
  EXPECT_FALSE(InodeSet::Decode(enc + "x").ok());
  EXPECT_FALSE(InodeSet::Decode(enc.substr(0, enc.size() - 1)).ok());
  // Two runs that touch (gap 0 after the first) are not an encoding.
  std::string touching = {2, 1, 0, 0, 0};
  EXPECT_FALSE(InodeSet::Decode(touching).ok());
}

TEST(InodeSetTest, UnionMergesOverlapsAndNeighbours) {
  InodeSet a = InodeSet::FromUnsorted({1, 2, 3, 10, 11});
  InodeSet b = InodeSet::FromUnsorted({3, 4, 12, 20});
  InodeSet u = InodeSet::Union(a, b);
  std::set<uint64_t> want = {1, 2, 3, 4, 10, 11, 12, 20};
  EXPECT_EQ(u.size(), want.size());
  for (uint64_t i = 0; i < 25; ++i) EXPECT_EQ(u.Contains(i), want.count(i) == 1) << i;
  EXPECT_EQ(u.runs().size(), 3u);
}

TEST(ViewSpecTest, NamesVersionsAndTags) {
  auto d = ParseViewSpec("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->name, "default");
  auto v = ParseViewSpec("clean@12");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->name, "clean");
  EXPECT_EQ(v->version, 12u);
  auto t = ParseViewSpec("clean@stable-1.b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tag, "stable-1.b");
  for (const char* bad : {"@1", "a@0", "a@", "a b", "-a", "a/b", "a@x@y", "a@99999999999"}) {
    EXPECT_FALSE(ParseViewSpec(bad).ok()) << bad;
  }
  EXPECT_FALSE(CheckTagName("123").ok());
  EXPECT_TRUE(CheckTagName("v1").ok());
  EXPECT_FALSE(CheckViewName(std::string(129, 'a'), "view").ok());
}

TEST(VersionRecordTest, RoundTripAndDamage) {
  VersionRecord r;
  r.view = ViewId{7};
  r.shard_count = 3;
  r.base_max_inode = 100;
  r.max_inode = 104;
  r.files = 50;
  r.dirs = 9;
  r.symlinks = 1;
  r.bytes = 123456;
  r.created_ns = -5;
  r.kind = VersionKind::kAdd;
  r.from = "default@1";
  r.message = std::string("drop\0bad", 8);
  std::string enc;
  EncodeVersionRecord(r, &enc);
  VersionRecord d;
  ASSERT_TRUE(DecodeVersionRecord(enc, &d).ok());
  EXPECT_EQ(d.view, r.view);
  EXPECT_EQ(d.max_inode, 104u);
  EXPECT_EQ(d.from, r.from);
  EXPECT_EQ(d.message, r.message);
  EXPECT_EQ(d.kind, VersionKind::kAdd);
  EXPECT_FALSE(DecodeVersionRecord(enc.substr(0, enc.size() - 1), &d).ok());
  std::string bad_kind = enc;
  bad_kind[64] = 9;
  EXPECT_FALSE(DecodeVersionRecord(bad_kind, &d).ok());
}

}  // namespace
}  // namespace shardfs::index
