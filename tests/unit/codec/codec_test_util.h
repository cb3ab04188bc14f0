// Helpers for the unit tests of src/codec/ and the libraries above it that
// read compressed bytes: streams compressed here with zlib, to decode.
#ifndef SHARDFS_TESTS_UNIT_CODEC_CODEC_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_CODEC_CODEC_TEST_UTIL_H_

#include <bzlib.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>

namespace shardfs::testing {

// `in` deflated at level 6, framed as zlib's deflateInit2 `window_bits` say.
inline std::string Deflate(const std::string& in, int window_bits) {
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, in.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// `in` as one gzip member.
inline std::string Gzip(const std::string& in) { return Deflate(in, 31); }

// `in` as a raw deflate stream, no header or trailer: a zip member's
// compressed bytes.
inline std::string RawDeflate(const std::string& in) { return Deflate(in, -15); }

// `in` as one bzip2 stream of blocks of `level` * 100 kB.
inline std::string Bzip2(const std::string& in, int level) {
  std::string out(in.size() + in.size() / 100 + 1000, '\0');
  unsigned n = static_cast<unsigned>(out.size());
  const int r = BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(in.data()),
                                         static_cast<unsigned>(in.size()), level, 0, 0);
  EXPECT_EQ(r, BZ_OK);
  out.resize(n);
  return out;
}

// `n` bytes of runs of one letter between runs of random bytes: blocks that
// compress unevenly.
inline std::string Mixed(size_t n, uint32_t seed) {
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

// The bytes whose symbol map (16-bit map of 16-byte ranges, then a 16-bit
// map per used range) spells the block magic: ranges 0x3141 = {2, 3, 7, 9,
// 15}, range 2's map 0x5926, range 3's 0x5359. A block of only these bytes
// carries a false magic 105 bits after its own (48 magic, 32 CRC, 1
// randomised, 24 origPtr).
inline std::string FalseMagicAlphabet() {
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

// `n` bytes of FalseMagicAlphabet().
inline std::string FalseMagicData(size_t n, uint32_t seed) {
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

}  // namespace shardfs::testing

#endif  // SHARDFS_TESTS_UNIT_CODEC_CODEC_TEST_UTIL_H_
