// Views and versions: the inode sets, the names and specs, the version
// record, rank partitions, and versions made by view create read back
// through IndexReader (index/view_store.h, index/version_builder.h).
#include "index/view_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "index/index_reader.h"
#include "index/inode_set.h"
#include "index/rank_partition.h"
#include "tests/unit/test_util.h"
#include "tools/builder/view_create.h"

namespace shardfs::index {
namespace {

using shardfs::testing::DirMember;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::SymlinkMember;
using shardfs::testing::WriteFile;

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

TEST(RankPartitionTest, WholeShardsBalancedWithinOneShard) {
  std::mt19937_64 rnd(3);
  for (uint32_t world : {1u, 2u, 3u, 7u, 16u}) {
    for (uint64_t seed : {0ull, 1ull, 99ull}) {
      std::vector<uint64_t> bytes(50);
      for (auto& b : bytes) b = rnd() % (256 << 20);
      std::vector<uint32_t> rank = AssignShardsToRanks(bytes, world, seed);
      ASSERT_EQ(rank.size(), bytes.size());
      std::vector<uint64_t> load(world, 0);
      for (size_t i = 0; i < bytes.size(); ++i) {
        ASSERT_LT(rank[i], world);
        load[rank[i]] += bytes[i];
      }
      const uint64_t largest = *std::max_element(bytes.begin(), bytes.end());
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << "world " << world << " seed " << seed;
      EXPECT_EQ(AssignShardsToRanks(bytes, world, seed), rank);  // Same on every node.
    }
  }
  // Equal shards: the seed decides which rank gets which.
  std::vector<uint64_t> equal(40, 1000);
  EXPECT_NE(AssignShardsToRanks(equal, 4, 1), AssignShardsToRanks(equal, 4, 2));
}

// Versions made by view create, read back through the reader.
class VersionTest : public shardfs::testing::WriterFixture {
 protected:
  void SetUp() override {
    base_ = Build({FileMember("a/x", 10, 5, 512), FileMember("a/y", 20, 6, 1024),
                   HardLinkMember("a/h", "a/x"), FileMember("b/z", 30, 7, 2048), DirMember("e"),
                   SymlinkMember("s", "a/x")});
    ASSERT_TRUE(base_);
    index_ = dir_.path() + "/idx";
  }

  struct Entry {
    EntryType type;
    uint64_t inode;
    uint32_t nlink;
    uint64_t offset;
    bool operator==(const Entry&) const = default;
  };
  using Tree = std::map<std::string, Entry>;

  // Every path of `view` with its record; checks GetInode agrees with the
  // names and that parents are right.
  Tree Walk(const std::string& view) {
    ReaderOptions ro;
    ro.view = view;
    auto r = IndexReader::Open(index_, ro);
    EXPECT_TRUE(r.ok()) << r.status().message();
    Tree out;
    if (!r.ok()) return out;
    std::function<void(InodeId, const std::string&)> visit = [&](InodeId dir,
                                                                 const std::string& prefix) {
      std::vector<std::pair<std::string, EntryRecord>> kids;
      Status s = (*r)->ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& rec) {
        kids.emplace_back(std::string(name), rec);
        return true;
      });
      ASSERT_TRUE(s.ok()) << s.message();
      for (const auto& [name, rec] : kids) {
        const std::string path = prefix.empty() ? name : prefix + "/" + name;
        out[path] = Entry{rec.type, rec.inode.value, rec.nlink, rec.offset};
        EntryRecord byinode, looked;
        RecordHolder h1, h2;
        ASSERT_TRUE((*r)->GetInode(rec.inode, &byinode, &h1).ok()) << path;
        EXPECT_EQ(byinode.nlink, rec.nlink) << path;
        ASSERT_TRUE((*r)->Lookup(dir, name, &looked, &h2).ok()) << path;
        EXPECT_EQ(looked.inode, rec.inode) << path;
        if (rec.type == EntryType::kDir) {
          EXPECT_EQ(rec.parent, dir) << path;
          visit(rec.inode, path);
        }
      }
    };
    visit(kRootInode, "");
    // Every inode once in ForEachInode, and the same set as the names.
    std::set<uint64_t> by_name, by_scan;
    for (const auto& [p, e] : out) by_name.insert(e.inode);
    by_name.insert(kRootInode.value);
    EXPECT_TRUE((*r)->ForEachInode(kRootInode,
                                   [&](const EntryRecord& rec) {
                                     EXPECT_TRUE(by_scan.insert(rec.inode.value).second)
                                         << rec.inode.value;
                                     return true;
                                   })
                    .ok());
    EXPECT_EQ(by_scan, by_name) << view;
    return out;
  }

  builder::ViewCreateReport Create(builder::ViewCreateOptions o) {
    o.index = index_;
    auto r = builder::CreateView(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : builder::ViewCreateReport{};
  }

  std::unique_ptr<IndexReader> base_;
  std::string index_;
};

TEST_F(VersionTest, ExcludeRenameAndAVersionOfAVersion) {
  const Tree base = Walk("");
  ASSERT_EQ(base.size(), 8u);  // a, a/h, a/x, a/y, b, b/z, e, s.
  WriteFile(dir_.path() + "/rn", "a/x\tc/d/x\n");
  builder::ViewCreateOptions o;
  o.name = "v";
  o.exclude_globs = {"b"};
  o.rename_map = dir_.path() + "/rn";
  builder::ViewCreateReport rep = Create(o);
  EXPECT_EQ(rep.created.label(), "v@1");
  EXPECT_EQ(rep.summary.removed, 2u);  // b, b/z.
  EXPECT_EQ(rep.summary.moved, 1u);
  Tree v1 = Walk("v");
  EXPECT_EQ(v1.count("b"), 0u);
  ASSERT_EQ(v1.count("c/d/x"), 1u);
  EXPECT_EQ(v1["c/d/x"].inode, base.at("a/x").inode);  // Same inode: a hard link still.
  EXPECT_EQ(v1["c/d/x"].nlink, 2u);
  EXPECT_EQ(v1["a/h"].inode, base.at("a/x").inode);
  EXPECT_EQ(v1.count("a/x"), 0u);
  EXPECT_EQ(v1["a/y"], base.at("a/y"));
  EXPECT_EQ(v1["c"].type, EntryType::kDir);
  EXPECT_GT(v1["c"].inode, base_->max_inode());  // A new inode above the base's.

  // From v@1: drop a/h; x keeps one name and its link count follows.
  WriteFile(dir_.path() + "/ex", "a/h\n");
  builder::ViewCreateOptions o2;
  o2.name = "v";
  o2.from = "v@1";
  o2.exclude_list = dir_.path() + "/ex";
  EXPECT_EQ(Create(o2).created.label(), "v@2");
  Tree v2 = Walk("v");
  EXPECT_EQ(v2.count("a/h"), 0u);
  EXPECT_EQ(v2["c/d/x"].nlink, 1u);
  EXPECT_EQ(v2["a/y"], base.at("a/y"));
  // The earlier versions are what they were.
  EXPECT_EQ(Walk("v@1"), v1);
  EXPECT_EQ(Walk("default"), base);
}

TEST_F(VersionTest, IncludesKeepWhatTheyNameAndEmptiedDirectoriesGo) {
  builder::ViewCreateOptions o;
  o.name = "inc";
  o.include_globs = {"a/y", "e"};
  Create(o);
  Tree t = Walk("inc");
  std::set<std::string> paths;
  for (const auto& [p, e] : t) paths.insert(p);
  EXPECT_EQ(paths, (std::set<std::string>{"a", "a/y", "e"}));
  // Excluding everything under b empties it: b goes too.
  builder::ViewCreateOptions o2;
  o2.name = "nob";
  o2.exclude_globs = {"z"};
  Create(o2);
  Tree t2 = Walk("nob");
  EXPECT_EQ(t2.count("b"), 0u);
  EXPECT_EQ(t2.count("e"), 1u);  // Empty in the source: stays.
}

}  // namespace
}  // namespace shardfs::index
