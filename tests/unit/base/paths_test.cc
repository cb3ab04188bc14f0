// base/paths.h: path containment, symlink resolution, empty directories and
// directory replacement.
#include "base/paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using ::testing::HasSubstr;

TEST(PathsTest, PathWithinComparesWholeComponents) {
  EXPECT_TRUE(PathWithin("/a/b", "/a/b"));
  EXPECT_TRUE(PathWithin("/a/b/c", "/a/b"));
  EXPECT_TRUE(PathWithin("/a/b/c", "/a/b/"));
  EXPECT_TRUE(PathWithin("/a", "/"));
  EXPECT_TRUE(PathWithin("/", "/"));
  EXPECT_FALSE(PathWithin("/a/bc", "/a/b"));
  EXPECT_FALSE(PathWithin("/a/b", "/a/bc"));
  EXPECT_FALSE(PathWithin("/a", "/a/b"));
  EXPECT_FALSE(PathWithin("/", "/a"));
  EXPECT_FALSE(PathWithin("/x/a/b", "/a/b"));
}

TEST(PathsTest, ResolvePathFollowsSymlinksOfWhatExists) {
  testing::TempDir dir;
  const std::string real = std::filesystem::canonical(dir.path());
  std::filesystem::create_directories(dir / "shards/sub");
  std::filesystem::create_directory_symlink(real + "/shards", dir / "link");
  EXPECT_EQ(*ResolvePath(dir / "link/sub"), real + "/shards/sub");
  EXPECT_EQ(*ResolvePath(dir / "link/sub/"), real + "/shards/sub");
  EXPECT_EQ(*ResolvePath(dir / "link/./new/../x"), real + "/shards/x");  // Missing tail.
  EXPECT_EQ(*ResolvePath("/"), "/");
  // The point of resolving: a shard named through a symlink is inside.
  EXPECT_TRUE(PathWithin(*ResolvePath(dir / "link/a.tar"), *ResolvePath(dir / "shards")));
  EXPECT_FALSE(PathWithin(*ResolvePath(dir / "shards"), *ResolvePath(dir / "link/sub")));
  const std::string rel = *ResolvePath("relative-name");
  EXPECT_EQ(rel.front(), '/');
}

TEST(PathsTest, IsEmptyDirectory) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "empty");
  std::filesystem::create_directory(dir / "full");
  testing::WriteFile(dir / "full/f", "x");
  std::filesystem::create_directory_symlink(dir / "empty", dir / "link");
  EXPECT_TRUE(IsEmptyDirectory(dir / "empty"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "full"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "full/f"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "link"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "missing"));
}

// Both ways of replacing: the target holds the new directory after, the old
// one is where the result says, nothing else moved.
TEST(PathsTest, ReplaceDirectoryExchangesOrRenames) {
  for (auto replace : {&ReplaceDirectory, &ReplaceDirectoryByRenames}) {
    testing::TempDir dir;
    std::filesystem::create_directory(dir / "new");
    testing::WriteFile(dir / "new/f", "new");
    // Nothing at the target: a rename.
    Result<Replaced> r = replace(dir / "new", dir / "out");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->old_path, "");
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "new");
    EXPECT_FALSE(std::filesystem::exists(dir / "new"));
    // Over an existing directory: the old one is handed back.
    std::filesystem::create_directory(dir / "newer");
    testing::WriteFile(dir / "newer/f", "newer");
    r = replace(dir / "newer", dir / "out");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "newer");
    ASSERT_NE(r->old_path, "");
    EXPECT_EQ(testing::ReadFile(r->old_path + "/f"), "new");
    EXPECT_EQ(r->atomic, replace == &ReplaceDirectory);  // tmpfs and ext4 exchange.
    // A missing source fails, naming it, and moves nothing.
    r = replace(dir / "missing", dir / "out");
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(dir / "missing"));
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "newer");
  }
}

}  // namespace
}  // namespace shardfs
