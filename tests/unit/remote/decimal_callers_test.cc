// The parsers that read decimal numbers through base's ParseDecimal take
// every 64-bit value: 20 digits included (issue #25: copies stopped at 19).
#include <gtest/gtest.h>

#include <cstdint>

#include "src/remote/s3_list.h"

namespace shardfs {
namespace {

TEST(DecimalCallersTest, S3ListingSizesUpTo2To64Minus1) {
  auto p = remote::ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551615</Size></Contents>"
      "<Contents><Key>b</Key><Size>10000000000000000000</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].size, UINT64_MAX);
  EXPECT_EQ(p->objects[1].size, 10000000000000000000u);
  auto over = remote::ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "S3 listing: object a has no valid <Size>");
}

}  // namespace
}  // namespace shardfs
