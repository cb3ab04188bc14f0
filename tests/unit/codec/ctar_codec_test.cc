// Compressed tar shards: the seek table's encoding, and decoding every
// interval of a stream that ScanCompressedTarFd indexed back to the exact
// bytes of the decoded stream (gzip with many checkpoints, concatenated
// members; zstd frames; xz blocks come from the integration test's tools).
#include "src/codec/ctar_codec.h"

#include <fcntl.h>
#include <lzma.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <random>
#include <string>

#include "base/fd.h"
#include "base/io.h"
#include "gtest/gtest.h"
#include "index/schema.h"
#include "src/archive/ctar_scanner.h"
#include "tests/unit/test_util.h"

namespace shardfs::codec {
namespace {

using shardfs::testing::OneMemberTar;

using index::SeekKind;
using index::SeekPoint;
using index::SeekTable;
using shardfs::testing::Gzip;

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
  archive::CompressedScan scan;
  archive::ShardInfo info;
  int members = 0;
  archive::ScanOptions so;
  Status s = archive::ScanCompressedTarFd(
      "t.tar.gz", fd.get(), index::Codec::kGzip, 256 << 10, so,
      [&](archive::ScannedMember&& m) {
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
  archive::CompressedScan scan;
  archive::ShardInfo info;
  int members = 0;
  Status s = archive::ScanCompressedTarFd(
      "big-dict.tar.xz", fd.get(), index::Codec::kXz, 256 << 10, archive::ScanOptions{},
      [&](archive::ScannedMember&&) {
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
