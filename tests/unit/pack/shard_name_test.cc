// tools/pack/shard_name.h: shard name patterns with one integer conversion,
// formatted and matched (a temporary name too), and every other pattern
// refused.
#include "tools/pack/shard_name.h"

#include <gtest/gtest.h>

namespace shardfs::pack {
namespace {

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
