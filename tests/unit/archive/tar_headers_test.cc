// src/archive/tar_headers.h, and the scanner's use of it: extension headers read
// with GNU tar's precedence, exact pax times, and GNU sparse 1.0 members
// positioned by their declared size, as GNU tar reads them, whatever their
// map accounts for. Archives are built byte for byte here.
#include "src/archive/tar_headers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/status.h"
#include "src/archive/tar_scanner.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using ::testing::HasSubstr;

// One 512-byte header with a valid checksum.
std::string Header(std::string_view name, char type, uint64_t size) {
  return shardfs::testing::UstarHeader(name, type, size, 1000000000);
}

std::string Pad(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

// One pax record, "LEN key=value\n" with LEN counting itself.
std::string Record(std::string_view key, std::string_view value) {
  size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + std::to_string(body).size();
  if (std::to_string(len).size() != std::to_string(body).size()) ++len;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

std::string Member(std::string_view name, char type, std::string_view data) {
  return Header(name, type, data.size()) + Pad(std::string(data));
}

// A GNU sparse 1.0 member "a": map (0, 4096), (1 GiB, 3); its declared data
// size counts `extra` bytes more than the map accounts for.
std::string Sparse10(uint64_t extra, std::string_view map_text = "2\n0\n4096\n1073741824\n3\n") {
  std::string data = Pad(std::string(map_text));
  data += std::string(4096, 'x') + "yyy";
  data.resize(data.size() + extra, '\0');
  std::string recs = Record("size", std::to_string(data.size())) + Record("GNU.sparse.major", "1") +
                     Record("GNU.sparse.minor", "0") + Record("GNU.sparse.name", "a") +
                     Record("GNU.sparse.realsize", "1073741827");
  return Member("PaxHeader/a", 'x', recs) + Header("GNUSparseFile/a", '0', data.size()) + Pad(data);
}

std::string End() { return std::string(1024, '\0'); }

std::vector<ScannedMember> ScanBytes(const std::string& tar, Status* status) {
  std::vector<ScannedMember> out;
  ShardInfo info;
  *status = ScanTarBytes(
      "t.tar", tar.data(), tar.size(), ScanOptions{},
      [&](ScannedMember&& m) {
        out.push_back(std::move(m));
        return Status::Ok();
      },
      &info);
  return out;
}

TEST(TarHeadersTest, PaxTimesAreExact) {
  int64_t ns = 0;
  ASSERT_TRUE(ParsePaxTimeNs("-1.25", &ns));
  EXPECT_EQ(ns, -1250000000);
  ASSERT_TRUE(ParsePaxTimeNs("1405126626.584667983", &ns));
  EXPECT_EQ(ns, 1405126626584667983);
  ASSERT_TRUE(ParsePaxTimeNs("7", &ns));
  EXPECT_EQ(ns, 7000000000);
  EXPECT_FALSE(ParsePaxTimeNs("", &ns));
  EXPECT_FALSE(ParsePaxTimeNs("1.5x", &ns));
  EXPECT_FALSE(ParsePaxTimeNs("99999999999999999999", &ns));
}

TEST(TarHeadersTest, PaxPathAndGnuNameAreBothSeenInEitherOrder) {
  const std::string pax =
      Member("PaxHeader/x", 'x', Record("path", "pax-name") + Record("mtime", "-1.5"));
  const std::string gnu = Member("././@LongLink", 'L', std::string("gnu-name") + '\0');
  for (const std::string& ext : {pax + gnu, gnu + pax}) {
    std::string tar = ext + Member("short", '0', "hi") + End();
    Extensions e;
    ASSERT_TRUE(ReadExtensions(tar.data(), tar.size(), 0, &e));
    EXPECT_TRUE(e.gnu_name);
    ASSERT_TRUE(e.path.has_value());
    EXPECT_EQ(*e.path, "pax-name");
    EXPECT_EQ(e.own_header, ext.size());
    Status s;
    std::vector<ScannedMember> m = ScanBytes(tar, &s);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].path, "pax-name");
    EXPECT_EQ(m[0].mtime_ns, -1500000000);
  }
}

TEST(TarHeadersTest, ExtensionsThatRunPastTheShardAreNotWalked) {
  std::string tar = Header("PaxHeader/x", 'x', 1 << 20) + End();
  Extensions e;
  EXPECT_FALSE(ReadExtensions(tar.data(), tar.size(), 0, &e));
}

TEST(TarHeadersTest, Sparse10MapIsReadAsGnuTarReadsIt) {
  const std::string tar = Sparse10(1) + End();
  Extensions e;
  ASSERT_TRUE(ReadExtensions(tar.data(), tar.size(), 0, &e));
  ASSERT_EQ(e.sparse_major, "1");
  EXPECT_EQ(e.own_header, 1024u);
  std::optional<Sparse10Map> map = ReadSparse10Map(tar.data(), tar.size(), e);
  ASSERT_TRUE(map.has_value());
  EXPECT_EQ(map->entries, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 4096}, {1073741824, 3}}));
  EXPECT_EQ(map->data_start, 1536u + 512u);
  EXPECT_EQ(map->logical_end, 1073741827u);
  EXPECT_EQ(map->member_end, 1536u + 512u + 4608u);  // 512 + 4096 + 3 + 1, rounded up.
}

TEST(TarHeadersTest, MalformedSparse10MapsAreRefusedAsGnuTarRefusesThem) {
  for (std::string_view text : {"2\n0\n4096\n", "1\n0\n#4096\n", "1\n\n4096\n", "x\n"}) {
    const std::string tar = Sparse10(0, text) + End();
    Extensions e;
    ASSERT_TRUE(ReadExtensions(tar.data(), tar.size(), 0, &e));
    EXPECT_FALSE(ReadSparse10Map(tar.data(), tar.size(), e).has_value()) << text;
  }
}

// The corpus's test_read_format_gtar_sparse_skip_entry.tar in small: the
// declared size has one byte more than the map accounts for. libarchive
// would stop mid-block; GNU tar goes on at the declared end, and so do we.
TEST(TarHeadersTest, ScannerGoesOnAfterASparse10MemberWhereItsDeclaredSizeEnds) {
  for (uint64_t extra : {0, 1, 509, 512, 1000}) {
    const std::string first = Sparse10(extra);
    const std::string tar = first + Member("b", '0', "foo\n") + End();
    Status s;
    std::vector<ScannedMember> m = ScanBytes(tar, &s);
    ASSERT_TRUE(s.ok()) << "extra " << extra << ": " << s.message();
    ASSERT_EQ(m.size(), 2u) << "extra " << extra;
    EXPECT_TRUE(m[0].sparse);
    EXPECT_EQ(m[0].size, 1073741827u);
    ASSERT_EQ(m[0].extents.size(), 2u);
    EXPECT_EQ(m[0].extents[0].physical, 2048u);
    EXPECT_EQ(m[0].extents[0].length, 4096u);
    EXPECT_EQ(m[0].extents[1].logical, 1073741824u);
    EXPECT_EQ(m[0].extents[1].physical, 2048u + 4096u);
    EXPECT_EQ(m[1].path, "b");
    EXPECT_EQ(m[1].header_offset, first.size());
    EXPECT_EQ(m[1].data_offset, first.size() + 512);
    EXPECT_EQ(m[1].size, 4u);
  }
}

TEST(TarHeadersTest, ASparse10MemberWhoseMapOverrunsItsDataIsRefused) {
  // Declared size: the map block and 100 bytes, but the map claims 4099.
  std::string data = Pad("2\n0\n4096\n1073741824\n3\n") + std::string(100, 'x');
  std::string recs = Record("size", std::to_string(data.size())) + Record("GNU.sparse.major", "1") +
                     Record("GNU.sparse.minor", "0") + Record("GNU.sparse.name", "a") +
                     Record("GNU.sparse.realsize", "1073741827");
  std::string tar = Member("PaxHeader/a", 'x', recs) + Header("GNUSparseFile/a", '0', data.size()) +
                    Pad(data) + Member("b", '0', "foo\n") + End();
  Status s;
  ScanBytes(tar, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("member 'a' at byte 0"));
}

}  // namespace
}  // namespace shardfs::archive
