// base/strings.h: path joining and the UTF-8 check.
#include "base/strings.h"

#include <gtest/gtest.h>

namespace shardfs {
namespace {

TEST(StringsTest, JoinPathLeavesTheRootOut) {
  EXPECT_EQ(JoinPath("", "a"), "a");
  EXPECT_EQ(JoinPath("a/b", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("a", ""), "a/");
}

TEST(StringsTest, Utf8IsWellFormedOnly) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain"));
  EXPECT_TRUE(IsUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));          // Overlong '/'.
  EXPECT_FALSE(IsUtf8("\xe0\x80\xaf"));      // Overlong, three bytes.
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));      // A surrogate.
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // Past U+10FFFF.
  EXPECT_FALSE(IsUtf8("\xc3"));              // Cut short.
  EXPECT_FALSE(
      IsUtf8("a\x80"
             "b"));  // A lone continuation byte.
  EXPECT_EQ(Utf8SequenceLength("\xe2\x82\xac", 0), 3u);
  EXPECT_EQ(Utf8SequenceLength("x\xe2\x82", 1), 0u);
}

}  // namespace
}  // namespace shardfs
