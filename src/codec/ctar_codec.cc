#include "src/codec/ctar_codec.h"

#include <isa-l/igzip_lib.h>
#include <lzma.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "src/codec/bzip2_block.h"

namespace shardfs::codec {
namespace {

using index::SeekKind;
using index::SeekPoint;

Status Bad(std::string_view name, uint64_t at, std::string_view what) {
  return Status::InvalidArgument(
      fmt::format("shard {}: compressed data at byte {}: {}", name, at, what));
}

const char* IsalError(int r) {
  switch (r) {
    case ISAL_INVALID_BLOCK:
      return "invalid deflate block";
    case ISAL_INVALID_SYMBOL:
      return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK:
      return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER:
      return "invalid gzip header";
    case ISAL_UNSUPPORTED_METHOD:
      return "unknown compression method";
    case ISAL_INCORRECT_CHECKSUM:
      return "incorrect data check";
    default:
      return "inflate error";
  }
}

// Inflates from a gzip member header (kGzipMember) or from a deflate block
// boundary with its window (kDeflate) until `out` is full. With ISA-L's
// inflater (igzip): about three times zlib's speed, and like zlib it takes
// a preset window and a start inside a byte, which whole-buffer inflaters
// (libdeflate) do not. The index builder finds the points with zlib; both
// read the same standard format.
Status Inflate(std::string_view name, const SeekPoint& p, std::string_view window,
               std::string_view input, std::string* out) {
  auto st = std::make_unique<inflate_state>();  // About 80 KB: not on a FUSE worker's stack.
  isal_inflate_init(st.get());
  const bool raw = p.kind == SeekKind::kDeflate;
  st->crc_flag = raw ? ISAL_DEFLATE : ISAL_GZIP;
  size_t skip = 0;
  if (raw && p.bits > 0) {
    // The point's first bits are the high bits of the byte before.
    if (input.empty()) return Bad(name, p.compressed, "truncated");
    st->read_in = static_cast<unsigned char>(input[0]) >> (8 - p.bits);
    st->read_in_length = p.bits;
    skip = 1;
  }
  if (raw && !window.empty() &&
      isal_inflate_set_dict(st.get(), reinterpret_cast<uint8_t*>(const_cast<char*>(window.data())),
                            static_cast<uint32_t>(window.size())) != COMP_OK) {
    return Bad(name, p.compressed, "bad window");
  }
  const char* const in = input.data() + skip;
  st->next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in));
  st->avail_in = static_cast<uint32_t>(std::min<size_t>(input.size() - skip, UINT32_MAX));
  st->next_out = reinterpret_cast<uint8_t*>(out->data());
  st->avail_out = static_cast<uint32_t>(out->size());
  while (st->avail_out > 0) {
    const uint32_t in_before = st->avail_in, out_before = st->avail_out;
    const int r = isal_inflate(st.get());
    const uint64_t at = p.compressed + (reinterpret_cast<const char*>(st->next_in) - in);
    if (r < 0) return Bad(name, at, fmt::format("deflate: {}", IsalError(r)));
    if (st->block_state == ISAL_BLOCK_FINISH) {
      if (st->avail_out > 0) return Bad(name, at, "the stream ends before the indexed size");
      break;
    }
    if (st->avail_out > 0 &&
        (st->avail_in == 0 || (st->avail_in == in_before && st->avail_out == out_before))) {
      return Bad(name, at, "truncated");
    }
  }
  return Status::Ok();
}

Status Unzstd(std::string_view name, const SeekPoint& p, std::string_view input, std::string* out) {
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!dctx) return Status::IoError("ZSTD_createDCtx failed");
  ZSTD_inBuffer in{input.data(), input.size(), 0};
  ZSTD_outBuffer o{out->data(), out->size(), 0};
  size_t left = 1;  // ZSTD_decompressStream's last result; 0 once the frame ended.
  while (o.pos < o.size) {
    const size_t r = left = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(r)) return Bad(name, p.compressed + in.pos, ZSTD_getErrorName(r));
    if (r == 0 && o.pos < o.size) {
      return Bad(name, p.compressed + in.pos, "the frame ends before the indexed size");
    }
    if (in.pos == in.size && o.pos < o.size) return Bad(name, p.compressed + in.pos, "truncated");
  }
  // A frame that ends here is read to its end, so that its checksum (if it
  // has one) is checked: a corrupt frame is an error, never wrong bytes.
  if (left != 0 && ZSTD_getFrameContentSize(input.data(), input.size()) == out->size()) {
    char spare;
    for (size_t r = 1; r != 0;) {
      ZSTD_outBuffer o2{&spare, 1, 0};
      r = ZSTD_decompressStream(dctx.get(), &o2, &in);
      if (ZSTD_isError(r)) return Bad(name, p.compressed + in.pos, ZSTD_getErrorName(r));
      if (o2.pos > 0) return Bad(name, p.compressed + in.pos, "the frame is longer than indexed");
      if (r != 0 && in.pos == in.size) return Bad(name, p.compressed + in.pos, "truncated");
    }
  }
  return Status::Ok();
}

Status Unxz(std::string_view name, const SeekPoint& p, std::string_view input, std::string* out) {
  if (input.empty()) return Bad(name, p.compressed, "truncated");
  lzma_filter filters[LZMA_FILTERS_MAX + 1];
  lzma_block block{};
  block.version = 1;
  block.check = static_cast<lzma_check>(p.check);
  block.filters = filters;
  block.header_size = lzma_block_header_size_decode(static_cast<uint8_t>(input[0]));
  if (static_cast<uint8_t>(input[0]) == 0 || input.size() < block.header_size) {
    return Bad(name, p.compressed, "not an xz block header");
  }
  if (lzma_block_header_decode(&block, nullptr, reinterpret_cast<const uint8_t*>(input.data())) !=
      LZMA_OK) {
    return Bad(name, p.compressed, "bad xz block header");
  }
  auto free_filters = [&] {
    for (size_t k = 0; filters[k].id != LZMA_VLI_UNKNOWN; ++k) std::free(filters[k].options);
  };
  // lzma_block_decoder takes no memory limit: the filters' own need, checked.
  if (const uint64_t need = lzma_raw_decoder_memusage(filters); need > kXzMemLimit) {
    free_filters();
    return Bad(name, p.compressed,
               fmt::format("the xz block's decoder needs {} MiB of memory (its dictionary), more "
                           "than the limit of {} MiB",
                           need >> 20, kXzMemLimit >> 20));
  }
  lzma_stream strm = LZMA_STREAM_INIT;
  lzma_ret r = lzma_block_decoder(&strm, &block);
  if (r != LZMA_OK) {
    free_filters();
    return Bad(name, p.compressed, "xz block decoder refused the block");
  }
  strm.next_in = reinterpret_cast<const uint8_t*>(input.data()) + block.header_size;
  strm.avail_in = input.size() - block.header_size;
  strm.next_out = reinterpret_cast<uint8_t*>(out->data());
  strm.avail_out = out->size();
  Status s;
  while (strm.avail_out > 0) {
    r = lzma_code(&strm, LZMA_RUN);
    const uint64_t at =
        p.compressed + (strm.next_in - reinterpret_cast<const uint8_t*>(input.data()));
    if (r == LZMA_STREAM_END) {
      if (strm.avail_out > 0) s = Bad(name, at, "the block ends before the indexed size");
      break;
    }
    if (r == LZMA_BUF_ERROR || (r == LZMA_OK && strm.avail_in == 0)) {
      if (strm.avail_in == 0 && strm.avail_out > 0) {
        s = Bad(name, at, "truncated");
        break;
      }
    }
    if (r != LZMA_OK && r != LZMA_BUF_ERROR) {
      s = Bad(name, at, fmt::format("xz error {}", static_cast<int>(r)));
      break;
    }
  }
  lzma_end(&strm);
  free_filters();
  return s;
}

// Decodes the bzip2 block of point `i`: `input` starts at the byte of its
// first bit. Its bits end at the next point's (same stream) or at its
// stream's end-of-stream magic, searched back from the input's end.
Status Unbzip2(std::string_view name, const index::SeekTable& table, size_t i,
               std::string_view input, std::string* out) {
  const SeekPoint& p = table.points[i];
  const int level = p.check & index::kBzip2LevelMask;
  const uint64_t from = p.bits;
  if (input.size() * 8 < from + kBzip2MarkBits || ReadBits(input, from, 48) != kBzip2BlockMagic) {
    return Bad(
        name, p.compressed,
        fmt::format("no bzip2 block magic at bit {} of the byte (truncated or corrupt)", p.bits));
  }
  std::vector<uint64_t> ends;
  if (!(p.check & index::kBzip2LastInStream) && i + 1 < table.points.size()) {
    const SeekPoint& next = table.points[i + 1];
    ends.push_back((next.compressed - p.compressed) * 8 + next.bits);
  } else {
    ends = LastBzip2EndMagics(input, from + kBzip2MarkBits, input.size() * 8, kBzip2MaxCandidates);
  }
  Result<Bzip2Block> b = DecodeFirstValid(input, from, ends, level, out->data(), out->size());
  if (!b.ok()) return Bad(name, p.compressed, b.status().message());
  if (b->decoded != out->size()) {
    return Bad(
        name, p.compressed,
        fmt::format("bzip2 block decodes to {} bytes, the index says {}", b->decoded, out->size()));
  }
  return Status::Ok();
}

}  // namespace

uint64_t IntervalInputStart(const index::SeekTable& table, size_t i) {
  const SeekPoint& p = table.points[i];
  return p.kind == SeekKind::kDeflate && p.bits > 0 && p.compressed > 0 ? p.compressed - 1
                                                                        : p.compressed;
}

uint64_t IntervalInputEnd(const index::SeekTable& table, size_t i, uint64_t file_size) {
  // A deflate point's first byte may hold the end of the interval before.
  if (i + 1 < table.points.size()) {
    return std::min(file_size, table.points[i + 1].compressed + 1);
  }
  const uint64_t from = IntervalInputStart(table, i);
  return from > file_size ? file_size : std::min(file_size, from + kMaxIntervalInputBytes);
}

Status CheckIntervalInput(std::string_view name, const index::SeekTable& table, size_t i,
                          uint64_t file_size) {
  const SeekPoint& p = table.points[i];
  const uint64_t from = IntervalInputStart(table, i);
  const uint64_t to = IntervalInputEnd(table, i, file_size);
  if (from > to || to > file_size) {
    return Status::Corruption(
        fmt::format("shard {}: seek point {} at compressed byte {} lies past the shard's {} bytes",
                    name, i, p.compressed, file_size));
  }
  if (to - from > kMaxIntervalInputBytes) {
    return Status::Corruption(fmt::format(
        "shard {}: seek point {} at compressed byte {}: its interval's compressed bytes run to "
        "byte {}, {} bytes, more than the {} any interval takes (a damaged index)",
        name, i, p.compressed, to, to - from, kMaxIntervalInputBytes));
  }
  return Status::Ok();
}

bool CanDecodePrefix(SeekKind kind) {
  return kind == SeekKind::kGzipMember || kind == SeekKind::kDeflate ||
         kind == SeekKind::kZstdFrame || kind == SeekKind::kXzBlock;
}

Result<std::string> DecodeInterval(std::string_view name, const index::SeekTable& table, size_t i,
                                   std::string_view window, std::string_view input,
                                   uint64_t max_bytes) {
  return DecodeIntervalPrefix(name, table, i, window, input, max_bytes, UINT64_MAX);
}

Result<std::string> DecodeIntervalPrefix(std::string_view name, const index::SeekTable& table,
                                         size_t i, std::string_view window, std::string_view input,
                                         uint64_t max_bytes, uint64_t prefix) {
  if (i >= table.points.size()) {
    return Status::InvalidArgument(fmt::format("shard {}: no seek point {}", name, i));
  }
  const SeekPoint& p = table.points[i];
  const uint64_t want = table.End(i) - p.decoded;
  if (want > max_bytes) {
    return Status::InvalidArgument(fmt::format(
        "shard {}: seek point {} at compressed byte {} decodes to {} bytes, more than the bound "
        "of {} for one random read (a single {} frame or block: re-pack it into frames)",
        name, i, p.compressed, want, max_bytes,
        p.kind == SeekKind::kXzBlock      ? "xz"
        : p.kind == SeekKind::kZstdFrame  ? "zstd"
        : p.kind == SeekKind::kBzip2Block ? "bzip2"
                                          : "gzip"));
  }
  if (prefix < want && !CanDecodePrefix(p.kind)) {
    return Status::InvalidArgument(
        fmt::format("shard {}: seek point {}: a bzip2 block is decoded whole", name, i));
  }
  std::string out(static_cast<size_t>(std::min(want, prefix)), '\0');
  if (out.empty()) return out;
  Status s;
  switch (p.kind) {
    case SeekKind::kGzipMember:
    case SeekKind::kDeflate:
      s = Inflate(name, p, window, input, &out);
      break;
    case SeekKind::kZstdFrame:
      s = Unzstd(name, p, input, &out);
      break;
    case SeekKind::kXzBlock:
      s = Unxz(name, p, input, &out);
      break;
    case SeekKind::kBzip2Block:
      s = Unbzip2(name, table, i, input, &out);
      break;
    default:
      s = Bad(name, p.compressed, "unknown seek point kind");
  }
  if (!s.ok()) return s;
  return out;
}

uint64_t IntervalChecksum(std::string_view decoded) {
  return XXH3_64bits(decoded.data(), decoded.size());
}

Result<std::vector<uint64_t>> IntervalChecksumsOfFile(std::string_view name,
                                                      const index::SeekTable& table, int fd) {
  std::vector<uint64_t> sums;
  sums.reserve(table.points.size());
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Status::IoError("XXH3_createState failed");
  std::string buf(size_t{1} << 20, '\0');
  for (size_t i = 0; i < table.points.size(); ++i) {
    XXH3_64bits_reset(state.get());
    for (uint64_t at = table.points[i].decoded, end = table.End(i); at < end;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - at));
      const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return Status::IoError(fmt::format("shard {}: decoded byte {}: {}", name, at,
                                           n < 0 ? std::strerror(errno) : "ends early"));
      }
      XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(n));
      at += static_cast<uint64_t>(n);
    }
    sums.push_back(XXH3_64bits_digest(state.get()));
  }
  return sums;
}

}  // namespace shardfs::codec
