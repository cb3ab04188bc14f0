#include "src/codec/bzip2_block.h"

#include <bzlib.h>

#include <algorithm>
#include <memory>

namespace shardfs::codec {
namespace {

constexpr uint64_t kMagicMask = (uint64_t{1} << 48) - 1;

struct Bz2Decoder {
  bz_stream s{};
  bool live = false;
  ~Bz2Decoder() {
    if (live) BZ2_bzDecompressEnd(&s);
  }
};

}  // namespace

uint64_t Bzip2MaxBlockBytes(int level) {
  return (uint64_t{100000} * static_cast<uint64_t>(level) + 4) / 5 * 259;
}

uint64_t ReadBits(std::string_view data, uint64_t bit, int n) {
  const uint64_t byte = bit / 8;
  uint64_t w = 0;
  for (uint64_t i = 0; i < 8; ++i) {
    w <<= 8;
    if (byte + i < data.size()) w |= static_cast<uint8_t>(data[byte + i]);
  }
  return (w << (bit % 8)) >> (64 - n);
}

void BitWriter::Put(uint64_t v, int n) {
  acc_ = (acc_ << n) | (v & ((uint64_t{1} << n) - 1));
  acc_bits_ += n;
  bits_ += static_cast<uint64_t>(n);
  while (acc_bits_ >= 8) {
    acc_bits_ -= 8;
    out_.push_back(static_cast<char>((acc_ >> acc_bits_) & 0xff));
  }
  acc_ &= (uint64_t{1} << acc_bits_) - 1;
}

void BitWriter::CopyBits(std::string_view src, uint64_t from, uint64_t to) {
  out_.reserve(out_.size() + (to - from) / 8 + 1);
  while (from < to) {
    const int n = static_cast<int>(std::min<uint64_t>(to - from, 48));
    Put(ReadBits(src, from, n), n);
    from += static_cast<uint64_t>(n);
  }
}

std::string BitWriter::Finish() {
  if (acc_bits_ > 0) Put(0, 8 - acc_bits_);
  return std::move(out_);
}

std::string OneBlockStream(std::string_view src, uint64_t from, uint64_t to, int level) {
  BitWriter w;
  for (char c : {'B', 'Z', 'h'}) w.Put(static_cast<uint8_t>(c), 8);
  w.Put(static_cast<uint64_t>('0' + level), 8);
  w.CopyBits(src, from, to);
  w.Put(kBzip2EndMagic, 48);
  w.Put(ReadBits(src, from + 48, 32), 32);  // Combined CRC = the block's CRC.
  return w.Finish();
}

Result<size_t> DecodeBzip2Block(std::string_view src, uint64_t from, uint64_t to, int level,
                                char* out, size_t cap) {
  if (level < 1 || level > 9 || from + kBzip2MarkBits > to || to > src.size() * 8) {
    return Status::InvalidArgument(
        fmt::format("bzip2 block at bit {}: no block in bits [{}, {}) of {} bytes (level {})", from,
                    from, to, src.size(), level));
  }
  std::string stream = OneBlockStream(src, from, to, level);
  Bz2Decoder d;
  if (BZ2_bzDecompressInit(&d.s, 0, 0) != BZ_OK) {
    return Status::IoError("BZ2_bzDecompressInit failed");
  }
  d.live = true;
  d.s.next_in = stream.data();
  d.s.avail_in = static_cast<unsigned>(stream.size());
  d.s.next_out = out;
  d.s.avail_out = static_cast<unsigned>(std::min<size_t>(cap, UINT32_MAX));
  auto data_error = [&](int r) {
    return Status::InvalidArgument(
        fmt::format("bzip2 block at bit {}: {} (corrupt data or CRC mismatch)", from,
                    r == BZ_DATA_ERROR_MAGIC ? "bad magic" : "data error"));
  };
  char probe;
  for (;;) {
    const int r = BZ2_bzDecompress(&d.s);
    if (r == BZ_STREAM_END) {
      if (d.s.next_out == &probe + 1) {
        return Status::InvalidArgument(
            fmt::format("bzip2 block at bit {}: decodes to more than {} bytes", from, cap));
      }
      break;
    }
    if (r != BZ_OK) return data_error(r);
    if (d.s.avail_out == 0) {
      // Full: the block may end right here, or decode to more than cap. One
      // more byte of room tells (the CRCs are checked at the block's end).
      if (d.s.next_out == &probe + 1) {
        return Status::InvalidArgument(
            fmt::format("bzip2 block at bit {}: decodes to more than {} bytes", from, cap));
      }
      d.s.next_out = &probe;
      d.s.avail_out = 1;
      continue;
    }
    if (d.s.avail_in == 0) {
      return Status::InvalidArgument(
          fmt::format("bzip2 block at bit {}: its bits end before the block does", from));
    }
  }
  const uint64_t total = (static_cast<uint64_t>(d.s.total_out_hi32) << 32) | d.s.total_out_lo32;
  if (total > cap) {
    return Status::InvalidArgument(
        fmt::format("bzip2 block at bit {}: decodes to more than {} bytes", from, cap));
  }
  if (d.s.avail_in != 0) {
    return Status::InvalidArgument(
        fmt::format("bzip2 block at bit {}: the block ends before its bits do", from));
  }
  return static_cast<size_t>(total);
}

uint64_t NextBzip2Magic(std::string_view src, uint64_t from, uint64_t to) {
  const uint64_t none = to;
  const uint64_t total = src.size() * 8;
  if (total < 48) return none;
  to = std::min(to, total - 47);  // A magic must fit.
  if (from >= to) return none;
  // A 64-bit window of bytes [j, j + 8): the magic at bit s of byte j is
  // window bits 63 - s .. 16 - s.
  uint64_t j = from / 8;
  uint64_t w = 0;
  for (uint64_t i = 0; i < 8; ++i) {
    w = (w << 8) | (j + i < src.size() ? static_cast<uint8_t>(src[j + i]) : 0);
  }
  for (;; ++j) {
    for (int s = 0; s < 8; ++s) {
      const uint64_t p = j * 8 + static_cast<uint64_t>(s);
      if (p < from) continue;
      if (p >= to) return none;
      const uint64_t v = (w >> (16 - s)) & kMagicMask;
      if (v == kBzip2BlockMagic || v == kBzip2EndMagic) return p;
    }
    w = (w << 8) | (j + 8 < src.size() ? static_cast<uint8_t>(src[j + 8]) : 0);
  }
}

std::vector<uint64_t> LastBzip2EndMagics(std::string_view src, uint64_t from, uint64_t before,
                                         size_t max) {
  std::vector<uint64_t> found;
  const uint64_t total = src.size() * 8;
  if (total < 48) return found;
  before = std::min(before, total - 47);
  for (uint64_t p = before; p > from && found.size() < max;) {
    --p;
    if (ReadBits(src, p, 48) == kBzip2EndMagic) found.push_back(p);
  }
  return found;
}

Result<Bzip2Block> DecodeFirstValid(std::string_view src, uint64_t from,
                                    const std::vector<uint64_t>& ends, int level, char* out,
                                    size_t cap) {
  Status last = Status::InvalidArgument(
      fmt::format("bzip2 block at bit {}: no block or end-of-stream magic after it "
                  "(truncated?)",
                  from));
  for (uint64_t end : ends) {
    Result<size_t> n = DecodeBzip2Block(src, from, end, level, out, cap);
    if (n.ok()) {
      return Bzip2Block{end, *n, static_cast<uint32_t>(ReadBits(src, from + 48, 32))};
    }
    last = n.status();
  }
  return last;
}

Result<Bzip2Block> FindBzip2Block(std::string_view src, uint64_t from, int level, char* out,
                                  size_t cap) {
  const uint64_t total = src.size() * 8;
  Status last = Status::InvalidArgument(
      fmt::format("bzip2 block at bit {}: no block or end-of-stream magic after it "
                  "(truncated?)",
                  from));
  uint64_t c = from + kBzip2MarkBits;
  for (size_t tries = 0; tries < kBzip2MaxCandidates; ++tries, ++c) {
    c = NextBzip2Magic(src, c, total);
    if (c >= total) break;
    Result<size_t> n = DecodeBzip2Block(src, from, c, level, out, cap);
    if (n.ok()) return Bzip2Block{c, *n, static_cast<uint32_t>(ReadBits(src, from + 48, 32))};
    last = n.status();
  }
  return last;
}

}  // namespace shardfs::codec
