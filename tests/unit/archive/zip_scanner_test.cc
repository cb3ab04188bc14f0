// src/archive/zip_scanner.h: zip bombs refused before any member is handed on or
// inflated (central entries sharing one local header; declared sizes past the
// ratio bound), over zips built in memory; and what is not a bomb (two
// entries of one name with local headers of their own).
#include "src/archive/zip_scanner.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "base/coding.h"
#include "src/codec/encoded_member.h"

namespace shardfs::archive {
namespace {

void PutFixed16(std::string* dst, uint16_t v) {
  dst->push_back(static_cast<char>(v & 0xff));
  dst->push_back(static_cast<char>(v >> 8));
}

std::string RawDeflate(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Entry {
  std::string name;
  std::string content;  // Uncompressed.
  bool deflate = false;
  // The central entry's local header: that of entry `header_of` (-1: its own).
  int header_of = -1;
  uint32_t declared = 0;  // Non-zero: the uncompressed size declared (a lie).
};

// A zip of `entries`, local headers in order, then the central directory.
std::string MakeZip(const std::vector<Entry>& entries) {
  std::string zip, central;
  std::vector<uint32_t> at;
  std::vector<uint32_t> crcs, comps, uncomps;
  for (const Entry& e : entries) {
    const std::string data = e.deflate ? RawDeflate(e.content) : e.content;
    const uint32_t crc = codec::Crc32(0, e.content.data(), e.content.size());
    const uint32_t uncomp = e.declared ? e.declared : static_cast<uint32_t>(e.content.size());
    const uint32_t comp = static_cast<uint32_t>(data.size());
    at.push_back(static_cast<uint32_t>(zip.size()));
    crcs.push_back(crc);
    comps.push_back(comp);
    uncomps.push_back(uncomp);
    if (e.header_of >= 0) continue;
    PutFixed32(&zip, 0x04034b50);
    for (uint16_t v : {20, 0, e.deflate ? 8 : 0, 0, 0x21}) PutFixed16(&zip, v);
    for (uint32_t v : {crc, comp, uncomp}) PutFixed32(&zip, v);
    PutFixed16(&zip, static_cast<uint16_t>(e.name.size()));
    PutFixed16(&zip, 0);
    zip += e.name;
    zip += data;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const size_t k = e.header_of >= 0 ? static_cast<size_t>(e.header_of) : i;
    PutFixed32(&central, 0x02014b50);
    for (uint16_t v : {0x031e, 20, 0, entries[k].deflate ? 8 : 0, 0, 0x21}) {
      PutFixed16(&central, v);
    }
    for (uint32_t v : {crcs[k], comps[k], uncomps[k]}) PutFixed32(&central, v);
    for (uint16_t v : {static_cast<uint16_t>(e.name.size()), uint16_t{0}, uint16_t{0}, uint16_t{0},
                       uint16_t{0}}) {
      PutFixed16(&central, v);
    }
    PutFixed32(&central, uint32_t{0100644} << 16);
    PutFixed32(&central, at[k]);
    central += e.name;
  }
  const uint32_t cd_at = static_cast<uint32_t>(zip.size());
  zip += central;
  PutFixed32(&zip, 0x06054b50);
  for (uint16_t v : {0, 0}) PutFixed16(&zip, v);
  for (size_t i = 0; i < 2; ++i) PutFixed16(&zip, static_cast<uint16_t>(entries.size()));
  PutFixed32(&zip, static_cast<uint32_t>(central.size()));
  PutFixed32(&zip, cd_at);
  PutFixed16(&zip, 0);
  return zip;
}

struct ZipScanned {
  Status status;
  std::vector<archive::ScannedMember> members;
};

ZipScanned ScanZip(const std::string& zip, bool checksum = true,
                   uint64_t max_ratio = archive::kDefaultMaxZipRatio) {
  archive::ScanOptions so;
  so.checksum = checksum;
  so.max_zip_ratio = max_ratio;
  archive::ShardInfo info;
  ZipScanned s;
  s.status = archive::ScanZipBytes(
      "bomb.zip", zip.data(), zip.size(), so,
      [&](archive::ScannedMember&& m) {
        s.members.push_back(std::move(m));
        return Status::Ok();
      },
      &info);
  return s;
}

bool Has(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

TEST(ZipBombTest, CentralEntriesSharingOneLocalHeaderAreRefusedBeforeAnyInflate) {
  // One deflated member of 64 MiB of zeros (~64 KiB deflated) named 200
  // times: 12.5 GiB to inflate with checksums on, were each entry inflated.
  std::vector<Entry> entries;
  entries.push_back({"a.txt", "first", false});
  entries.push_back({"zeros", std::string(size_t{64} << 20, '\0'), true});
  for (int i = 0; i < 200; ++i) entries.push_back({"zeros", "", true, 1});
  const std::string zip = MakeZip(entries);
  ASSERT_LT(zip.size(), 256u << 10);
  const ZipScanned s = ScanZip(zip);
  EXPECT_EQ(s.status.code(), Status::Code::kInvalidArgument) << s.status.message();
  EXPECT_TRUE(Has(s.status, "zip bomb.zip: members 'zeros' (local header at byte "))
      << s.status.message();
  EXPECT_TRUE(Has(s.status, "and 'zeros' (local header at byte ")) << s.status.message();
  EXPECT_TRUE(Has(s.status, "overlap: refused as a zip bomb")) << s.status.message();
  // Nothing was handed on: the first member neither.
  EXPECT_TRUE(s.members.empty());
}

TEST(ZipBombTest, AnEntryWhoseLocalHeaderLiesInsideAnotherMembersDataIsRefused) {
  // Stored members: the second central entry points into the first's data,
  // where a local header of its own was planted.
  std::string inner;
  PutFixed32(&inner, 0x04034b50);
  for (uint16_t v : {20, 0, 0, 0, 0x21}) PutFixed16(&inner, v);
  for (uint32_t v : {codec::Crc32(0, "x", 1), 1u, 1u}) PutFixed32(&inner, v);
  PutFixed16(&inner, 1);
  PutFixed16(&inner, 0);
  inner += "bx";
  std::string zip = MakeZip({{"a", "0123" + inner + "5678", false}, {"b", "x", false}});
  // Point b's central entry (the last one) at the planted header: byte 30 +
  // name 1 + 4 into a's data.
  const size_t central_b = zip.rfind(std::string("PK\x01\x02", 4));
  const uint32_t planted = 30 + 1 + 4;
  for (int i = 0; i < 4; ++i) zip[central_b + 42 + i] = static_cast<char>(planted >> (8 * i));
  // The planted header's own name must match: "b".
  const ZipScanned s = ScanZip(zip);
  EXPECT_TRUE(Has(s.status, "members 'a' (local header at byte 0, data to byte "))
      << s.status.message();
  EXPECT_TRUE(Has(s.status, "and 'b' (local header at byte 35) overlap")) << s.status.message();
  EXPECT_TRUE(s.members.empty());
}

TEST(ZipBombTest, TwoEntriesOfOneNameWithTheirOwnHeadersAreNoBomb) {
  const ZipScanned s = ScanZip(MakeZip({{"same", "first", true}, {"same", "second!", true}}));
  ASSERT_TRUE(s.status.ok()) << s.status.message();
  ASSERT_EQ(s.members.size(), 2u);
  EXPECT_EQ(s.members[1].size, 7u);
}

TEST(ZipBombTest, DeclaredSizesPastTheRatioAreRefusedNamingTheOption) {
  // 900 MiB declared over three distinct members of a few hundred bytes (the
  // sizes are a lie; without checksums nothing is inflated to see it).
  std::vector<Entry> entries;
  for (const char* n : {"a", "b", "c"}) entries.push_back({n, "tiny", true, -1, 300u << 20});
  const std::string zip = MakeZip(entries);
  for (bool checksum : {true, false}) {
    const ZipScanned s = ScanZip(zip, checksum);
    EXPECT_EQ(s.status.code(), Status::Code::kInvalidArgument) << s.status.message();
    EXPECT_TRUE(Has(s.status, fmt::format("zip bomb.zip: its members declare {} uncompressed "
                                          "bytes, more than 100 times the zip's {} bytes",
                                          uint64_t{900} << 20, zip.size())))
        << s.status.message();
    EXPECT_TRUE(Has(s.status, "--max-zip-ratio")) << s.status.message();
    EXPECT_TRUE(s.members.empty());
  }
  // Raised past the zip's ratio: accepted (without checksums; with them the
  // lie would show when inflated).
  const ZipScanned raised =
      ScanZip(zip, /*checksum=*/false, (uint64_t{900} << 20) / zip.size() + 1);
  EXPECT_TRUE(raised.status.ok()) << raised.status.message();
  EXPECT_EQ(raised.members.size(), 3u);
}

TEST(ZipBombTest, DeclaredSizesUpToTheFloorPassWhateverTheRatio) {
  // 256 MiB declared by a zip of a few hundred bytes: under the floor.
  const std::string zip =
      MakeZip({{"a", "tiny", true, -1, 128u << 20}, {"b", "tiny", true, -1, 128u << 20}});
  const ZipScanned s = ScanZip(zip, /*checksum=*/false);
  EXPECT_TRUE(s.status.ok()) << s.status.message();
  EXPECT_EQ(s.members.size(), 2u);
}

}  // namespace
}  // namespace shardfs::archive
