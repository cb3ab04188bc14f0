// `view export` logic: sample keys, grouping (shard, offset, tar path) lists
// into per-shard key lists, ExportView on a real index, the atomic write.
#include "tools/builder/view_export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "tests/unit/index/index_test_util.h"
#include "tools/builder/view_create.h"
#include "tools/builder/view_diff.h"

namespace shardfs::builder {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::HardLinkMember;
using ::shardfs::testing::SymlinkMember;
using Keys = std::vector<std::string>;

TEST(SampleKeyTest, EverythingFromTheFirstDotOfTheBasename) {
  EXPECT_EQ(SampleKey("a/b/c.jpg"), "a/b/c");
  EXPECT_EQ(SampleKey("a/b/c.seg.png"), "a/b/c");
  EXPECT_EQ(SampleKey("c.tar.gz"), "c");
  EXPECT_EQ(SampleKey("x.y/z.cls"), "x.y/z");  // Dots in directories stay.
  EXPECT_EQ(SampleKey("x.y/README"), "x.y/README");
  EXPECT_EQ(SampleKey("n."), "n");
}

TEST(SampleKeyTest, LeadingDotsBelongToTheName) {
  EXPECT_EQ(SampleKey(".hidden"), ".hidden");
  EXPECT_EQ(SampleKey("d/.cfg.json"), "d/.cfg");
  EXPECT_EQ(SampleKey("d/..x.y"), "d/..x");
  EXPECT_EQ(SampleKey("d/..."), "d/...");
}

TEST(GroupKeysTest, ShardsInIdOrderKeysInOffsetOrderOnce) {
  std::vector<ShardFile>
      files =
          {
              {2, 512, "z/b.jpg"},   {0, 4096, "a/2.jpg"}, {0, 512, "a/9.cls"},
              {0, 1024, "a/9.jpg"},  {2, 0, "z/a.txt"},    {0, 2048, "a/1.jpg"},
              {0, 8192, "a/1.json"},  // Later in the shard than a/2: a/1 is already listed.
          };
  std::vector<ExportShard> got = GroupKeys(files);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].shard_id, 0u);
  EXPECT_EQ(got[0].keys, (Keys{"a/9", "a/1", "a/2"}));
  EXPECT_EQ(got[1].shard_id, 2u);
  EXPECT_EQ(got[1].keys, (Keys{"z/a", "z/b"}));
}

TEST(GroupKeysTest, SameKeyInTwoShardsIsListedInEach) {
  std::vector<ExportShard> got = GroupKeys({{1, 0, "k.jpg"}, {0, 0, "k.cls"}});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].keys, (Keys{"k"}));
  EXPECT_EQ(got[1].keys, (Keys{"k"}));
}

TEST(GroupKeysTest, NoFilesNoShards) { EXPECT_TRUE(GroupKeys({}).empty()); }

class ExportViewTest : public ::shardfs::testing::WriterFixture {};

TEST_F(ExportViewTest, DefaultViewKeysInTarOrderSymlinksAndDirsLeftOut) {
  // Offsets deliberately not in path order: tar order wins.
  auto r =
      Build({DirMember("s"), FileMember("s/b.jpg", 3, 1, 512), FileMember("s/b.cls", 1, 1, 1024),
             FileMember("s/a.jpg", 3, 1, 2048), SymlinkMember("s/c.jpg", "a.jpg"),
             DirMember("s/d.dir"), HardLinkMember("s/e.jpg", "s/a.jpg")});
  ASSERT_TRUE(r);
  std::string shard = r->ShardPath(index::ShardId{0});
  r.reset();
  auto ex = ExportView(dir_ / "idx", "");
  ASSERT_TRUE(ex.ok()) << ex.status().message();
  EXPECT_EQ(ex->view, "default@1");
  ASSERT_EQ(ex->shards.size(), 1u);
  EXPECT_EQ(ex->shards[0].path, shard);
  // The hard link shares a.jpg's offset: both names are keys there.
  EXPECT_EQ(ex->shards[0].keys, (Keys{"s/b", "s/a", "s/e"}));
  EXPECT_EQ(FormatShardList(*ex), shard + "\n");
}

TEST_F(ExportViewTest, NoFilesNoShards) {
  ASSERT_TRUE(Build({DirMember("d"), SymlinkMember("l", "d")}));
  auto ex = ExportView(dir_ / "idx", "");
  ASSERT_TRUE(ex.ok()) << ex.status().message();
  EXPECT_TRUE(ex->shards.empty());
  EXPECT_EQ(FormatShardList(*ex), "");
}

TEST_F(ExportViewTest, UnknownViewNamesIndexAndView) {
  ASSERT_TRUE(Build({FileMember("a", 1)}));
  std::string idx = dir_ / "idx";
  auto ex = ExportView(idx, "no-such-view");
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find(idx), std::string::npos) << ex.status().message();
  EXPECT_NE(ex.status().message().find("no-such-view"), std::string::npos) << ex.status().message();
}

TEST_F(ExportViewTest, NamedViewKeysByTarPathAndDiffsByInode) {
  auto r =
      Build({DirMember("s"), FileMember("s/a.jpg", 3, 1, 512), FileMember("s/a.cls", 1, 1, 1024),
             FileMember("s/b.jpg", 3, 1, 2048), FileMember("s/c.jpg", 3, 1, 4096)});
  ASSERT_TRUE(r);
  r.reset();
  ::shardfs::testing::WriteFile(dir_ / "map", "s/b.jpg\tt/bee.jpg\n");
  ViewCreateOptions o;
  o.index = dir_ / "idx";
  o.name = "sel";
  o.exclude_globs = {"c.jpg"};
  o.rename_map = dir_ / "map";
  auto created = CreateView(o);
  ASSERT_TRUE(created.ok()) << created.status().message();

  auto ex = ExportView(o.index, "sel");
  ASSERT_TRUE(ex.ok()) << ex.status().message();
  EXPECT_EQ(ex->view, "sel@1");
  ASSERT_EQ(ex->shards.size(), 1u);
  // b.jpg keys by its path in the tar, not by its name in the view.
  EXPECT_EQ(ex->shards[0].keys, (Keys{"s/a", "s/b"}));

  auto d = DiffViews(o.index, "default", "sel");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->removed, (Keys{"s/c.jpg"}));
  EXPECT_EQ(d->added, (Keys{"t/"}));
  EXPECT_EQ(d->renamed, (std::vector<ViewRename>{{"s/b.jpg", "t/bee.jpg"}}));
  EXPECT_TRUE(d->replaced.empty());
}

TEST(WriteFileAtomicallyTest, CreatesThenReplacesLeavingNoTemporary) {
  ::shardfs::testing::TempDir dir;
  std::string out = dir / "keys.jsonl";
  ASSERT_TRUE(WriteFileAtomically(out, "first\n").ok());
  EXPECT_EQ(::shardfs::testing::ReadFile(out), "first\n");
  ASSERT_TRUE(WriteFileAtomically(out, "second\n").ok());
  EXPECT_EQ(::shardfs::testing::ReadFile(out), "second\n");
  EXPECT_EQ(::shardfs::testing::WalkTree(dir.path()), (Keys{"keys.jsonl"}));
  mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(::shardfs::testing::Lstat(out).st_mode & 0777, 0666 & ~mask);
}

TEST(WriteFileAtomicallyTest, MissingDirectoryIsAnErrorNamingThePath) {
  ::shardfs::testing::TempDir dir;
  std::string out = dir / "no/such/keys.jsonl";
  Status s = WriteFileAtomically(out, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(out), std::string::npos) << s.message();
  EXPECT_TRUE(::shardfs::testing::WalkTree(dir.path()).empty());
}

}  // namespace
}  // namespace shardfs::builder
