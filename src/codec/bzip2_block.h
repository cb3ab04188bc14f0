// Random access to bzip2: decoding one block of a bzip2 stream on its own.
//
// A bzip2 stream is "BZh" and a level digit ('1'..'9': blocks of at most
// level x 100 kB before the Burrows-Wheeler transform), then blocks, each
// starting with the 48-bit magic 0x314159265359 and its 32-bit CRC, then
// the 48-bit end-of-stream magic 0x177245385090 and the stream's combined
// CRC (for each block: combined = rotl(combined, 1) ^ block_crc), then zero
// bits up to a byte. Bits are written most significant first, and a block
// starts at any BIT offset: nothing marks where it ends but the next magic.
//
// libbz2 starts only at a stream's first byte, so one block is decoded from
// a small stream built around it (OneBlockStream): the header with the
// stream's level, the block's bits shifted to follow it, the end-of-stream
// magic, and as combined CRC the block's own CRC (a one-block stream's
// combined CRC is its block's). libbz2 then checks the block's CRC and the
// stream's end, so a block decodes only if its bits are exactly right.
//
// A 48-bit magic can occur by chance inside compressed data, so a magic is
// only a candidate end: DecodeFirstValid tries candidates in order and keeps
// the first whose block decodes with its CRC (the candidate filter).
//
// Thread-safe: plain functions; every call owns its decoder state.
#ifndef SHARDFS_SRC_CODEC_BZIP2_BLOCK_H_
#define SHARDFS_SRC_CODEC_BZIP2_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::codec {

inline constexpr uint64_t kBzip2BlockMagic = 0x314159265359;
inline constexpr uint64_t kBzip2EndMagic = 0x177245385090;
// Bits of a block's magic and CRC, and of the end marker and combined CRC.
inline constexpr uint64_t kBzip2MarkBits = 48 + 32;
// At most this many candidate ends are tried for one block: a false magic
// is a 2^-48 chance per bit, so more mean the block itself is bad.
inline constexpr size_t kBzip2MaxCandidates = 4;

// The most a block of `level` (1..9) can decode to: level x 100,000 bytes
// after the BWT, each 5 of which (a run of 4 and a count) give at most 259.
uint64_t Bzip2MaxBlockBytes(int level);

// `n` (<= 56) bits of `data` from bit `bit` on, most significant first;
// bits past the end read as zeros.
uint64_t ReadBits(std::string_view data, uint64_t bit, int n);

// Appends bits, most significant first, to a byte string.
class BitWriter {
 public:
  // Appends the low `n` (<= 56) bits of `v`.
  void Put(uint64_t v, int n);
  // Appends bits [from, to) of `src`. REQUIRES: to <= src.size() * 8.
  void CopyBits(std::string_view src, uint64_t from, uint64_t to);
  uint64_t bits() const { return bits_; }
  // The bytes written, the last padded with zero bits.
  std::string Finish();

 private:
  std::string out_;
  uint64_t acc_ = 0;  // The pending bits (acc_bits_ < 8 between calls).
  int acc_bits_ = 0;
  uint64_t bits_ = 0;
};

// The one-block stream of the block whose bits are [from, to) of `src`
// (from: its magic; to: the next block's magic or the end-of-stream magic).
// REQUIRES: from + kBzip2MarkBits <= to <= src.size() * 8, level in 1..9.
std::string OneBlockStream(std::string_view src, uint64_t from, uint64_t to, int level);

// Decodes the block [from, to) of `src` (see OneBlockStream) into
// out[0, cap). Returns the bytes it decoded. InvalidArgument (a message
// without the shard's name: "bzip2 block ...") if the block does not decode
// exactly: a data error or CRC mismatch, bits that end early or late, or
// more than `cap` bytes.
Result<size_t> DecodeBzip2Block(std::string_view src, uint64_t from, uint64_t to, int level,
                                char* out, size_t cap);

// The first position p in [from, to) where a block magic or an end magic
// starts (p + 48 <= src.size() * 8); `to` if none.
uint64_t NextBzip2Magic(std::string_view src, uint64_t from, uint64_t to);

// Up to `max` positions p in [from, before) where an end-of-stream magic
// starts, the last first.
std::vector<uint64_t> LastBzip2EndMagics(std::string_view src, uint64_t from, uint64_t before,
                                         size_t max);

struct Bzip2Block {
  uint64_t end = 0;    // The bit where the block's bits end.
  size_t decoded = 0;  // The bytes it decoded.
  uint32_t crc = 0;    // Its CRC (the 32 bits after its magic).
};

// The candidate filter: decodes the block starting at bit `from` of `src`
// with each end in `ends` (positions of magics) in the order given, and
// returns the first that decodes (into out[0, cap)). InvalidArgument
// naming the block's bit if none does.
Result<Bzip2Block> DecodeFirstValid(std::string_view src, uint64_t from,
                                    const std::vector<uint64_t>& ends, int level, char* out,
                                    size_t cap);

// The candidate filter as the builder runs it: the block starting at bit
// `from` ends at the first magic after its header at which it decodes
// (NextBzip2Magic, then DecodeBzip2Block), at most kBzip2MaxCandidates
// tried. InvalidArgument naming the block's bit if none does.
Result<Bzip2Block> FindBzip2Block(std::string_view src, uint64_t from, int level, char* out,
                                  size_t cap);

}  // namespace shardfs::codec

#endif  // SHARDFS_SRC_CODEC_BZIP2_BLOCK_H_
