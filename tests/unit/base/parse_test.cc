// base/parse.h: the size and count grammar every command and mount option
// shares, and the decimal parser behind them.
#include "base/parse.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace shardfs {
namespace {

TEST(ParseSizeTest, DigitsAndBinarySuffixes) {
  const std::pair<const char*, uint64_t> ok[] = {{"0", 0},
                                                 {"4096", 4096},
                                                 {"7B", 7},
                                                 {"4K", 4 << 10},
                                                 {"4k", 4 << 10},
                                                 {"4KiB", 4 << 10},
                                                 {"64M", 64 << 20},
                                                 {"64MiB", 64 << 20},
                                                 {"2G", 2ull << 30},
                                                 {"1GiB", 1 << 30},
                                                 {"3T", 3ull << 40},
                                                 {"3TiB", 3ull << 40},
                                                 {"16777215T", 16777215ull << 40}};
  for (const auto& [text, want] : ok) {
    uint64_t got = 1;
    EXPECT_TRUE(ParseSize(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
}

TEST(ParseSizeTest, EverythingElseIsRefusedAndLeavesTheOutputAlone) {
  for (const char* text : {"", "M", "-1", "+4", " 4", "4 ", "4x", "4MB", "4m", "1.5G", "0x10",
                           "16777216T", "18446744073709551616", "99999999999999999999K"}) {
    uint64_t got = 42;
    EXPECT_FALSE(ParseSize(text, &got)) << text;
    EXPECT_EQ(got, 42u) << text;
  }
}

TEST(ParseDecimalTest, EveryUint64AndNothingElse) {
  EXPECT_EQ(ParseDecimal("0"), 0u);
  EXPECT_EQ(ParseDecimal("007"), 7u);
  EXPECT_EQ(ParseDecimal("9999999999999999999"), 9999999999999999999u);
  // 20 digits: uint64 has them (the copies this replaced stopped at 19).
  EXPECT_EQ(ParseDecimal("10000000000000000000"), 10000000000000000000u);
  EXPECT_EQ(ParseDecimal("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseDecimal("000000000000000000000000018446744073709551615"), UINT64_MAX);
  for (const char* text : {"", "18446744073709551616", "99999999999999999999", "-1", "+1", " 1",
                           "1 ", "1x", "0x10", "1.0", "1e3", "\xd9\xa1"}) {
    EXPECT_EQ(ParseDecimal(text), std::nullopt) << text;
  }
}

TEST(ParseCountTest, WholeNumbersInRangeOnly) {
  uint64_t n = 0;
  EXPECT_TRUE(ParseCount("0", 0, 10, &n));
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(ParseCount("10", 0, 10, &n));
  EXPECT_EQ(n, 10u);
  EXPECT_TRUE(ParseCount("4294967294", 0, UINT32_MAX - 1, &n));
  EXPECT_TRUE(ParseCount("18446744073709551615", 0, UINT64_MAX, &n));
  EXPECT_EQ(n, UINT64_MAX);
  for (const char* text : {"11", "", "4x", "+4", "-0", " 1", "1.0", "1e3"}) {
    EXPECT_FALSE(ParseCount(text, 0, 10, &n)) << text;
  }
  EXPECT_FALSE(ParseCount("0", 1, 10, &n));
}

TEST(ParseJobsTest, OneTo4096) {
  int jobs = 0;
  EXPECT_TRUE(ParseJobs("1", &jobs));
  EXPECT_EQ(jobs, 1);
  EXPECT_TRUE(ParseJobs("4096", &jobs));
  EXPECT_EQ(jobs, 4096);
  for (const char* text : {"0", "4097", "4x", "-2", "", "2.5"}) {
    EXPECT_FALSE(ParseJobs(text, &jobs)) << text;
  }
}

}  // namespace
}  // namespace shardfs
