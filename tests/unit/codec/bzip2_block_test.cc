// bzip2 random access (src/codec/bzip2_block.h): the bit copier, the one-block
// stream builder (byte for byte libbz2's own stream for a one-block input),
// the magic search and the candidate filter on synthetic buffers and on a
// block crafted to hold a false magic, and every block of a compressed tar
// indexed by ScanCompressedTarFd decoding back to the exact stream.
#include "src/codec/bzip2_block.h"

#include <bzlib.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "base/fd.h"
#include "base/io.h"
#include "gtest/gtest.h"
#include "index/schema.h"
#include "src/archive/ctar_scanner.h"
#include "src/codec/ctar_codec.h"
#include "tests/unit/test_util.h"

namespace shardfs::codec {
namespace {

using shardfs::testing::OneMemberTar;

std::string Bzip2(const std::string& in, int level) {
  std::string out(in.size() + in.size() / 100 + 1000, '\0');
  unsigned n = static_cast<unsigned>(out.size());
  const int r = BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(in.data()),
                                         static_cast<unsigned>(in.size()), level, 0, 0);
  EXPECT_EQ(r, BZ_OK);
  out.resize(n);
  return out;
}

std::string Mixed(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < n) {
    if (rng() % 2) {
      for (int i = 0; i < 2048; ++i) s.push_back(static_cast<char>(rng()));
    } else {
      s += std::string(1000 + rng() % 3000, static_cast<char>('a' + rng() % 26));
    }
  }
  s.resize(n);
  return s;
}

int Bit(std::string_view s, uint64_t i) {
  return (static_cast<uint8_t>(s[i / 8]) >> (7 - i % 8)) & 1;
}

TEST(Bzip2BlockTest, CopiesBitsAtEveryOffset) {
  std::mt19937 rng(3);
  std::string src(300, '\0');
  for (char& c : src) c = static_cast<char>(rng());
  for (uint64_t head = 0; head < 9; ++head) {
    for (uint64_t from = 0; from < 20; ++from) {
      const uint64_t to = from + 1 + rng() % 2000;
      BitWriter w;
      w.Put(0x5, static_cast<int>(head));
      w.CopyBits(src, from, to);
      ASSERT_EQ(w.bits(), head + to - from);
      const std::string out = w.Finish();
      ASSERT_EQ(out.size(), (head + to - from + 7) / 8);
      for (uint64_t i = from; i < to; ++i) {
        ASSERT_EQ(Bit(out, head + i - from), Bit(src, i)) << head << " " << from << " " << i;
      }
      for (uint64_t i = head + to - from; i < out.size() * 8; ++i) ASSERT_EQ(Bit(out, i), 0);
    }
  }
  EXPECT_EQ(ReadBits("\xff\x00", 4, 8), 0xf0u);
  EXPECT_EQ(ReadBits("\x80", 0, 3), 4u);
  EXPECT_EQ(ReadBits("\x80", 6, 4), 0u);  // Past the end: zeros.
}

TEST(Bzip2BlockTest, FindsMagicsAtAnyBitOffset) {
  std::mt19937 rng(11);
  for (uint64_t magic : {kBzip2BlockMagic, kBzip2EndMagic}) {
    for (uint64_t at = 0; at < 70; ++at) {
      std::string buf(40, '\0');
      for (char& c : buf) c = static_cast<char>(rng() & 0x0f);  // No magic by chance.
      BitWriter w;
      w.CopyBits(buf, 0, at);
      w.Put(magic, 48);
      w.CopyBits(buf, at + 48, buf.size() * 8);
      const std::string s = w.Finish();
      EXPECT_EQ(NextBzip2Magic(s, 0, s.size() * 8), at);
      EXPECT_EQ(NextBzip2Magic(s, at + 1, s.size() * 8), s.size() * 8);
      EXPECT_EQ(NextBzip2Magic(s, 0, at), at);  // `to` excludes it.
      const auto ends = LastBzip2EndMagics(s, 0, s.size() * 8, 4);
      if (magic == kBzip2EndMagic) {
        ASSERT_EQ(ends.size(), 1u);
        EXPECT_EQ(ends[0], at);
      } else {
        EXPECT_TRUE(ends.empty());
      }
    }
  }
  EXPECT_EQ(NextBzip2Magic("short", 0, 40), 40u);
}

TEST(Bzip2BlockTest, OneBlockStreamIsLibbz2sOwn) {
  for (int level : {1, 9}) {
    const std::string data = Mixed(50000, level);
    const std::string bz = Bzip2(data, level);
    const uint64_t eos = NextBzip2Magic(bz, 32 + kBzip2MarkBits, bz.size() * 8);
    ASSERT_EQ(ReadBits(bz, eos, 48), kBzip2EndMagic);
    EXPECT_EQ(OneBlockStream(bz, 32, eos, level), bz);
    std::string out(data.size(), '\0');
    Result<size_t> n = DecodeBzip2Block(bz, 32, eos, level, out.data(), out.size());
    ASSERT_TRUE(n.ok()) << n.status().message();
    EXPECT_EQ(*n, data.size());
    EXPECT_EQ(out, data);
    // One byte short of room: refused, never cut.
    n = DecodeBzip2Block(bz, 32, eos, level, out.data(), out.size() - 1);
    EXPECT_FALSE(n.ok());
    // An end one bit early or late: refused.
    EXPECT_FALSE(DecodeBzip2Block(bz, 32, eos - 1, level, out.data(), out.size()).ok());
    EXPECT_FALSE(DecodeBzip2Block(bz, 32, eos + 1, level, out.data(), out.size()).ok());
    // A flipped bit inside the block: refused (CRC or data error).
    std::string bad = bz;
    bad[bad.size() / 2] ^= 0x10;
    EXPECT_FALSE(DecodeBzip2Block(bad, 32, eos, level, out.data(), out.size()).ok());
  }
}

TEST(Bzip2BlockTest, MultiBlockStreamDecodesBlockByBlock) {
  const std::string data = Mixed(450000, 5);
  const std::string bz = Bzip2(data, 1);
  std::string back;
  std::string buf(Bzip2MaxBlockBytes(1), '\0');
  uint64_t bit = 32;
  int blocks = 0, unaligned = 0;
  uint32_t combined = 0;
  while (ReadBits(bz, bit, 48) == kBzip2BlockMagic) {
    Result<Bzip2Block> b = FindBzip2Block(bz, bit, 1, buf.data(), buf.size());
    ASSERT_TRUE(b.ok()) << b.status().message();
    back.append(buf.data(), b->decoded);
    combined = ((combined << 1) | (combined >> 31)) ^ b->crc;
    unaligned += bit % 8 != 0;
    ++blocks;
    bit = b->end;
  }
  ASSERT_EQ(ReadBits(bz, bit, 48), kBzip2EndMagic);
  EXPECT_EQ(ReadBits(bz, bit + 48, 32), combined);
  EXPECT_GE(blocks, 3);
  EXPECT_GT(unaligned, 0);
  EXPECT_EQ(back, data);
}

// The bytes whose symbol map (16-bit map of 16-byte ranges, then a 16-bit
// map per used range) spells the block magic: ranges 0x3141 = {2, 3, 7, 9,
// 15}, range 2's map 0x5926, range 3's 0x5359. A block of only these bytes
// carries a false magic 105 bits after its own (48 magic, 32 CRC, 1
// randomised, 24 origPtr).
std::string FalseMagicAlphabet() {
  std::string a;
  for (int r : {2, 3}) {
    const unsigned map = r == 2 ? 0x5926 : 0x5359;
    for (int i = 0; i < 16; ++i) {
      if (map & (0x8000u >> i)) a.push_back(static_cast<char>(r * 16 + i));
    }
  }
  for (int c : {0x70, 0x90, 0xf0}) a.push_back(static_cast<char>(c));
  return a;
}

std::string FalseMagicData(size_t n, uint32_t seed) {
  const std::string a = FalseMagicAlphabet();
  std::mt19937 rng(seed);
  // No byte twice in a row: a run of 4 would add its count byte to the map.
  std::string s(n, '\0');
  char prev = 0;
  for (char& c : s) {
    do {
      c = a[rng() % a.size()];
    } while (c == prev);
    prev = c;
  }
  return s;
}

TEST(Bzip2BlockTest, CandidateFilterSkipsAFalseMagic) {
  const std::string data = FalseMagicData(60000, 1);
  const std::string bz = Bzip2(data, 1);
  // The first candidate after the block's header is the false magic.
  const uint64_t first = NextBzip2Magic(bz, 32 + kBzip2MarkBits, bz.size() * 8);
  ASSERT_EQ(first, 32u + 105);
  ASSERT_EQ(ReadBits(bz, first, 48), kBzip2BlockMagic);
  std::string out(data.size(), '\0');
  EXPECT_FALSE(DecodeBzip2Block(bz, 32, first, 1, out.data(), out.size()).ok());
  Result<Bzip2Block> b = FindBzip2Block(bz, 32, 1, out.data(), out.size());
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(ReadBits(bz, b->end, 48), kBzip2EndMagic);
  EXPECT_EQ(b->decoded, data.size());
  EXPECT_EQ(out, data);
  // Given as an ordered list of candidates, the same choice.
  Result<Bzip2Block> c = DecodeFirstValid(bz, 32, {first, b->end}, 1, out.data(), out.size());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->end, b->end);
  EXPECT_FALSE(DecodeFirstValid(bz, 32, {first}, 1, out.data(), out.size()).ok());
}

Status Scan(const std::string& bz, archive::CompressedScan* scan) {
  UniqueFd fd(::memfd_create("bz2", MFD_CLOEXEC));
  if (!WriteFully(fd.get(), bz.data(), bz.size())) return Status::IoError("write");
  archive::ShardInfo info;
  archive::ScanOptions so;
  return archive::ScanCompressedTarFd(
      "t.tar.bz2", fd.get(), index::Codec::kBzip2, 1 << 20, so,
      [](archive::ScannedMember&&) { return Status::Ok(); }, &info, scan);
}

TEST(Bzip2BlockTest, EveryIndexedBlockDecodesToTheStream) {
  // Two streams (as pbzip2 and concatenated files give), of several blocks
  // each, one of them from the false-magic alphabet.
  const std::string tar = OneMemberTar(Mixed(300000, 9) + FalseMagicData(250000, 2));
  const std::string bz = Bzip2(tar.substr(0, 250000), 1) + Bzip2(tar.substr(250000), 1);
  archive::CompressedScan scan;
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
  archive::CompressedScan scan;
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
}  // namespace shardfs::codec
