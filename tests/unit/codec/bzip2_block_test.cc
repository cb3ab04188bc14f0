// bzip2 random access (src/codec/bzip2_block.h): the bit copier, the one-block
// stream builder (byte for byte libbz2's own stream for a one-block input),
// the magic search and the candidate filter on synthetic buffers and on a
// block crafted to hold a false magic (the decoding of every block that
// ScanCompressedTarFd indexes: tests/unit/archive/ctar_scanner_test.cc).
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
#include "src/codec/ctar_codec.h"
#include "tests/unit/codec/codec_test_util.h"

namespace shardfs::codec {
namespace {

using shardfs::testing::Bzip2;
using shardfs::testing::FalseMagicData;
using shardfs::testing::Mixed;

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

}  // namespace
}  // namespace shardfs::codec
