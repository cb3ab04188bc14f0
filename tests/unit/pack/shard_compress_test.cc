// pack --compress (tools/pack/shard_compress.h): where groups are cut, and every
// group of a compressed shard decoding alone (no window) back to its exact
// bytes through the mount's decoder (src/codec/ctar_codec.h); the zstd seek
// table's layout; a corrupt zstd group is an error, not other bytes.
#include "tools/pack/shard_compress.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <random>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "gtest/gtest.h"
#include "index/schema.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::pack {
namespace {

using index::Codec;
using index::SeekKind;

TEST(PlanGroupsTest, WholeSamplesUpToTheGroupSize) {
  // Samples at 0, 300, 700, 1100; tar of 1500 bytes; groups of 800.
  EXPECT_EQ(PlanGroups({0, 300, 700, 1100}, 1500, 800), (std::vector<uint64_t>{0, 700}));
  // Exactly full is not over.
  EXPECT_EQ(PlanGroups({0, 400, 800}, 1200, 800), (std::vector<uint64_t>{0, 800}));
  // A sample longer than a group: cut into pieces of the group size; the
  // last piece takes the next sample if it fits.
  EXPECT_EQ(PlanGroups({0, 100, 2200}, 2500, 800), (std::vector<uint64_t>{0, 100, 900, 1700}));
  EXPECT_EQ(PlanGroups({0, 100, 2200}, 2600, 800),
            (std::vector<uint64_t>{0, 100, 900, 1700, 2200}));
  EXPECT_EQ(PlanGroups({0}, 1536, 4096), (std::vector<uint64_t>{0}));
}

TEST(CheckGroupCompressionTest, Ranges) {
  EXPECT_TRUE(CheckGroupCompression({Codec::kZstd, 3, 1 << 20}).ok());
  EXPECT_TRUE(CheckGroupCompression({Codec::kGzip, 0, kMinGroupBytes}).ok());
  EXPECT_FALSE(CheckGroupCompression({Codec::kZstd, 0, 1 << 20}).ok());
  EXPECT_FALSE(CheckGroupCompression({Codec::kGzip, 10, 1 << 20}).ok());
  EXPECT_FALSE(CheckGroupCompression({Codec::kXz, 3, 1 << 20}).ok());
  EXPECT_FALSE(CheckGroupCompression({Codec::kZstd, 3, codec::kMaxIntervalBytes + 1}).ok());
  EXPECT_FALSE(CheckGroupCompression({Codec::kZstd, 3, 1024}).ok());
}

UniqueFd TempWith(const std::string& data) {
  UniqueFd fd(::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd.valid());
  EXPECT_TRUE(WriteFully(fd.get(), data.data(), data.size()));
  return fd;
}

std::string ReadAll(int fd) {
  std::string out(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  EXPECT_TRUE(PreadExact(fd, out.data(), out.size(), 0).ok());
  return out;
}

// Compressible bytes with repeats far apart (so that a group would refer
// back across its start if it could).
std::string Data(size_t n) {
  std::mt19937 rng(7);
  std::string words[] = {"alpha ", "beta ", "gamma ", "delta ", "{\"id\": ", "0.25, "};
  std::string out;
  while (out.size() < n) out += words[rng() % 6];
  out.resize(n);
  return out;
}

uint32_t Le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

class CompressShardTest : public ::testing::TestWithParam<Codec> {};

TEST_P(CompressShardTest, EveryGroupDecodesAlone) {
  const std::string tar = Data(300000);
  const std::vector<uint64_t> groups =
      PlanGroups({0, 5000, 40000, 41000, 90000}, tar.size(), 64 << 10);
  ASSERT_GT(groups.size(), 3u);
  UniqueFd in = TempWith(tar);
  UniqueFd out = TempWith("");
  GroupCompression c{GetParam(), DefaultCompressLevel(GetParam()), 64 << 10};
  index::SeekTable table;
  ASSERT_TRUE(CompressShard("t", in.get(), tar.size(), groups, c, out.get(), &table).ok());
  const std::string z = ReadAll(out.get());
  ASSERT_LT(z.size(), tar.size() / 2);
  ASSERT_EQ(table.decoded_size, tar.size());
  ASSERT_EQ(table.points.size(), groups.size());
  std::string enc;
  index::EncodeSeekTable(table, &enc);
  index::SeekTable back;
  ASSERT_TRUE(index::DecodeSeekTable(enc, &back).ok());
  for (size_t i = 0; i < table.points.size(); ++i) {
    const index::SeekPoint& p = table.points[i];
    EXPECT_EQ(p.decoded, groups[i]);
    EXPECT_EQ(p.window, 0u);
    EXPECT_EQ(p.bits, 0);
    EXPECT_EQ(p.kind, GetParam() == Codec::kZstd ? SeekKind::kZstdFrame
                      : i == 0                   ? SeekKind::kGzipMember
                                                 : SeekKind::kDeflate);
    const uint64_t from = codec::IntervalInputStart(table, i);
    const uint64_t to = codec::IntervalInputEnd(table, i, z.size());
    Result<std::string> got = codec::DecodeInterval("t", table, i, "", z.substr(from, to - from),
                                                    codec::kMaxIntervalBytes);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, tar.substr(p.decoded, table.End(i) - p.decoded)) << "group " << i;
  }
  if (GetParam() == Codec::kZstd) {
    // The seekable format's table: entries, footer, in a skippable frame.
    const size_t n = groups.size();
    EXPECT_EQ(Le32(z, z.size() - 4), 0x8F92EAB1u);
    EXPECT_EQ(static_cast<uint8_t>(z[z.size() - 5]), 0x80);
    EXPECT_EQ(Le32(z, z.size() - 9), n);
    const size_t frame = z.size() - 9 - 12 * n - 8;
    EXPECT_EQ(Le32(z, frame), 0x184D2A5Eu);
    EXPECT_EQ(Le32(z, frame + 4), 12 * n + 9);
    uint64_t comp = 0, dec = 0;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(comp, table.points[i].compressed);
      EXPECT_EQ(dec, table.points[i].decoded);
      comp += Le32(z, frame + 8 + 12 * i);
      dec += Le32(z, frame + 8 + 12 * i + 4);
    }
    EXPECT_EQ(comp, frame);
    EXPECT_EQ(dec, tar.size());
  }
}

TEST_P(CompressShardTest, SameBytesWhateverTheThreadsAndAWholeStreamDecodes) {
  const std::string tar = Data(500000);
  const std::vector<uint64_t> groups = PlanGroups({0, 70000, 200000}, tar.size(), 32 << 10);
  UniqueFd in = TempWith(tar);
  std::string outs[3];
  int threads[3] = {1, 3, 8};
  for (int k = 0; k < 3; ++k) {
    UniqueFd out = TempWith("");
    GroupCompression c{GetParam(), DefaultCompressLevel(GetParam()), 32 << 10, threads[k]};
    index::SeekTable table;
    ASSERT_TRUE(CompressShard("t", in.get(), tar.size(), groups, c, out.get(), &table).ok());
    outs[k] = ReadAll(out.get());
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  // The whole file is one stream a stock decoder reads (gzip: CRC-32 and
  // length in the trailer; zstd: every frame, the seek table skipped).
  std::string whole(tar.size() + 1, '\0');
  if (GetParam() == Codec::kGzip) {
    z_stream strm{};
    ASSERT_EQ(inflateInit2(&strm, 31), Z_OK);
    strm.next_in = reinterpret_cast<Bytef*>(outs[0].data());
    strm.avail_in = static_cast<uInt>(outs[0].size());
    strm.next_out = reinterpret_cast<Bytef*>(whole.data());
    strm.avail_out = static_cast<uInt>(whole.size());
    EXPECT_EQ(inflate(&strm, Z_FINISH), Z_STREAM_END);
    EXPECT_EQ(strm.avail_in, 0u);
    whole.resize(whole.size() - strm.avail_out);
    inflateEnd(&strm);
  } else {
    const size_t n = ZSTD_decompress(whole.data(), whole.size(), outs[0].data(), outs[0].size());
    ASSERT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
    whole.resize(n);
  }
  EXPECT_EQ(whole, tar);
}

TEST(CompressShardTest, CorruptZstdGroupIsAnError) {
  const std::string tar = Data(200000);
  const std::vector<uint64_t> groups = PlanGroups({0}, tar.size(), 64 << 10);
  UniqueFd in = TempWith(tar);
  UniqueFd out = TempWith("");
  index::SeekTable table;
  ASSERT_TRUE(CompressShard("t", in.get(), tar.size(), groups, {Codec::kZstd, 3, 64 << 10},
                            out.get(), &table)
                  .ok());
  const std::string z = ReadAll(out.get());
  const size_t i = 1;
  const uint64_t from = codec::IntervalInputStart(table, i);
  const uint64_t to = codec::IntervalInputEnd(table, i, z.size());
  int errors = 0;
  // Every byte of the frame after its header, flipped in turn.
  for (uint64_t at = from + 12; at + 1 < to; at += 7) {
    std::string bad = z.substr(from, to - from);
    bad[at - from] ^= 0x21;
    Result<std::string> got =
        codec::DecodeInterval("t", table, i, "", bad, codec::kMaxIntervalBytes);
    if (!got.ok()) {
      ++errors;
      continue;
    }
    EXPECT_EQ(*got, tar.substr(table.points[i].decoded, table.End(i) - table.points[i].decoded))
        << "flipped byte " << at << " gave other bytes";
  }
  EXPECT_GT(errors, 0);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressShardTest, ::testing::Values(Codec::kZstd, Codec::kGzip));

}  // namespace
}  // namespace shardfs::pack
