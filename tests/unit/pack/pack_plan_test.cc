// tools/pack/pack_plan.h, the pure parts of pack: WebDataset's sample key and
// the order pack stores entries in (samples whole, directories before their
// contents).
#include "tools/pack/pack_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "index/member_path.h"

namespace shardfs::pack {
namespace {

std::pair<std::string, std::string> Key(std::string_view path) {
  std::string_view key, ext;
  if (!WebDatasetKey(path, &key, &ext)) return {"<none>", ""};
  return {std::string(key), std::string(ext)};
}

TEST(WebDatasetKeyTest, DirectoryPlusNameUpToTheFirstDot) {
  EXPECT_EQ(Key("train/n01/n01_10.jpg"),
            std::make_pair(std::string("train/n01/n01_10"), std::string("jpg")));
  EXPECT_EQ(Key("a/b.c.d"), std::make_pair(std::string("a/b"), std::string("c.d")));
  EXPECT_EQ(Key("x.tar.gz"), std::make_pair(std::string("x"), std::string("tar.gz")));
  EXPECT_EQ(Key("dir.v2/s.jpg"), std::make_pair(std::string("dir.v2/s"), std::string("jpg")));
  EXPECT_EQ(Key("noext").first, "<none>");
  EXPECT_EQ(Key("a/noext").first, "<none>");
  EXPECT_EQ(Key(".hidden").first, "<none>");
}

TEST(SampleKeyTest, DirectoryPlusSampleGroup) {
  EXPECT_EQ(SampleKey("a/img1.jpg"), "a/img1.");
  EXPECT_EQ(SampleKey("a/img1.seg.png"), "a/img1.");
  EXPECT_EQ(SampleKey("a/img10.jpg"), "a/img10.");
  EXPECT_EQ(SampleKey("a/noext"), "a/noext");
  EXPECT_EQ(SampleKey("top.txt"), "top.");
  EXPECT_EQ(SampleKey("a/.x"), "a/.");
  EXPECT_EQ(SampleKey("a/.y"), "a/.");  // One sample, as pack groups them.
}

SourceEntry Entry(std::string path, SourceKind kind = SourceKind::kFile) {
  SourceEntry e;
  e.path = std::move(path);
  e.kind = kind;
  return e;
}

std::vector<std::string> Sorted(std::vector<SourceEntry> entries) {
  std::sort(entries.begin(), entries.end(), PackOrderLess);
  std::vector<std::string> out;
  for (const SourceEntry& e : entries) out.push_back(e.path);
  return out;
}

TEST(PackOrderTest, ASampleStaysWholeAndDirectoriesPrecedeTheirContents) {
  std::vector<SourceEntry> e = {
      Entry("x/s.z"), Entry("x/s.b", SourceKind::kDir), Entry("x/s.b/in.txt"),
      Entry("x/s.a"), Entry("x", SourceKind::kDir),     Entry("x/r.jpg"),
      Entry("")};
  e.front().kind = SourceKind::kFile;
  e.back().kind = SourceKind::kDir;
  EXPECT_EQ(Sorted(e), (std::vector<std::string>{"", "x", "x/r.jpg", "x/s.a", "x/s.z", "x/s.b",
                                                 "x/s.b/in.txt"}));
}

TEST(PackOrderTest, PlainSamplesKeepNameOrder) {
  std::vector<SourceEntry> e = {Entry("n0002.jpg"), Entry("n0001.json"), Entry("n-1.jpg"),
                                Entry("n0001.jpg"), Entry("n.jpg")};
  std::vector<std::string> names;
  for (const SourceEntry& x : e) names.push_back(x.path);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(Sorted(e), names);
}

// A tree of `classes` directories of `samples` samples (a .jpg and a .json
// each), an empty directory "zz" and a hard link "c00/s000.link" to
// "c01/s000.jpg".
TreeScan ClassTree(int classes, int samples) {
  TreeScan scan;
  scan.entries.push_back(Entry("", SourceKind::kDir));
  scan.entries.push_back(Entry("zz", SourceKind::kDir));
  for (int c = 0; c < classes; ++c) {
    const std::string dir = fmt::format("c{:02d}", c);
    scan.entries.push_back(Entry(dir, SourceKind::kDir));
    for (int i = 0; i < samples; ++i) {
      for (const char* ext : {"jpg", "json"}) {
        scan.entries.push_back(Entry(fmt::format("{}/s{:03d}.{}", dir, i, ext)));
      }
    }
  }
  SourceEntry link = Entry("c00/s000.link");
  link.nlink = 2;
  link.ino = 7;
  scan.entries.push_back(link);
  for (SourceEntry& e : scan.entries) {
    if (e.path == "c01/s000.jpg") {
      e.nlink = 2;
      e.ino = 7;
    }
  }
  return scan;
}

std::vector<std::string> PlannedPaths(const TreeScan& scan, const PackOptions& options) {
  PackReport report;
  std::vector<std::string> out;
  for (const PlannedMember& pm : PlanMembers(scan, options, &report)) {
    out.push_back(scan.entries[pm.entry].path);
  }
  EXPECT_TRUE(report.errors.empty());
  return out;
}

// Every entry once; a directory before everything below it; the files of a
// sample adjacent. Returns the sample keys in order, each once.
std::vector<std::string> CheckShape(const TreeScan& scan, const std::vector<std::string>& got) {
  std::vector<std::string> want;
  for (const SourceEntry& e : scan.entries) want.push_back(e.path);
  std::vector<std::string> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted, want);
  std::set<std::string_view> seen_dirs;
  std::vector<std::string> keys;
  for (const std::string& p : got) {
    if (!p.empty()) {
      EXPECT_TRUE(seen_dirs.count(index::ParentPath(p))) << p << " before its directory";
    }
    if (!p.empty() && p.find('.') == std::string::npos) {
      seen_dirs.insert(p);
      continue;
    }
    if (p.empty()) {
      seen_dirs.insert(p);
      continue;
    }
    const std::string key = SampleKey(p);
    if (keys.empty() || keys.back() != key) {
      EXPECT_EQ(std::count(keys.begin(), keys.end(), key), 0) << "sample " << key << " split";
      keys.push_back(key);
    }
  }
  return keys;
}

TEST(SampleOrderTest, ShuffleMixesClassesKeepsSamplesWholeAndRepeats) {
  const TreeScan scan = ClassTree(8, 20);
  PackOptions plain;
  const std::vector<std::string> tree_order = PlannedPaths(scan, plain);
  PackOptions o;
  o.shuffle = true;
  o.shuffle_seed = 1;
  const std::vector<std::string> a = PlannedPaths(scan, o);
  EXPECT_NE(a, tree_order);
  EXPECT_EQ(a, PlannedPaths(scan, o));
  const std::vector<std::string> keys = CheckShape(scan, a);
  // The first 40 samples come from at least 6 of the 8 classes (in tree
  // order: 2).
  std::set<std::string> classes;
  for (size_t i = 0; i < 40 && i < keys.size(); ++i) classes.insert(keys[i].substr(0, 3));
  EXPECT_GE(classes.size(), 6u);
  o.shuffle_seed = 2;
  const std::vector<std::string> b = PlannedPaths(scan, o);
  EXPECT_NE(a, b);
  CheckShape(scan, b);
}

TEST(SampleOrderTest, AHardLinkHoldsTheDataWhereverItsFirstNameGoes) {
  const TreeScan scan = ClassTree(3, 5);
  PackOptions o;
  o.shuffle = true;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    o.shuffle_seed = seed;
    PackReport report;
    const std::vector<PlannedMember> m = PlanMembers(scan, o, &report);
    std::vector<std::string> names;  // The two names of inode 7, in order.
    for (const PlannedMember& pm : m) {
      if (scan.entries[pm.entry].ino != 7) continue;
      names.push_back(scan.entries[pm.entry].path);
      EXPECT_EQ(pm.type, names.size() == 1 ? archive::TarType::kFile : archive::TarType::kHardlink)
          << "seed " << seed;
    }
    ASSERT_EQ(names.size(), 2u);
  }
}

TEST(SampleOrderTest, ListOrderIsKeptAndDirectoriesComeFirst) {
  TreeScan scan = ClassTree(3, 2);
  // What a scan of the list below finds.
  std::erase_if(scan.entries, [](const SourceEntry& e) {
    return e.path.starts_with("c02/") && e.path != "c02/s001.json";
  });
  // A listed directory takes what is below it; its samples follow in tree
  // order, after those listed before it.
  scan.listed = {"c02/s001.json", "zz",           "c01",          "c00/s001.jpg", "c00/s000.link",
                 "c00/s000.json", "c00/s000.jpg", "c00/s001.json"};
  PackOptions o;
  EXPECT_EQ(PlannedPaths(scan, o),
            (std::vector<std::string>{"", "c02", "c02/s001.json", "zz", "c01", "c01/s000.jpg",
                                      "c01/s000.json", "c01/s001.jpg", "c01/s001.json", "c00",
                                      "c00/s001.jpg", "c00/s001.json", "c00/s000.jpg",
                                      "c00/s000.json", "c00/s000.link"}));
  // With shuffle, the list only says what is packed.
  o.shuffle = true;
  const std::vector<std::string> a = PlannedPaths(scan, o);
  scan.listed.clear();
  EXPECT_EQ(a, PlannedPaths(scan, o));
}

}  // namespace
}  // namespace shardfs::pack
