// `view diff` logic: DiffEntries on entry lists made by hand (the matching
// rules of tools/builder/view_diff.h, one case each), the text form, and WalkView /
// DiffViews on a real index.
#include "tools/builder/view_diff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/unit/index/index_test_util.h"

namespace shardfs::builder {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::HardLinkMember;
using ::shardfs::testing::SymlinkMember;
using Paths = std::vector<std::string>;

TEST(DiffEntriesTest, SameEntriesInAnyOrderHaveNoDiff) {
  std::vector<ViewEntry> a = {{2, "d/"}, {3, "d/x"}, {4, "y"}};
  std::vector<ViewEntry> b = {{4, "y"}, {3, "d/x"}, {2, "d/"}};
  EXPECT_TRUE(DiffEntries(a, b).empty());
}

TEST(DiffEntriesTest, AddedAndRemovedByInode) {
  ViewDiff d = DiffEntries({{2, "a"}, {3, "d/"}, {4, "d/b"}}, {{2, "a"}, {5, "c"}, {6, "e/"}});
  EXPECT_EQ(d.added, (Paths{"c", "e/"}));
  EXPECT_EQ(d.removed, (Paths{"d/", "d/b"}));
  EXPECT_TRUE(d.renamed.empty());
  EXPECT_TRUE(d.replaced.empty());
}

TEST(DiffEntriesTest, SameInodeAtAnotherPathIsRenamed) {
  ViewDiff d =
      DiffEntries({{2, "d/"}, {3, "d/x.jpg"}, {4, "z"}}, {{2, "e/"}, {3, "e/x.jpg"}, {4, "z"}});
  EXPECT_EQ(d.renamed, (std::vector<ViewRename>{{"d/", "e/"}, {"d/x.jpg", "e/x.jpg"}}));
  EXPECT_TRUE(d.added.empty());
  EXPECT_TRUE(d.removed.empty());
  EXPECT_TRUE(d.replaced.empty());
}

TEST(DiffEntriesTest, SamePathAnotherInodeIsReplacedNotAddedOrRemoved) {
  // What index add does: the path stays, its inode is new.
  ViewDiff d = DiffEntries({{2, "a"}, {3, "b"}}, {{2, "a"}, {9, "b"}});
  EXPECT_EQ(d.replaced, (Paths{"b"}));
  EXPECT_TRUE(d.added.empty());
  EXPECT_TRUE(d.removed.empty());
  EXPECT_TRUE(d.renamed.empty());
}

TEST(DiffEntriesTest, FileBecomingADirectoryIsTwoPaths) {
  ViewDiff d = DiffEntries({{2, "a"}}, {{7, "a/"}, {8, "a/b"}});
  EXPECT_EQ(d.removed, (Paths{"a"}));
  EXPECT_EQ(d.added, (Paths{"a/", "a/b"}));
  EXPECT_TRUE(d.replaced.empty());
}

TEST(DiffEntriesTest, HardLinkGainedAndLostArePathsAddedAndRemoved) {
  // Inode 3 keeps "k", loses "l1" and gains nothing; inode 4 keeps "m" and
  // gains "n": no rename, since nothing moved.
  ViewDiff d = DiffEntries({{3, "k"}, {3, "l1"}, {4, "m"}}, {{3, "k"}, {4, "m"}, {4, "n"}});
  EXPECT_EQ(d.removed, (Paths{"l1"}));
  EXPECT_EQ(d.added, (Paths{"n"}));
  EXPECT_TRUE(d.renamed.empty());
}

TEST(DiffEntriesTest, SeveralPathsOfOneInodePairInSortedOrder) {
  ViewDiff d = DiffEntries({{3, "b"}, {3, "a"}, {3, "c"}}, {{3, "y"}, {3, "x"}});
  EXPECT_EQ(d.renamed, (std::vector<ViewRename>{{"a", "x"}, {"b", "y"}}));
  EXPECT_EQ(d.removed, (Paths{"c"}));
}

TEST(DiffEntriesTest, RenameOntoAPathAnotherInodeLeftIsBothRenamedAndReplaced) {
  // 2 moves a -> b; b's old inode 3 is gone.
  ViewDiff d = DiffEntries({{2, "a"}, {3, "b"}}, {{2, "b"}});
  EXPECT_EQ(d.renamed, (std::vector<ViewRename>{{"a", "b"}}));
  EXPECT_EQ(d.replaced, (Paths{"b"}));
  EXPECT_TRUE(d.removed.empty());
  EXPECT_TRUE(d.added.empty());
}

TEST(DiffEntriesTest, SwappedPathsAreRenamedAndReplaced) {
  ViewDiff d = DiffEntries({{2, "a"}, {3, "b"}}, {{2, "b"}, {3, "a"}});
  EXPECT_EQ(d.renamed, (std::vector<ViewRename>{{"a", "b"}, {"b", "a"}}));
  EXPECT_EQ(d.replaced, (Paths{"a", "b"}));
}

TEST(DiffEntriesTest, ManyEntriesFewDifferences) {
  // 200,000 entries a side, 1 in 10 changed: every change found, once.
  std::vector<ViewEntry> a, b;
  size_t n = 200000;
  for (uint64_t i = 0; i < n; ++i) {
    std::string p = fmt::format("dir{:03}/file{:07}.jpg", i % 1000, i);
    a.push_back({i + 2, p});
    switch (i % 40) {
      case 0:
        break;  // removed
      case 10:
        b.push_back({i + 2, p + ".moved"});
        break;  // renamed
      case 20:
        b.push_back({n + 10 + i, p});
        break;  // replaced
      case 30:
        b.push_back({i + 2, p});
        b.push_back({2 * n + 10 + i, p + ".new"});
        break;
      default:
        b.push_back({i + 2, p});
    }
  }
  std::reverse(b.begin(), b.end());
  ViewDiff d = DiffEntries(std::move(a), std::move(b));
  EXPECT_EQ(d.removed.size(), n / 40);
  EXPECT_EQ(d.renamed.size(), n / 40);
  EXPECT_EQ(d.replaced.size(), n / 40);
  EXPECT_EQ(d.added.size(), n / 40);
  EXPECT_TRUE(std::is_sorted(d.added.begin(), d.added.end()));
  EXPECT_TRUE(std::is_sorted(d.removed.begin(), d.removed.end()));
}

TEST(FormatDiffTextTest, LinesSortedByPathThenSummary) {
  ViewDiff d;
  d.a = "default@1";
  d.b = "cats@2";
  d.added = {"b", "z/"};
  d.removed = {"c"};
  d.renamed = {{"a", "y"}};
  d.replaced = {"m"};
  EXPECT_EQ(FormatDiffText(d),
            "R a -> y\n"
            "+ b\n"
            "- c\n"
            "M m\n"
            "+ z/\n"
            "default@1 -> cats@2: 2 added, 1 removed, 1 renamed, 1 replaced\n");
}

TEST(FormatDiffTextTest, NoChangesIsTheSummaryAlone) {
  ViewDiff d;
  d.a = "default@1";
  d.b = "default@1";
  EXPECT_EQ(FormatDiffText(d),
            "default@1 -> default@1: 0 added, 0 removed, 0 renamed, 0 replaced\n");
}

class WalkViewTest : public ::shardfs::testing::WriterFixture {};

TEST_F(WalkViewTest, EveryPathOnceDirectoriesWithSlashHardLinksPerPath) {
  auto r =
      Build({DirMember("d"), FileMember("d/a.jpg", 3, 1, 512), DirMember("d/e"), DirMember("empty"),
             SymlinkMember("s", "d/a.jpg"), HardLinkMember("h", "d/a.jpg")});
  ASSERT_TRUE(r);
  auto entries = WalkView(*r);
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  std::vector<std::string> paths;
  uint64_t a_inode = 0, h_inode = 0;
  for (size_t k = 0; k < entries->size(); ++k) {
    paths.emplace_back(entries->path(k));
    if (entries->path(k) == "d/a.jpg") a_inode = entries->inode(k);
    if (entries->path(k) == "h") h_inode = entries->inode(k);
  }
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (Paths{"d/", "d/a.jpg", "d/e/", "empty/", "h", "s"}));
  EXPECT_NE(a_inode, 0u);
  EXPECT_EQ(a_inode, h_inode);
}

TEST_F(WalkViewTest, DefaultAgainstItselfIsEmpty) {
  ASSERT_TRUE(Build({DirMember("d"), FileMember("d/a.jpg", 3), FileMember("b.txt", 1, 1, 1024)}));
  std::string idx = dir_ / "idx";
  auto d = DiffViews(idx, "", "");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->empty());
  EXPECT_EQ(d->a, "default@1");
  EXPECT_EQ(d->a, d->b);
}

TEST_F(WalkViewTest, UnknownViewNamesIndexAndView) {
  ASSERT_TRUE(Build({FileMember("a", 1)}));
  std::string idx = dir_ / "idx";
  auto d = DiffViews(idx, "", "no-such-view");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(idx), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("no-such-view"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace shardfs::builder
