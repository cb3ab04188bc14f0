// tools/pack/verify.h over a damaged index: verify's walk of the index stops
// with Corruption at a directory that lists its ancestor (index/walk_guard.h),
// where its listing would grow without end.
#include "tools/pack/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/unit/index/index_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::pack {
namespace {

using ::testing::HasSubstr;

TEST(VerifyTest, ADirectoryListingItsAncestorStopsTheWalk) {
  shardfs::testing::TempDir dir;
  const std::string idx = dir / "idx";
  shardfs::testing::WriteIndexWithALoop(dir.path(), idx);
  std::filesystem::create_directories(dir / "src");
  VerifyOptions vo;
  vo.index = idx;
  vo.src = dir / "src";
  vo.quiet = true;
  VerifyReport report;
  Status v = Verify(vo, &report);
  EXPECT_EQ(v.code(), Status::Code::kCorruption) << v.message();
  EXPECT_THAT(v.message(), HasSubstr("which is already in the tree (a loop)"));
}

}  // namespace
}  // namespace shardfs::pack
