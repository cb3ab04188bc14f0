// tools/builder/view_create.h: versions made by view create (excludes,
// renames, includes, a version of a version), read back through IndexReader
// (index/view_store.h, index/version_builder.h).
#include "tools/builder/view_create.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::builder {
namespace {

using index::EntryRecord;
using index::EntryType;
using index::IndexReader;
using index::InodeId;
using index::kRootInode;
using index::ReaderOptions;
using index::RecordHolder;
using shardfs::testing::DirMember;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::SymlinkMember;
using shardfs::testing::WriteFile;

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

  ViewCreateReport Create(ViewCreateOptions o) {
    o.index = index_;
    auto r = CreateView(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : ViewCreateReport{};
  }

  std::unique_ptr<IndexReader> base_;
  std::string index_;
};

TEST_F(VersionTest, ExcludeRenameAndAVersionOfAVersion) {
  const Tree base = Walk("");
  ASSERT_EQ(base.size(), 8u);  // a, a/h, a/x, a/y, b, b/z, e, s.
  WriteFile(dir_.path() + "/rn", "a/x\tc/d/x\n");
  ViewCreateOptions o;
  o.name = "v";
  o.exclude_globs = {"b"};
  o.rename_map = dir_.path() + "/rn";
  ViewCreateReport rep = Create(o);
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
  ViewCreateOptions o2;
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
  ViewCreateOptions o;
  o.name = "inc";
  o.include_globs = {"a/y", "e"};
  Create(o);
  Tree t = Walk("inc");
  std::set<std::string> paths;
  for (const auto& [p, e] : t) paths.insert(p);
  EXPECT_EQ(paths, (std::set<std::string>{"a", "a/y", "e"}));
  // Excluding everything under b empties it: b goes too.
  ViewCreateOptions o2;
  o2.name = "nob";
  o2.exclude_globs = {"z"};
  Create(o2);
  Tree t2 = Walk("nob");
  EXPECT_EQ(t2.count("b"), 0u);
  EXPECT_EQ(t2.count("e"), 1u);  // Empty in the source: stays.
}

}  // namespace
}  // namespace shardfs::builder
