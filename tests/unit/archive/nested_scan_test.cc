// src/archive/nested_scan.h: what counts as a nested tar, and the members a
// NestedScanner hands on (paths under the member's directory, offsets in the
// outer shard), over archives built in memory.
#include "src/archive/nested_scan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/coding.h"
#include "src/archive/tar_writer.h"
#include "src/codec/encoded_member.h"
#include "tests/unit/codec/codec_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

void AddFile(std::string* tar, std::string_view path, std::string_view data, uint32_t mode = 0644) {
  TarMember m;
  m.path = path;
  m.mode = mode;
  m.mtime_ns = 1'600'000'000'000'000'000;
  m.size = data.size();
  AppendTarHeader(m, tar);
  tar->append(data);
  tar->resize(TarPadded(tar->size()), '\0');
}

void AddLink(std::string* tar, std::string_view path, std::string_view target) {
  TarMember m;
  m.path = path;
  m.type = TarType::kHardlink;
  m.link_target = target;
  AppendTarHeader(m, tar);
}

std::string End(std::string tar) { return tar.append(kTarTrailer, '\0'); }

void PutFixed16(std::string* dst, uint16_t v) {
  dst->push_back(static_cast<char>(v & 0xff));
  dst->push_back(static_cast<char>(v >> 8));
}

// A zip of stored members; `same_header` makes every central entry point at
// the first local header (overlapping members, as a zip bomb has them).
std::string StoredZip(const std::vector<std::pair<std::string, std::string>>& files,
                      bool same_header = false) {
  std::string zip, central;
  for (const auto& [name, data] : files) {
    const uint32_t at = same_header ? 0 : static_cast<uint32_t>(zip.size());
    const uint32_t crc = codec::Crc32(0, data.data(), data.size());
    const uint32_t size = static_cast<uint32_t>(data.size());
    const uint16_t name_len = static_cast<uint16_t>(name.size());
    if (!same_header || zip.empty()) {
      PutFixed32(&zip, 0x04034b50);
      for (uint16_t v : {20, 0, 0, 0, 0x21}) PutFixed16(&zip, v);  // Version .. date.
      for (uint32_t v : {crc, size, size}) PutFixed32(&zip, v);
      PutFixed16(&zip, name_len);
      PutFixed16(&zip, 0);
      zip += name;
      zip += data;
    }
    PutFixed32(&central, 0x02014b50);
    for (uint16_t v : {0x031e, 20, 0, 0, 0, 0x21}) PutFixed16(&central, v);
    for (uint32_t v : {crc, size, size}) PutFixed32(&central, v);
    for (uint16_t v : {name_len, uint16_t{0}, uint16_t{0}, uint16_t{0}, uint16_t{0}}) {
      PutFixed16(&central, v);
    }
    PutFixed32(&central, uint32_t{0100644} << 16);
    PutFixed32(&central, at);
    central += name;
  }
  const uint32_t cd_at = static_cast<uint32_t>(zip.size());
  zip += central;
  PutFixed32(&zip, 0x06054b50);
  for (uint16_t v : {0, 0}) PutFixed16(&zip, v);
  for (size_t i = 0; i < 2; ++i) PutFixed16(&zip, static_cast<uint16_t>(files.size()));
  PutFixed32(&zip, static_cast<uint32_t>(central.size()));
  PutFixed32(&zip, cd_at);
  PutFixed16(&zip, 0);
  return zip;
}

struct Scanned {
  Status status;
  std::vector<ScannedMember> members;
  uint64_t nested = 0;
};

Scanned ScanNested(const std::string& shard, const NestOptions& options) {
  Scanned out;
  NestedScanner nested(options, "outer.tar", /*checksum=*/true);
  ScanOptions so;
  so.on_bytes = [&](const char* data, size_t size) { nested.SetShardBytes(data, size); };
  ShardInfo info;
  const NestedScanner::Emit emit = [&](ScannedMember&& m) {
    out.members.push_back(std::move(m));
    return Status::Ok();
  };
  out.status = ScanTarBytes(
      "outer.tar", shard.data(), shard.size(), so,
      [&](ScannedMember&& m) { return nested.Member(std::move(m), emit); }, &info);
  out.nested = nested.nested_members();
  return out;
}

TEST(NestedScanTest, WhatCountsAsANestedTar) {
  std::string tar;
  AddFile(&tar, "f", "data");
  tar = End(tar);
  EXPECT_EQ(ClassifyMember("x.bin", tar.data(), tar.size()), NestedKind::kTar);
  // The name does not matter, the content does; too short is no tar.
  EXPECT_EQ(ClassifyMember("x.tar", tar.data(), 511), NestedKind::kNone);
  std::string broken = tar;
  broken[10] ^= 1;  // The checksum no longer matches.
  EXPECT_EQ(ClassifyMember("x.tar", broken.data(), broken.size()), NestedKind::kNone);
  std::string v7 = tar;
  std::fill(v7.begin() + 257, v7.begin() + 265, '\0');  // No magic.
  EXPECT_EQ(ClassifyMember("x.tar", v7.data(), v7.size()), NestedKind::kNone);
  // A zip by its name and its content: an end record that ends it. Formats
  // built on zip stay files.
  const std::string empty_zip = std::string("PK\5\6") + std::string(18, '\0');
  EXPECT_EQ(ClassifyMember("d/a.ZIP", empty_zip.data(), empty_zip.size()), NestedKind::kZip);
  EXPECT_EQ(ClassifyMember("w.npz", empty_zip.data(), empty_zip.size()), NestedKind::kNone);
  EXPECT_EQ(ClassifyMember("lib.jar", empty_zip.data(), empty_zip.size()), NestedKind::kNone);
  const std::string zip_start = std::string("PK\3\4") + std::string(40, '\0');
  EXPECT_EQ(ClassifyMember("d/a.zip", zip_start.data(), zip_start.size()), NestedKind::kNone);
  const std::string xz = std::string(
                             "\xfd"
                             "7zXZ",
                             5) +
                         std::string(1, '\0') + "xx";
  EXPECT_EQ(ClassifyMember("a.tar.xz", xz.data(), xz.size()), NestedKind::kCompressedTar);
  EXPECT_EQ(ClassifyMember("a.json.xz", xz.data(), xz.size()), NestedKind::kNone);
  const std::string not_gzip = "\x1f\x8bnot really";
  EXPECT_EQ(ClassifyMember("a.tgz", not_gzip.data(), not_gzip.size()), NestedKind::kNone);
}

TEST(NestedScanTest, InnerMembersAreRangesOfTheOuterShard) {
  std::string inner;
  AddFile(&inner, "/abs", "ABS");
  AddFile(&inner, "sub/a", std::string(700, 'a'));
  AddLink(&inner, "h", "/sub/a");
  inner = End(inner);
  std::string outer;
  AddFile(&outer, "first", "1");
  AddFile(&outer, "n1.tar", inner, 0640);
  AddLink(&outer, "again.tar", "n1.tar");
  outer = End(outer);
  NestOptions options;
  options.recursive = true;
  options.strip_extension = true;
  Scanned s = ScanNested(outer, options);
  ASSERT_TRUE(s.status.ok()) << s.status.message();
  std::vector<std::string> paths;
  for (const ScannedMember& m : s.members) paths.push_back(m.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"first", "n1", "n1//abs", "n1/sub/a", "n1/h", "again",
                                             "again//abs", "again/sub/a", "again/h"}));
  EXPECT_EQ(s.nested, 6u);
  EXPECT_EQ(s.members[1].kind, MemberKind::kDir);
  EXPECT_EQ(s.members[1].mode, 0750u);
  EXPECT_EQ(s.members[4].link_target, "n1//sub/a");
  for (const ScannedMember& m : s.members) {
    if (m.kind != MemberKind::kFile) continue;
    EXPECT_EQ(outer.substr(m.data_offset, m.size), m.path.ends_with("abs") ? "ABS"
                                                   : m.path == "first"     ? "1"
                                                                           : std::string(700, 'a'))
        << m.path;
  }
  EXPECT_EQ(s.members[6].data_offset, s.members[2].data_offset);
}

TEST(NestedScanTest, DepthAndEntryBounds) {
  std::string in2;
  AddFile(&in2, "deep", "d");
  in2 = End(in2);
  std::string in1;
  AddFile(&in1, "c.tar", in2);
  in1 = End(in1);
  std::string outer;
  AddFile(&outer, "b.tar", in1);
  outer = End(outer);
  NestOptions options;
  options.recursive = true;
  options.max_depth = 1;
  Scanned s = ScanNested(outer, options);
  ASSERT_TRUE(s.status.ok()) << s.status.message();
  ASSERT_EQ(s.members.size(), 2u);
  EXPECT_EQ(s.members[1].path, "b.tar/c.tar");
  EXPECT_EQ(s.members[1].kind, MemberKind::kFile);
  options.max_depth = 4;
  s = ScanNested(outer, options);
  ASSERT_TRUE(s.status.ok()) << s.status.message();
  EXPECT_EQ(s.members.back().path, "b.tar/c.tar/deep");
  options.max_entries = 1;
  s = ScanNested(outer, options);
  EXPECT_FALSE(s.status.ok());
  EXPECT_NE(s.status.message().find("shard outer.tar: member 'b.tar/c.tar'"), std::string::npos)
      << s.status.message();
}

TEST(NestedScanTest, ZipMembersAreRangesOfTheOuterShard) {
  std::string inner_tar;
  AddFile(&inner_tar, "t.txt", "in a tar in a zip");
  inner_tar = End(inner_tar);
  const std::string zip =
      StoredZip({{"a.txt", "alpha"}, {"sub/b.bin", std::string(900, 'b')}, {"in.tar", inner_tar}});
  std::string outer;
  AddFile(&outer, "first", "1");
  AddFile(&outer, "c/n1.ZIP", zip);  // The content counts, not the name.
  outer = End(outer);
  NestOptions options;
  options.recursive = true;
  options.strip_zip_extension = true;
  Scanned s = ScanNested(outer, options);
  ASSERT_TRUE(s.status.ok()) << s.status.message();
  std::vector<std::string> paths;
  for (const ScannedMember& m : s.members) paths.push_back(m.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"first", "c/n1", "c/n1/a.txt", "c/n1/sub/b.bin",
                                             "c/n1/in.tar", "c/n1/in.tar/t.txt"}));
  EXPECT_EQ(s.members[1].kind, MemberKind::kDir);
  EXPECT_EQ(outer.substr(s.members[2].data_offset, 5), "alpha");
  EXPECT_EQ(outer.substr(s.members[3].data_offset, 900), std::string(900, 'b'));
  EXPECT_EQ(outer.substr(s.members[5].data_offset, s.members[5].size), "in a tar in a zip");
  // Overlapping members: refused as a zip bomb, naming the shard and member.
  outer.clear();
  AddFile(&outer, "bomb.zip", StoredZip({{"x", "xxxx"}, {"x", "xxxx"}}, /*same_header=*/true));
  outer = End(outer);
  s = ScanNested(outer, options);
  ASSERT_FALSE(s.status.ok());
  EXPECT_NE(s.status.message().find("outer.tar, member 'bomb.zip'"), std::string::npos)
      << s.status.message();
  EXPECT_NE(s.status.message().find("overlap: refused as a zip bomb"), std::string::npos)
      << s.status.message();
}

// A compressed tar inside the shard is a slice: its members carry the
// slice's number and offsets in its decoded stream; the slice is the
// member's data range; a compressed tar inside it is refused.
TEST(NestedScanTest, ACompressedTarIsASlice) {
  std::string inner_tar;
  AddFile(&inner_tar, "deep", "DEEP");
  inner_tar = End(inner_tar);
  std::string inner;
  AddFile(&inner, "a", shardfs::testing::PseudoRandomBytes(3000, 1));
  AddFile(&inner, "in.tar", inner_tar);
  inner = End(inner);
  const std::string gz = shardfs::testing::Gzip(inner);
  std::string outer;
  AddFile(&outer, "first", "1");
  AddFile(&outer, "c.tar.gz", gz);
  outer = End(outer);
  NestOptions options;
  options.recursive = true;
  options.strip_extension = true;
  NestedScanner nested(options, "outer.tar", /*checksum=*/true);
  nested.SetShardBytes(outer.data(), outer.size());
  std::vector<ScannedMember> members;
  const NestedScanner::Emit emit = [&](ScannedMember&& m) {
    members.push_back(std::move(m));
    return Status::Ok();
  };
  ScanOptions so;
  ShardInfo info;
  Status s = ScanTarBytes(
      "outer.tar", outer.data(), outer.size(), so,
      [&](ScannedMember&& m) { return nested.Member(std::move(m), emit); }, &info);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<std::string> paths;
  for (const ScannedMember& m : members) paths.push_back(m.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"first", "c", "c/a", "c/in", "c/in/deep"}));
  ASSERT_EQ(nested.slices().size(), 1u);
  const NestedScanner::Slice& slice = nested.slices()[0];
  EXPECT_EQ(outer.substr(slice.base, slice.length), gz);
  EXPECT_EQ(slice.scan.codec, index::Codec::kGzip);
  EXPECT_EQ(slice.scan.table.decoded_size, inner.size());
  EXPECT_EQ(members[0].slice, 0u);
  EXPECT_EQ(members[1].kind, MemberKind::kDir);
  EXPECT_EQ(members[1].slice, 0u);
  EXPECT_EQ(members[2].slice, 1u);
  EXPECT_EQ(inner.substr(members[2].data_offset, members[2].size),
            shardfs::testing::PseudoRandomBytes(3000, 1));
  EXPECT_EQ(members[4].slice, 1u);  // A tar inside the slice: ranges of it.
  EXPECT_EQ(inner.substr(members[4].data_offset, members[4].size), "DEEP");

  // A compressed tar inside it: refused, naming the shard and the member.
  std::string twice;
  AddFile(&twice, "c.tar.gz", shardfs::testing::Gzip(End([&] {
    std::string t;
    AddFile(&t, "d.tar.gz", gz);
    return t;
  }())));
  twice = End(twice);
  NestedScanner again(options, "outer.tar", true);
  again.SetShardBytes(twice.data(), twice.size());
  s = ScanTarBytes(
      "outer.tar", twice.data(), twice.size(), so,
      [&](ScannedMember&& m) { return again.Member(std::move(m), emit); }, &info);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported);
  EXPECT_NE(s.message().find("member 'c/d.tar.gz'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardfs::archive
