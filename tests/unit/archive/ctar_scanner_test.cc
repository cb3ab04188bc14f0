// src/archive/ctar_scanner.h: the seek table ScanCompressedTarFd builds for a
// compressed tar, each of its intervals decoded back (src/codec/ctar_codec.h)
// to the exact bytes of the decoded stream: gzip with many checkpoints and
// concatenated members, bzip2 blocks of two streams; damage and an xz
// dictionary past the limit refused at the scan (and the latter at a read).
#include "src/archive/ctar_scanner.h"

#include <lzma.h>
#include <sys/mman.h>

#include <cstdlib>
#include <random>
#include <string>

#include "base/fd.h"
#include "base/io.h"
#include "gtest/gtest.h"
#include "index/schema.h"
#include "src/codec/ctar_codec.h"
#include "tests/unit/codec/codec_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using codec::DecodeInterval;
using codec::DecodeIntervalPrefix;
using codec::IntervalInputEnd;
using codec::IntervalInputStart;
using codec::kMaxIntervalBytes;
using index::SeekKind;
using index::SeekPoint;
using index::SeekTable;
using shardfs::testing::Bzip2;
using shardfs::testing::FalseMagicData;
using shardfs::testing::Gzip;
using shardfs::testing::Mixed;
using shardfs::testing::OneMemberTar;

TEST(CtarCodecTest, EveryGzipIntervalDecodesToTheStream) {
  std::mt19937 rng(7);
  std::string content;
  while (content.size() < (3u << 20)) {
    if (rng() % 2) {
      for (int i = 0; i < 4096; ++i) content.push_back(static_cast<char>(rng()));
    } else {
      content += std::string(4096, static_cast<char>('a' + rng() % 26));
    }
  }
  const std::string tar = OneMemberTar(content);
  // Two members: the second starts mid-way.
  const std::string gz = Gzip(tar.substr(0, 1000000)) + Gzip(tar.substr(1000000));
  UniqueFd fd(::memfd_create("ctar", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(WriteFully(fd.get(), gz.data(), gz.size()));
  CompressedScan scan;
  ShardInfo info;
  int members = 0;
  ScanOptions so;
  Status s = ScanCompressedTarFd(
      "t.tar.gz", fd.get(), index::Codec::kGzip, 256 << 10, so,
      [&](ScannedMember&& m) {
        ++members;
        EXPECT_EQ(m.size, content.size());
        return Status::Ok();
      },
      &info, &scan);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(members, 1);
  ASSERT_EQ(scan.table.decoded_size, tar.size());
  ASSERT_GT(scan.table.points.size(), 8u);
  int member_points = 0;
  for (size_t i = 0; i < scan.table.points.size(); ++i) {
    const SeekPoint& p = scan.table.points[i];
    member_points += p.kind == SeekKind::kGzipMember;
    const uint64_t from = IntervalInputStart(scan.table, i);
    const uint64_t to = IntervalInputEnd(scan.table, i, gz.size());
    Result<std::string> out =
        DecodeInterval("t.tar.gz", scan.table, i, scan.windows[i],
                       std::string_view(gz).substr(from, to - from), kMaxIntervalBytes);
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(*out, tar.substr(p.decoded, scan.table.End(i) - p.decoded)) << "interval " << i;
    // A prefix is the interval's first bytes, of any length up to all of it.
    for (uint64_t prefix : {uint64_t{1}, uint64_t{rng() % out->size()}, uint64_t{out->size()},
                            uint64_t{out->size()} + 9}) {
      Result<std::string> part = DecodeIntervalPrefix("t.tar.gz", scan.table, i, scan.windows[i],
                                                      std::string_view(gz).substr(from, to - from),
                                                      kMaxIntervalBytes, prefix);
      ASSERT_TRUE(part.ok()) << part.status().message();
      EXPECT_EQ(*part, out->substr(0, prefix)) << "interval " << i << ", prefix " << prefix;
    }
    // Cut short, it fails; it never returns other bytes.
    Result<std::string> cut =
        DecodeInterval("t.tar.gz", scan.table, i, scan.windows[i],
                       std::string_view(gz).substr(from, (to - from) / 2), kMaxIntervalBytes);
    if (cut.ok()) {
      EXPECT_EQ(*cut, *out);
    }
  }
  EXPECT_EQ(member_points, 2);
}

// `in` as an xz stream of one block (liblzma's preset 0, a 256 KiB
// dictionary) whose header then declares a dictionary of 1536 MiB, as `xz
// --lzma2=dict=1536MiB` writes it; *block_at is where the block starts.
std::string XzDeclaring1536MiB(const std::string& in, size_t* block_at) {
  std::string xz(lzma_stream_buffer_bound(in.size()), '\0');
  size_t n = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(0, LZMA_CHECK_CRC64, nullptr,
                                    reinterpret_cast<const uint8_t*>(in.data()), in.size(),
                                    reinterpret_cast<uint8_t*>(xz.data()), &n, xz.size()),
            LZMA_OK);
  xz.resize(n);
  // The block header: its size, flags, the optional sizes, then the LZMA2
  // filter (id 0x21, one byte of properties: the dictionary size), padding,
  // and its CRC-32.
  constexpr size_t kBlock = 12;  // After the stream header.
  *block_at = kBlock;
  auto* b = reinterpret_cast<uint8_t*>(xz.data()) + kBlock;
  const size_t header = (size_t{b[0]} + 1) * 4;
  size_t at = 2;
  for (int field : {0x40, 0x80}) {
    if (b[1] & field) {
      while (b[at++] & 0x80) {
      }
    }
  }
  EXPECT_EQ(b[at], 0x21);
  EXPECT_EQ(b[at + 1], 1);
  b[at + 2] = 37;  // (2 | 1) << (37 / 2 + 11): 1536 MiB.
  const uint32_t crc = lzma_crc32(b, header - 4, 0);
  for (int i = 0; i < 4; ++i) b[header - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  return xz;
}

TEST(CtarCodecTest, AnXzHeaderDeclaringADictionaryPastTheLimitIsRefused) {
  const std::string tar = OneMemberTar("small content\n");
  size_t block_at = 0;
  const std::string xz = XzDeclaring1536MiB(tar, &block_at);
  // What the header declares is what a decoder would take.
  {
    lzma_filter filters[LZMA_FILTERS_MAX + 1];
    lzma_block block{};
    block.version = 1;
    block.filters = filters;
    block.header_size = lzma_block_header_size_decode(static_cast<uint8_t>(xz[block_at]));
    ASSERT_EQ(lzma_block_header_decode(&block, nullptr,
                                       reinterpret_cast<const uint8_t*>(xz.data()) + block_at),
              LZMA_OK);
    EXPECT_GT(lzma_raw_decoder_memusage(filters), uint64_t{1536} << 20);
    for (size_t k = 0; filters[k].id != LZMA_VLI_UNKNOWN; ++k) std::free(filters[k].options);
  }
  // At build: refused, naming the shard and the limit, before any member.
  UniqueFd fd(::memfd_create("xz", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(WriteFully(fd.get(), xz.data(), xz.size()));
  CompressedScan scan;
  ShardInfo info;
  int members = 0;
  Status s = ScanCompressedTarFd(
      "big-dict.tar.xz", fd.get(), index::Codec::kXz, 256 << 10, ScanOptions{},
      [&](ScannedMember&&) {
        ++members;
        return Status::Ok();
      },
      &info, &scan);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("shard big-dict.tar.xz: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("xz: decoding needs 1537 MiB of memory (the dictionary its header "
                             "declares), more than the limit of 256 MiB"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(members, 0);
  // On a read (the shard replaced after its index was built): the block's
  // decoder is refused before it is made.
  SeekTable table;
  table.decoded_size = tar.size();
  SeekPoint p;
  p.kind = SeekKind::kXzBlock;
  p.compressed = block_at;
  p.check = LZMA_CHECK_CRC64;
  table.points.push_back(p);
  Result<std::string> out = DecodeInterval(
      "big-dict.tar.xz", table, 0, "", std::string_view(xz).substr(block_at), kMaxIntervalBytes);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("shard big-dict.tar.xz: compressed data at byte 12: the "
                                        "xz block's decoder needs 1536 MiB of memory"),
            std::string::npos)
      << out.status().message();
}

Status Scan(const std::string& bz, CompressedScan* scan) {
  UniqueFd fd(::memfd_create("bz2", MFD_CLOEXEC));
  if (!WriteFully(fd.get(), bz.data(), bz.size())) return Status::IoError("write");
  ShardInfo info;
  ScanOptions so;
  return ScanCompressedTarFd(
      "t.tar.bz2", fd.get(), index::Codec::kBzip2, 1 << 20, so,
      [](ScannedMember&&) { return Status::Ok(); }, &info, scan);
}

TEST(Bzip2BlockTest, EveryIndexedBlockDecodesToTheStream) {
  // Two streams (as pbzip2 and concatenated files give), of several blocks
  // each, one of them from the false-magic alphabet.
  const std::string tar = OneMemberTar(Mixed(300000, 9) + FalseMagicData(250000, 2));
  const std::string bz = Bzip2(tar.substr(0, 250000), 1) + Bzip2(tar.substr(250000), 1);
  CompressedScan scan;
  Status s = Scan(bz, &scan);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(scan.table.decoded_size, tar.size());
  ASSERT_GE(scan.table.points.size(), 5u);
  int last_in_stream = 0;
  for (size_t i = 0; i < scan.table.points.size(); ++i) {
    const index::SeekPoint& p = scan.table.points[i];
    ASSERT_EQ(p.kind, index::SeekKind::kBzip2Block);
    EXPECT_EQ(p.check & index::kBzip2LevelMask, 1);
    last_in_stream += (p.check & index::kBzip2LastInStream) != 0;
    const uint64_t from = IntervalInputStart(scan.table, i);
    const uint64_t to = IntervalInputEnd(scan.table, i, bz.size());
    Result<std::string> out =
        DecodeInterval("t.tar.bz2", scan.table, i, "", std::string_view(bz).substr(from, to - from),
                       kMaxIntervalBytes);
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(*out, tar.substr(p.decoded, scan.table.End(i) - p.decoded)) << "block " << i;
    Result<std::string> cut =
        DecodeInterval("t.tar.bz2", scan.table, i, "",
                       std::string_view(bz).substr(from, (to - from) / 2), kMaxIntervalBytes);
    EXPECT_FALSE(cut.ok());
  }
  EXPECT_EQ(last_in_stream, 2);
  // The table round-trips through its encoding.
  std::string v;
  index::EncodeSeekTable(scan.table, &v);
  index::SeekTable back;
  ASSERT_TRUE(index::DecodeSeekTable(v, &back).ok());
  EXPECT_EQ(back.points, scan.table.points);
}

TEST(Bzip2BlockTest, BuildRefusesDamage) {
  const std::string tar = OneMemberTar(Mixed(200000, 4));
  const std::string bz = Bzip2(tar, 1);
  CompressedScan scan;
  // Trailing garbage, truncation, a flipped bit, a wrong stream CRC.
  Status s = Scan(bz + "junk", &scan);
  EXPECT_NE(s.message().find("at compressed byte " + std::to_string(bz.size())), std::string::npos)
      << s.message();
  s = Scan(bz.substr(0, bz.size() - 7), &scan);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.tar.bz2"), std::string::npos);
  std::string flipped = bz;
  flipped[bz.size() / 3] ^= 0x04;
  EXPECT_FALSE(Scan(flipped, &scan).ok());
  std::string crc = bz;
  crc[crc.size() - 2] ^= 0x01;  // Inside the combined CRC (or its padding).
  s = Scan(crc, &scan);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Scan(bz, &scan).ok());
}

}  // namespace
}  // namespace shardfs::archive
