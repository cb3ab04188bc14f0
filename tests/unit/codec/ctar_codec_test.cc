// Compressed tar shards: the seek table's encoding, and what a bzip2 block's
// interval decodes (the decoding of every interval that ScanCompressedTarFd
// indexes: tests/unit/archive/ctar_scanner_test.cc).
#include "src/codec/ctar_codec.h"

#include <string>

#include "gtest/gtest.h"
#include "index/schema.h"

namespace shardfs::codec {
namespace {

using index::SeekKind;
using index::SeekPoint;
using index::SeekTable;

TEST(SeekTableTest, RoundTripAndFind) {
  SeekTable t;
  t.decoded_size = 1000;
  t.points = {SeekPoint{0, 0, 0, SeekKind::kGzipMember, 0, 0},
              SeekPoint{400, 120, 5, SeekKind::kDeflate, 0, 400}};
  std::string v;
  index::EncodeSeekTable(t, &v);
  SeekTable back;
  ASSERT_TRUE(index::DecodeSeekTable(v, &back).ok());
  EXPECT_EQ(back.points, t.points);
  EXPECT_EQ(back.decoded_size, 1000u);
  EXPECT_EQ(back.Find(0), 0u);
  EXPECT_EQ(back.Find(399), 0u);
  EXPECT_EQ(back.Find(400), 1u);
  EXPECT_EQ(back.End(1), 1000u);
  // Out of order, past the end, bad bits, bad kind, short: refused.
  auto refused = [&](auto change) {
    SeekTable bad = t;
    change(&bad);
    std::string b;
    index::EncodeSeekTable(bad, &b);
    SeekTable out;
    return !index::DecodeSeekTable(b, &out).ok();
  };
  EXPECT_TRUE(refused([](SeekTable* b) { b->points[1].decoded = 0; }));
  EXPECT_TRUE(refused([](SeekTable* b) { b->points[1].decoded = 1000; }));
  EXPECT_TRUE(refused([](SeekTable* b) { b->points[1].bits = 8; }));
  EXPECT_TRUE(refused([](SeekTable* b) { b->points[1].kind = static_cast<SeekKind>(9); }));
  EXPECT_TRUE(refused([](SeekTable* b) {
    b->points[1].compressed = 0;
    b->points[0].compressed = 5;
  }));
  EXPECT_TRUE(refused([](SeekTable* b) { b->points[1].window = 40000; }));
  SeekTable out;
  EXPECT_FALSE(index::DecodeSeekTable(v.substr(0, v.size() - 1), &out).ok());
}

TEST(CtarCodecTest, ABzip2BlockIsDecodedWholeOnly) {
  EXPECT_TRUE(CanDecodePrefix(SeekKind::kGzipMember));
  EXPECT_TRUE(CanDecodePrefix(SeekKind::kDeflate));
  EXPECT_TRUE(CanDecodePrefix(SeekKind::kZstdFrame));
  EXPECT_TRUE(CanDecodePrefix(SeekKind::kXzBlock));
  EXPECT_FALSE(CanDecodePrefix(SeekKind::kBzip2Block));
  SeekTable t;
  t.decoded_size = 1000;
  t.points = {SeekPoint{0, 0, 0, SeekKind::kBzip2Block, 9, 0}};
  Result<std::string> part =
      DecodeIntervalPrefix("t.tar.bz2", t, 0, "", "BZh9", kMaxIntervalBytes, 10);
  ASSERT_FALSE(part.ok());
  EXPECT_NE(part.status().message().find("decoded whole"), std::string::npos);
}

}  // namespace
}  // namespace shardfs::codec
