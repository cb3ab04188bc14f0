// index/db_options.h's default block cache: sized to the index's tables
// (blocks cached uncompressed), between its floor and the cap it is given.
#include "index/db_options.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/test_util.h"

namespace shardfs::index {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(AutoBlockCacheTest, ThreeTimesTheTablesBetweenTheFloorAndTheCap) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/000008.sst", std::string(10 * kMiB, 'x'));
  testing::WriteFile(dir.path() + "/000009.sst", std::string(2 * kMiB, 'x'));
  testing::WriteFile(dir.path() + "/000004.log", std::string(5 * kMiB, 'x'));  // Not a table.
  EXPECT_EQ(AutoBlockCacheBytes(dir.path(), 1024 * kMiB), 36 * kMiB);
  EXPECT_EQ(AutoBlockCacheBytes(dir.path(), 20 * kMiB), 20 * kMiB);
  // The floor, for a small index, and over a smaller cap.
  testing::TempDir small;
  testing::WriteFile(small.path() + "/000008.sst", std::string(kMiB, 'x'));
  EXPECT_EQ(AutoBlockCacheBytes(small.path(), 1024 * kMiB), kMinAutoBlockCache);
  EXPECT_EQ(AutoBlockCacheBytes(dir.path(), kMiB), kMinAutoBlockCache);
  EXPECT_EQ(AutoBlockCacheBytes(dir.path() + "/missing", 1024 * kMiB), kMinAutoBlockCache);
  EXPECT_GE(AutoBlockCacheCap(), kMinAutoBlockCache);
}

}  // namespace
}  // namespace shardfs::index
