// Index bundles written (src/archive/index_bundle.h): the same index gives
// the same bytes, which GNU tar extracts to the index.
#include "src/archive/index_bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::archive {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::DirNames;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::ReadFile;
using ::shardfs::testing::TempDir;

class IndexBundleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::BuildAndOpen(dir_.path(), {DirMember("a"), FileMember("a/x", 10)}), nullptr);
    index_ = dir_ / "idx";
  }
  TempDir dir_;
  std::string index_;
};

TEST_F(IndexBundleTest, IsDeterministicAndHoldsTheIndexFiles) {
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "a.tar").ok());
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "b.tar").ok());
  EXPECT_EQ(ReadFile(dir_ / "a.tar"), ReadFile(dir_ / "b.tar"));
  EXPECT_FALSE(WriteIndexBundle(index_, dir_ / "a.tar").ok()) << "an existing file is kept";
  // GNU tar extracts it to the index's files, byte for byte.
  ::mkdir((dir_ / "out").c_str(), 0700);
  auto r = testing::Run({"tar", "-C", dir_ / "out", "-xf", dir_ / "a.tar"});
  ASSERT_TRUE(r.ok()) << r.describe;
  EXPECT_EQ(DirNames(dir_ / "out"), DirNames(index_));
  for (const std::string& n : DirNames(index_)) {
    EXPECT_EQ(ReadFile(dir_ / "out/" + n), ReadFile(index_ + "/" + n)) << n;
  }
  EXPECT_TRUE(index::IsShardfsIndex(dir_ / "out"));
  EXPECT_FALSE(WriteIndexBundle(dir_.path(), dir_ / "c.tar").ok()) << "not an index";
}

}  // namespace
}  // namespace shardfs::archive
