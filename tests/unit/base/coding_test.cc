// base/coding.h: fixed-width little- and big-endian integers (big-endian sorting
// bytewise in numeric order) and varints, refusing what is cut or too long.
#include "base/coding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace shardfs {
namespace {

TEST(CodingTest, FixedWidthLittleEndianBytes) {
  char b[8];
  EncodeFixed16(b, 0x0102);
  EXPECT_EQ(std::string(b, 2), std::string("\x02\x01", 2));
  EncodeFixed32(b, 0x01020304);
  EXPECT_EQ(std::string(b, 4), std::string("\x04\x03\x02\x01", 4));
  EncodeFixed64(b, 0x0102030405060708);
  EXPECT_EQ(std::string(b, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(DecodeFixed64(b), 0x0102030405060708u);
  EXPECT_EQ(DecodeFixed32(b), 0x05060708u);
  EXPECT_EQ(DecodeFixed16(b), 0x0708u);
  // Signed values through their unsigned type.
  EncodeFixed64(b, static_cast<uint64_t>(int64_t{-2}));
  EXPECT_EQ(std::string(b, 8), std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(static_cast<int64_t>(DecodeFixed64(b)), -2);
  std::string s = "x";
  PutFixed32(&s, 0xdeadbeef);
  PutFixed64(&s, UINT64_MAX);
  ASSERT_EQ(s.size(), 13u);
  EXPECT_EQ(DecodeFixed32(s.data() + 1), 0xdeadbeefu);
  EXPECT_EQ(DecodeFixed64(s.data() + 5), UINT64_MAX);
}

TEST(CodingTest, BigEndianSortsBytewiseInNumericOrder) {
  char b[8];
  EncodeBigEndian32(b, 0x01020304);
  EXPECT_EQ(std::string(b, 4), std::string("\x01\x02\x03\x04", 4));
  EXPECT_EQ(DecodeBigEndian32(b), 0x01020304u);
  EncodeBigEndian64(b, 0x0102030405060708);
  EXPECT_EQ(std::string(b, 8), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(DecodeBigEndian64(b), 0x0102030405060708u);
  char lo[8], hi[8];
  EncodeBigEndian64(lo, 255);
  EncodeBigEndian64(hi, 256);
  EXPECT_LT(std::string(lo, 8), std::string(hi, 8));
}

TEST(CodingTest, VarintsRoundTripAndRefuseWhatIsCutOrTooLong) {
  std::string s;
  PutVarint64(&s, 0);
  PutVarint64(&s, 127);
  PutVarint64(&s, 300);
  PutVarint64(&s, UINT64_MAX);
  EXPECT_EQ(s, std::string("\x00\x7f\xac\x02", 4) + std::string(9, '\xff') + '\x01');
  std::string_view in = s;
  for (uint64_t want : {uint64_t{0}, uint64_t{127}, uint64_t{300}, UINT64_MAX}) {
    uint64_t v = 1;
    ASSERT_TRUE(GetVarint64(&in, &v));
    EXPECT_EQ(v, want);
  }
  EXPECT_TRUE(in.empty());
  uint64_t v = 42;
  in = std::string_view("\xac", 1);  // Cut short.
  EXPECT_FALSE(GetVarint64(&in, &v));
  const std::string too_big = std::string(9, '\xff') + '\x02';  // 2^64.
  in = too_big;
  EXPECT_FALSE(GetVarint64(&in, &v));
  const std::string too_long = std::string(10, '\x80') + '\x00';
  in = too_long;
  EXPECT_FALSE(GetVarint64(&in, &v));
  EXPECT_EQ(v, 42u);
}

}  // namespace
}  // namespace shardfs
