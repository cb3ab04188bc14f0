// index/index_files.h and the names of base/temp_dirs.h: which files of an
// index directory shardfs may remove (RocksDB's, a build's), and that
// removing them leaves everything else, a subdirectory above all, as it was.
#include "index/index_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/temp_dirs.h"
#include "tests/unit/test_util.h"

namespace shardfs::index {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

void Touch(const std::string& path, std::string_view data = "x") { testing::WriteFile(path, data); }

TEST(IndexFilesTest, TheNamesRocksDbAndShardfsWrite) {
  for (const char* name :
       {"CURRENT", "IDENTITY", "LOCK", "LOG", "LOG.old.1700000000123456", "MANIFEST-000005",
        "OPTIONS-000007", "OPTIONS-000007.dbtmp", "000012.sst", "000003.log", "000004.blob",
        "000009.dbtmp", "000001.ldb", "shardfs-edit-123-0-views.sst"}) {
    EXPECT_TRUE(IsOwnFileName(name, DirKind::kIndex)) << name;
    EXPECT_TRUE(IsOwnFileName(name, DirKind::kBuild)) << name;
  }
  // A build's own: tables before their ingest and spill runs.
  for (const char* name :
       {"dirents.sst", "inodes.sst", "views.sst", "seek.sst", "a.sst", "any_part-2.sst",
        "members-0-0", "members-12-345", "members-merge-3", "dirents-7", "inodes-8", "dir-inodes-9",
        "dirents-merge-0", "inodes-merge-11"}) {
    EXPECT_FALSE(IsOwnFileName(name, DirKind::kIndex)) << name;
    EXPECT_TRUE(IsOwnFileName(name, DirKind::kBuild)) << name;
  }
  for (const char* name : {"notes.txt",          "README",   "current",   "CURRENT.bak",
                           "LOG.old.",           "LOG.txt",  "MANIFEST-", "MANIFEST-12a",
                           "OPTIONS-1.txt",      "12.txt",   ".sst",      "A.sst",
                           "000012.sst.orig",    "members-", "members-0", "members-0-",
                           "members-a-1",        "dirents-", "dirents-x", "inodes-merge-",
                           "shardfs-edit-1.txt", "index",    "sub"}) {
    EXPECT_FALSE(IsOwnFileName(name, DirKind::kBuild)) << name;
    EXPECT_FALSE(IsOwnFileName(name, DirKind::kIndex)) << name;
  }
}

TEST(IndexFilesTest, RemovesItsOwnFilesOnlyAndNeverDescends) {
  testing::TempDir tmp;
  const std::string dir = tmp / "idx";
  fs::create_directories(dir + "/sub/deeper");
  for (const char* name : {"CURRENT", "IDENTITY", "LOCK", "MANIFEST-000005", "000012.sst"}) {
    Touch(dir + "/" + name);
  }
  Touch(dir + "/notes.txt", "mine");
  Touch(dir + "/sub/deeper/000013.sst", "named like a table, inside a user's directory");
  Touch(tmp / "elsewhere", "the target");
  fs::create_symlink(tmp / "elsewhere", dir + "/OPTIONS-000001");  // Named like ours, a symlink.
  fs::create_directory(dir + "/000014.sst");                       // Named like ours, a directory.

  Result<std::vector<std::string>> foreign = ForeignEntries(dir, DirKind::kIndex);
  ASSERT_TRUE(foreign.ok()) << foreign.status().message();
  EXPECT_THAT(*foreign, ElementsAre("000014.sst/", "OPTIONS-000001", "notes.txt", "sub/"));

  Result<std::vector<std::string>> left = RemoveOwnFiles(dir, DirKind::kIndex);
  ASSERT_TRUE(left.ok()) << left.status().message();
  EXPECT_THAT(*left, ElementsAre("000014.sst/", "OPTIONS-000001", "notes.txt", "sub/"));
  EXPECT_FALSE(fs::exists(dir + "/CURRENT"));
  EXPECT_FALSE(fs::exists(dir + "/000012.sst"));
  EXPECT_EQ(testing::ReadFile(dir + "/notes.txt"), "mine");
  EXPECT_TRUE(fs::exists(dir + "/sub/deeper/000013.sst"));
  EXPECT_TRUE(fs::is_symlink(dir + "/OPTIONS-000001"));
  EXPECT_EQ(testing::ReadFile(tmp / "elsewhere"), "the target");
  EXPECT_TRUE(fs::is_directory(dir + "/000014.sst"));

  // Nothing else in it: it goes, whole.
  const std::string build = tmp / "idx.tmp-h-1-00000000";
  fs::create_directory(build);
  for (const char* name : {"members-0-0", "dirents.sst", "CURRENT", "000007.sst"}) {
    Touch(build + "/" + name);
  }
  left = RemoveOwnFiles(build, DirKind::kBuild);
  ASSERT_TRUE(left.ok()) << left.status().message();
  EXPECT_THAT(*left, IsEmpty());
  EXPECT_FALSE(fs::exists(build));
  // Gone already: nothing to do.
  left = RemoveOwnFiles(build, DirKind::kBuild);
  ASSERT_TRUE(left.ok());
  EXPECT_THAT(*left, IsEmpty());
}

TEST(IndexFilesTest, ListNamesForMessages) {
  EXPECT_EQ(ListNames({}), "");
  EXPECT_EQ(ListNames({"a"}), "a");
  EXPECT_EQ(ListNames({"a", "b/"}), "a and b/");
  EXPECT_EQ(ListNames({"a", "b", "c"}), "a, b and c");
  EXPECT_EQ(ListNames({"a", "b", "c", "d"}, 2), "a, b and 2 more");
}

TEST(TempDirNamesTest, CarryTheHostAndThePid) {
  const std::string path = TempPathBeside("/data/out/idx");
  const std::string name = fs::path(path).filename().string();
  ASSERT_TRUE(path.starts_with("/data/out/idx.tmp-")) << path;
  std::optional<TempDirMaker> maker = ParseTempDirName(name, "idx");
  ASSERT_TRUE(maker.has_value()) << name;
  EXPECT_EQ(maker->host, TempHostName());
  EXPECT_EQ(maker->pid, ::getpid());
  EXPECT_FALSE(ProcessGone(::getpid()));
  EXPECT_NE(TempPathBeside("/data/out/idx"), path);

  // Host names with dashes parse from the right.
  maker = ParseTempDirName("idx.tmp-node-07.cluster-4242-0badf00d", "idx");
  ASSERT_TRUE(maker.has_value());
  EXPECT_EQ(maker->host, "node-07.cluster");
  EXPECT_EQ(maker->pid, 4242);
  for (const char* other : {"idx.tmp-4242-0badf00d",           // An older name: no host.
                            "idx.tmp-h-4242-0badf00d.old",     // The aside of two renames.
                            "idx.tmp-h-4242-0BADF00D",         // Not what TempPathBeside writes.
                            "idx.tmp-h-4242-0badf00",          //
                            "idx.tmp-h-42x-0badf00d",          //
                            "idx.tmp-h-0-0badf00d",            //
                            "idx.tmp--4242-0badf00d",          // No host.
                            "idy.tmp-h-4242-0badf00d",         // Another output's.
                            "idx2.tmp-h-4242-0badf00d",        //
                            "idx.tmp-h-99999999999-0badf00d",  // No such PID.
                            "idx", "idx.tmp-", "idx.old-h-1-0badf00d"}) {
    EXPECT_FALSE(ParseTempDirName(other, "idx").has_value()) << other;
  }
}

}  // namespace
}  // namespace shardfs::index
