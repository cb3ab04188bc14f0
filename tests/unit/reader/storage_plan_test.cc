// The volume's choice of a node-local cache root (src/reader/storage_plan.h).
#include "src/reader/storage_plan.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using shardfs::testing::TempDir;

TEST(StoragePlanTest, TheFirstUsableRootIsMadeWithMode0700) {
  TempDir dir;
  // Not writable by this user: a file where a directory should be.
  std::ofstream(dir / "file") << "x";
  Result<std::string> root = reader::PickCacheRoot(
      std::vector<std::string>{dir / "file/sub/shardfs", dir / "home/.cache/shardfs"});
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, dir / "home/.cache/shardfs");
  struct stat st {};
  ASSERT_EQ(::stat(root->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((dir / "home").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  Result<std::string> none = reader::PickCacheRoot(std::vector<std::string>{dir / "file/sub"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(dir / "file/sub"), std::string::npos);
  EXPECT_GT(reader::AutoCacheSize(dir.path(), uint64_t{1} << 62), 0u);
  EXPECT_LE(reader::AutoCacheSize(dir.path(), reader::kMinAutoCache), reader::kMinAutoCache);
}

}  // namespace
}  // namespace shardfs
