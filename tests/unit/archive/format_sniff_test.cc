// Format sniffing: a compressed tar told by its codec's magic, and a valid
// tar header first taken for a tar whatever its name says.
#include "src/archive/format_sniff.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "index/schema.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using shardfs::testing::OneMemberTar;

TEST(FormatSniffTest, DetectsByMagic) {
  EXPECT_EQ(DetectCodec("\x1f\x8b\x08"), index::Codec::kGzip);
  EXPECT_EQ(DetectCodec(std::string_view("\x28\xb5\x2f\xfd\x00", 5)), index::Codec::kZstd);
  EXPECT_EQ(DetectCodec(std::string_view("\xfd"
                                         "7zXZ\0",
                                         6)),
            index::Codec::kXz);
  EXPECT_EQ(DetectCodec("BZh9"), index::Codec::kBzip2);
  EXPECT_EQ(DetectCodec("ustar"), index::Codec::kNone);
  EXPECT_EQ(DetectCodec(""), index::Codec::kNone);
}

// GNU tar takes a first block with a valid header checksum for a tar before
// it looks for a compressor's magic: a member named "BZh9..." is a name.
TEST(FormatSniffTest, AValidTarHeaderFirstIsATarWhateverItsName) {
  std::string tar = OneMemberTar("x");
  auto rename = [&](std::string_view name) {
    std::memset(tar.data(), 0, 100);
    std::memcpy(tar.data(), name.data(), name.size());
    std::memset(tar.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
    std::snprintf(tar.data() + 148, 8, "%06o", sum);
  };
  rename("BZh91AY&SY");
  EXPECT_EQ(DetectCodec(tar), index::Codec::kNone);
  rename(std::string_view("\x1f\x8b\x08name", 7));
  EXPECT_EQ(DetectCodec(tar), index::Codec::kNone);
  // Not a valid header: the magic decides.
  tar[150] = tar[150] == '1' ? '2' : '1';
  EXPECT_EQ(DetectCodec(tar), index::Codec::kGzip);
  EXPECT_EQ(DetectCodec(std::string_view(tar).substr(0, 511)), index::Codec::kGzip);
}

TEST(FormatSniffTest, ValidTarChecksumTakesTheSignedSumAndRefusesShortBlocks) {
  std::string tar = OneMemberTar("x");
  EXPECT_TRUE(ValidTarChecksum(tar));
  EXPECT_FALSE(ValidTarChecksum(std::string_view(tar).substr(0, 511)));
  // A byte above 0x7f makes the signed and the unsigned sums differ; GNU tar
  // takes either.
  tar[100] = static_cast<char>(0xe9);
  std::memset(tar.data() + 148, ' ', 8);
  int sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<signed char>(tar[i]);
  std::snprintf(tar.data() + 148, 8, "%06o", sum);
  EXPECT_TRUE(ValidTarChecksum(tar));
  tar[148] = '9';  // Not octal.
  EXPECT_FALSE(ValidTarChecksum(tar));
}

}  // namespace
}  // namespace shardfs::archive
