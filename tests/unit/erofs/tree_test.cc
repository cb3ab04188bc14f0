// src/erofs/tree.h over a damaged index: the kernel mount's one walk of the
// tree stops with Corruption naming the directory that lists its ancestor,
// where it would list a, a/up, a/up/a, ... without end.
#include "src/erofs/tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::erofs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(IndexReaderCorruptTest, ADirectoryListingItsAncestorStopsTheErofsWalk) {
  shardfs::testing::TempDir dir;
  const std::string idx = dir / "idx";
  shardfs::testing::WriteIndexWithALoop(dir.path(), idx);
  Result<std::unique_ptr<index::IndexReader>> r = index::IndexReader::Open(idx);
  ASSERT_TRUE(r.ok()) << r.status().message();
  Result<ErofsTree> tree = ErofsTreeFromIndex(**r, [](index::ShardId) -> Result<int> {
    return Status::Corruption("no shard is read here");
  });
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().code(), Status::Code::kCorruption) << tree.status().message();
  EXPECT_THAT(tree.status().message(),
              AllOf(HasSubstr(idx), HasSubstr("directory '/a' lists 'up', directory inode 1, "
                                              "which is already in the tree (a loop)")));
}

}  // namespace
}  // namespace shardfs::erofs
