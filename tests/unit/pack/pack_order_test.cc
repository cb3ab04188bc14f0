// The pure parts of pack: WebDataset's sample key and the order pack stores
// entries in (samples whole, directories before their contents), from
// tools/pack/pack_plan.h; shard name patterns, from tools/pack/shard_name.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/pack/pack_plan.h"
#include "tools/pack/shard_name.h"

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

TEST(ShardNameTest, OneIntegerConversion) {
  Result<ShardNamePattern> p = ParseShardName("train-%06d.tar");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->Format(42), "train-000042.tar");
  EXPECT_TRUE(p->Matches("train-000042.tar", false));
  EXPECT_FALSE(p->Matches("train-000042.tar.tmp", false));
  EXPECT_TRUE(p->Matches("train-000042.tar.tmp", true));
  EXPECT_FALSE(p->Matches("train-42x.tar", false));
  EXPECT_FALSE(p->Matches("other-000042.tar", false));
  Result<ShardNamePattern> pct = ParseShardName("100%%-%u.tar");
  ASSERT_TRUE(pct.ok()) << pct.status().message();
  EXPECT_EQ(pct->Format(7), "100%-7.tar");
  for (const char* bad : {"train.tar", "a-%d-%d.tar", "a-%s.tar", "dir/%d.tar"}) {
    EXPECT_EQ(ParseShardName(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace shardfs::pack
