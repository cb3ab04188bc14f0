// pack --part's split (tools/pack/pack_part.h): part directory names and the
// cut of a list and of a scan into parts that hold every leaf once,
// samples and the names of one file whole.
#include "tools/pack/pack_part.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tools/pack/pack_plan.h"  // SampleKey

namespace shardfs::pack {
namespace {

TEST(PackPartTest, DirNamesSortInPartOrder) {
  EXPECT_EQ(PartDirName({0, 1}), "part-0");
  EXPECT_EQ(PartDirName({2, 3}), "part-2");
  EXPECT_EQ(PartDirName({7, 11}), "part-07");
  EXPECT_EQ(PartDirName({10, 11}), "part-10");
  EXPECT_EQ(PartDirName({5, 1000}), "part-005");
}

TEST(PackPartTest, ListPartsHoldEveryPathOnceAndSamplesWhole) {
  std::vector<std::string> list;
  for (int i = 0; i < 10; ++i) {
    list.push_back("d/s" + std::to_string(i) + ".jpg");
    list.push_back("d/s" + std::to_string(i) + ".cls");
  }
  list.push_back("e/sub");      // A directory: takes what is below it,
  list.push_back("e/sub/x.y");  // so this line is dropped.
  list.push_back("d/s3.jpg");   // A duplicate.
  std::set<std::string> seen;
  uint64_t units = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    PartCut cut;
    const std::vector<std::string> part = TakeListPart(list, {k, 4}, &cut);
    units = cut.units;
    std::set<std::string> groups;
    for (const std::string& p : part) {
      EXPECT_TRUE(seen.insert(p).second) << p;
      groups.insert(SampleKey(p));
    }
    EXPECT_EQ(groups.size(), cut.last - cut.first);
    for (const std::string& g : groups) {
      if (g.starts_with("d/")) {
        EXPECT_TRUE(std::count(part.begin(), part.end(), g + "jpg") == 1 &&
                    std::count(part.begin(), part.end(), g + "cls") == 1)
            << "sample " << g << " split";
      }
    }
  }
  EXPECT_EQ(units, 11u);
  EXPECT_EQ(seen.size(), 21u);
  EXPECT_FALSE(seen.count("e/sub/x.y"));
}

SourceEntry PartEntry(std::string path, SourceKind kind, uint64_t ino = 0, uint64_t nlink = 1) {
  SourceEntry e;
  e.path = std::move(path);
  e.kind = kind;
  e.ino = ino;
  e.nlink = nlink;
  return e;
}

TEST(PackPartTest, ScanPartsKeepAncestorsAndLinkedNames) {
  TreeScan whole;
  whole.entries = {PartEntry("", SourceKind::kDir),
                   PartEntry("a", SourceKind::kDir),
                   PartEntry("a/s1.jpg", SourceKind::kFile, 10, 2),
                   PartEntry("a/s2.jpg", SourceKind::kFile),
                   PartEntry("b", SourceKind::kDir),
                   PartEntry("b/empty", SourceKind::kDir),
                   PartEntry("b/s3.jpg", SourceKind::kFile),
                   PartEntry("z", SourceKind::kDir),
                   PartEntry("z/link.jpg", SourceKind::kFile, 10, 2)};
  std::multiset<std::string> leaves;
  for (uint64_t k = 0; k < 3; ++k) {
    TreeScan scan = whole;
    PartCut cut;
    TakeScanPart(&scan, {k, 3}, false, &cut);
    EXPECT_EQ(cut.units, 5u);
    ASSERT_FALSE(scan.entries.empty());
    EXPECT_EQ(scan.entries[0].path, "");  // The root, in every part.
    std::set<std::string> paths;
    for (const SourceEntry& e : scan.entries) paths.insert(e.path);
    for (const SourceEntry& e : scan.entries) {
      if (e.path.empty()) continue;
      const std::string parent =
          e.path.substr(0, e.path.rfind('/') == std::string::npos ? 0 : e.path.rfind('/'));
      EXPECT_TRUE(paths.count(parent)) << e.path << " without its directory";
      if (e.kind != SourceKind::kDir || e.path == "b/empty") leaves.insert(e.path);
    }
    // The two names of inode 10 are in one part.
    EXPECT_EQ(paths.count("a/s1.jpg"), paths.count("z/link.jpg")) << "part " << k;
  }
  EXPECT_EQ(leaves, (std::multiset<std::string>{"a/s1.jpg", "a/s2.jpg", "b/empty", "b/s3.jpg",
                                                "z/link.jpg"}));
}

}  // namespace
}  // namespace shardfs::pack
