// base/json_writer.h: JSON escaping, invalid UTF-8 as \udcXX (Python's
// surrogateescape), and objects built field by field, nested through Raw.
// The output is checked against Python's json module where it matters: a
// reference that is not this code.
#include "base/json_writer.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using shardfs::testing::TempDir;

std::string Json(std::string_view bytes) {
  std::string out;
  AppendJsonString(&out, bytes);
  return out;
}

TEST(JsonStringTest, PlainTextIsQuoted) {
  EXPECT_EQ(Json(""), R"("")");
  EXPECT_EQ(Json("train/n01440764/img_0001.JPEG"), R"("train/n01440764/img_0001.JPEG")");
}

TEST(JsonStringTest, QuotesBackslashesAndControlCharactersAreEscaped) {
  EXPECT_EQ(Json("a\"b"), R"("a\"b")");
  EXPECT_EQ(Json("a\\b"), R"("a\\b")");
  EXPECT_EQ(Json("a\nb\tc\rd"), R"("a\nb\tc\rd")");
  EXPECT_EQ(Json(std::string_view("\0\x01\x1f\x7f", 4)), R"("\u0000\u0001\u001f\u007f")");
  // '/' needs no escape and gets none.
  EXPECT_EQ(Json("a/b"), R"("a/b")");
}

TEST(JsonStringTest, ValidUtf8IsWrittenAsIs) {
  EXPECT_EQ(Json("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(Json("\xe2\x82\xac"), "\"\xe2\x82\xac\"");          // U+20AC
  EXPECT_EQ(Json("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");  // U+1F600
}

TEST(JsonStringTest, EachByteOfInvalidUtf8BecomesALoneSurrogate) {
  EXPECT_EQ(Json("\xff"), R"("\udcff")");
  // A truncated sequence: each byte on its own, then the valid rest.
  EXPECT_EQ(Json("a\xc3"), R"("a\udcc3")");
  EXPECT_EQ(Json("\xe2\x82z"), R"("\udce2\udc82z")");
  // Overlong encodings and encoded surrogates are not UTF-8 either.
  EXPECT_EQ(Json("\xc0\xaf"), R"("\udcc0\udcaf")");
  EXPECT_EQ(Json("\xed\xa0\x80"), R"("\udced\udca0\udc80")");
}

TEST(JsonObjectTest, FieldsInOrderOfEveryKind) {
  std::string s = JsonObject()
                      .Str("path", "a\"b")
                      .Num("delta", -3)
                      .UNum("size", 18446744073709551615ull)
                      .Bool("dir", false)
                      .Bool("link", true)
                      .Null("target")
                      .Finish();
  EXPECT_EQ(s, R"({"path":"a\"b","delta":-3,"size":18446744073709551615,"dir":false,)"
               R"("link":true,"target":null})");
  EXPECT_EQ(JsonObject().Finish(), "{}");
}

TEST(JsonObjectTest, KeysAreEscapedAndObjectsNestThroughRaw) {
  std::string inner = JsonObject().Str("k\n", "v").Finish();
  std::string s = JsonObject().Raw("inner", inner).Raw("list", "[1,2]").Finish();
  EXPECT_EQ(s, R"({"inner":{"k\n":"v"},"list":[1,2]})");
  // Finish does not end the object being built.
  JsonObject o;
  o.Num("a", 1);
  EXPECT_EQ(o.Finish(), R"({"a":1})");
  o.Num("b", 2);
  EXPECT_EQ(o.Finish(), R"({"a":1,"b":2})");
}

// Python parses what we write and os.fsencode gives back the exact bytes,
// for every byte value and a mix of valid and invalid sequences.
TEST(JsonObjectTest, PythonGivesBackTheExactBytes) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  all += "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\xa0\x80 \xc0\xaf end";
  std::string nested = JsonObject().Str("path", all).Finish();
  std::string line = JsonObject().Raw("entry", nested).Str("key\xff", "x").Finish();
  TempDir dir;
  std::string in = dir.path() + "/in.json";
  shardfs::testing::WriteFile(in, line);
  auto r = shardfs::testing::Run({shardfs::testing::Python3(), "-c",
                                  "import json, os, sys\n"
                                  "d = json.load(open(sys.argv[1]))\n"
                                  "sys.stdout.buffer.write(os.fsencode(d['entry']['path']))\n"
                                  "sys.stdout.buffer.write(b'|' + os.fsencode(list(d)[1]))\n",
                                  in});
  ASSERT_TRUE(r.ok()) << r.describe;
  EXPECT_EQ(r.out, all + "|key\xff");
}

}  // namespace
}  // namespace shardfs
