#include "src/archive/ctar_scanner.h"

#include <fcntl.h>
#include <lzma.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "base/fd.h"
#include "base/io.h"
#include "base/log.h"
#include "index/fingerprint.h"
#include "src/archive/flush_points.h"
#include "src/archive/format_sniff.h"
#include "src/codec/bzip2_block.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::archive {
namespace {

using index::SeekKind;
using index::SeekPoint;

constexpr size_t kWindow = index::kMaxSeekWindow;
constexpr size_t kOutChunk = size_t{1} << 20;
// Warn at build time when one interval is this long: it reads sequentially.
constexpr uint64_t kSequentialWarnBytes = uint64_t{16} << 20;

struct Mapping {
  const char* base = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base && size) ::munmap(const_cast<char*>(base), size);
  }
  Status Map(const std::string& name, int fd, size_t n) {
    size = n;
    if (n == 0) return Status::Ok();
    void* m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      base = nullptr;
      size = 0;
      return Status::FromErrno(errno, fmt::format("shard {}: mmap", name));
    }
    base = static_cast<const char*>(m);
    ::madvise(m, n, MADV_SEQUENTIAL);
    return Status::Ok();
  }
};

// The decoded stream as it is produced: written to a temporary file, the
// last 32 KiB kept for the windows, points recorded.
class DecodedSink {
 public:
  DecodedSink(const std::string& name, CompressedScan* out, uint64_t compressed_size,
              uint64_t max_decoded)
      : name_(name), out_(out), compressed_size_(compressed_size), max_decoded_(max_decoded) {
    buf_.resize(kWindow + kOutChunk);
  }

  Status Open() {
    const char* dir = std::getenv("TMPDIR");
    std::string d = dir && *dir ? dir : "/tmp";
    fd_.reset(::open(d.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (!fd_.valid()) {
      return Status::FromErrno(errno, fmt::format("shard {}: temporary file in {}", name_, d));
    }
    return Status::Ok();
  }

  // Room for decoded bytes: [out(), out() + room()).
  unsigned char* out() { return buf_.data() + used_; }
  size_t room() const { return buf_.size() - used_; }
  // `n` bytes were decoded into out().
  Status Produced(size_t n) {
    used_ += n;
    if (decoded() > max_decoded_) {
      return Status::InvalidArgument(
          fmt::format("shard {}: its {} compressed bytes decode to more than {}: refused as a "
                      "compression bomb",
                      name_, compressed_size_, max_decoded_));
    }
    if (used_ == buf_.size()) return Flush();
    return Status::Ok();
  }
  uint64_t decoded() const { return written_ + (used_ - keep_); }

  // Adds a point at the current decoded offset; one already there (after an
  // empty interval) is replaced.
  void AddPoint(SeekPoint p, bool with_window) {
    p.decoded = decoded();
    std::string window;
    if (with_window) {
      const size_t w = std::min<size_t>(used_, kWindow);
      window.assign(reinterpret_cast<const char*>(buf_.data() + used_ - w), w);
      p.window = static_cast<uint32_t>(w);
    }
    auto& pts = out_->table.points;
    if (!pts.empty() && pts.back().decoded == p.decoded) {
      pts.back() = p;
      out_->windows.back() = std::move(window);
    } else {
      pts.push_back(p);
      out_->windows.push_back(std::move(window));
    }
  }
  uint64_t since_point() const {
    return out_->table.points.empty() ? decoded() : decoded() - out_->table.points.back().decoded;
  }

  Status Flush() {
    if (!WriteFully(fd_.get(), buf_.data() + keep_, used_ - keep_)) {
      return Status::FromErrno(errno, fmt::format("shard {}: writing the decoded stream", name_));
    }
    written_ += used_ - keep_;
    const size_t k = std::min(used_, kWindow);
    std::memmove(buf_.data(), buf_.data() + used_ - k, k);
    keep_ = used_ = k;
    return Status::Ok();
  }

  Status Finish() {
    SHARDFS_RETURN_IF_ERROR(Flush());
    out_->table.decoded_size = written_;
    auto& pts = out_->table.points;
    if (!pts.empty() && pts.back().decoded == written_) {  // An empty last interval.
      pts.pop_back();
      out_->windows.pop_back();
    }
    out_->largest_interval = 0;
    for (size_t i = 0; i < pts.size(); ++i) {
      out_->largest_interval =
          std::max(out_->largest_interval, out_->table.End(i) - pts[i].decoded);
    }
    return Status::Ok();
  }
  int fd() const { return fd_.get(); }

 private:
  const std::string& name_;
  CompressedScan* out_;
  const uint64_t compressed_size_;
  const uint64_t max_decoded_;
  UniqueFd fd_;
  std::vector<unsigned char> buf_;
  size_t keep_ = 0;  // Bytes at the front of buf_ already written (the window).
  size_t used_ = 0;
  uint64_t written_ = 0;
};

Status Bad(const std::string& name, uint64_t at, std::string_view what) {
  return Status::InvalidArgument(
      fmt::format("shard {}: at compressed byte {}: {}", name, at, what));
}

bool OnlyZeros(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

Status DecodeGzip(const std::string& name, const char* data, size_t size, uint64_t spacing,
                  DecodedSink* sink) {
  z_stream strm{};
  if (inflateInit2(&strm, 31) != Z_OK) return Status::IoError("inflateInit2 failed");
  std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&strm, &inflateEnd);
  size_t pos = 0;
  bool flushes = false;  // Full-flush candidates seen.
  while (pos < size) {
    // gzip ignores zeros after the last member (tape padding); so do we.
    if (pos > 0 && OnlyZeros(data + pos, size - pos)) break;
    if (size - pos < 2 || static_cast<uint8_t>(data[pos]) != 0x1f ||
        static_cast<uint8_t>(data[pos + 1]) != 0x8b) {
      return Bad(name, pos, "not a gzip member (trailing garbage?)");
    }
    SeekPoint member;
    member.kind = SeekKind::kGzipMember;
    member.compressed = pos;
    sink->AddPoint(member, false);
    if (inflateReset2(&strm, 31) != Z_OK) return Status::IoError("inflateReset2 failed");
    strm.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data + pos));
    strm.avail_in = static_cast<uInt>(std::min<size_t>(size - pos, 1u << 30));
    for (;;) {
      if (strm.avail_in == 0) {
        const size_t at = reinterpret_cast<const char*>(strm.next_in) - data;
        if (at >= size) return Bad(name, at, "truncated gzip stream");
        strm.avail_in = static_cast<uInt>(std::min<size_t>(size - at, 1u << 30));
      }
      unsigned char* before = sink->out();
      strm.next_out = before;
      strm.avail_out = static_cast<uInt>(sink->room());
      const int r = inflate(&strm, Z_BLOCK);
      const size_t at = reinterpret_cast<const char*>(strm.next_in) - data;
      if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
        return Bad(name, at, fmt::format("gzip: {}", strm.msg ? strm.msg : "data error"));
      }
      SHARDFS_RETURN_IF_ERROR(sink->Produced(strm.next_out - before));
      if (r == Z_STREAM_END) {
        pos = at;
        break;
      }
      // At a block boundary (not after the last block): a point, with the
      // window, once `spacing` bytes were decoded since the last. In a
      // stream with full-flush candidates (src/archive/flush_points.h), the point
      // waits for one (up to twice the spacing), whose window can go.
      const bool boundary = (strm.data_type & 128) && !(strm.data_type & 64);
      const bool flush = boundary && IsFlushCandidate(data, at, strm.data_type & 7);
      flushes = flushes || flush;
      const uint64_t since = sink->since_point();
      if (boundary && since >= spacing && (flush || !flushes || since >= 2 * spacing)) {
        SeekPoint p;
        p.kind = SeekKind::kDeflate;
        p.compressed = at;
        p.bits = static_cast<uint8_t>(strm.data_type & 7);
        sink->AddPoint(p, true);
      }
    }
  }
  return Status::Ok();
}

bool SkippableFrame(const char* p, size_t n) {
  return n >= 4 && (static_cast<uint8_t>(p[0]) & 0xf0) == 0x50 &&
         std::string_view(p + 1, 3) == "\x2a\x4d\x18";
}

Status DecodeZstd(const std::string& name, const char* data, size_t size, DecodedSink* sink) {
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!dctx) return Status::IoError("ZSTD_createDCtx failed");
  size_t pos = 0;
  while (pos < size) {
    const size_t frame = ZSTD_findFrameCompressedSize(data + pos, size - pos);
    if (ZSTD_isError(frame)) {
      return Bad(name, pos, fmt::format("zstd frame: {}", ZSTD_getErrorName(frame)));
    }
    if (SkippableFrame(data + pos, size - pos)) {
      pos += frame;
      continue;
    }
    SeekPoint p;
    p.kind = SeekKind::kZstdFrame;
    p.compressed = pos;
    sink->AddPoint(p, false);
    ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_only);
    ZSTD_inBuffer in{data + pos, frame, 0};
    size_t r = 1;
    while (r != 0) {
      ZSTD_outBuffer o{sink->out(), sink->room(), 0};
      r = ZSTD_decompressStream(dctx.get(), &o, &in);
      if (ZSTD_isError(r)) return Bad(name, pos + in.pos, ZSTD_getErrorName(r));
      SHARDFS_RETURN_IF_ERROR(sink->Produced(o.pos));
      if (r != 0 && in.pos == in.size && o.pos < o.size) {
        return Bad(name, pos + in.pos, "truncated zstd frame");
      }
    }
    pos += frame;
  }
  return Status::Ok();
}

// The xz blocks of `data`, from the index at the end of each stream: a seek
// point per non-empty block. InvalidArgument naming `name` if the index is
// corrupt or truncated.
Result<std::vector<SeekPoint>> XzBlocks(const std::string& name, const char* data, size_t size) {
  lzma_stream info = LZMA_STREAM_INIT;
  lzma_index* idx = nullptr;
  // No memory limit here: the index takes memory in proportion to its
  // records, each of which stands for a block of at least 8 bytes of the
  // file, so it stays within a small multiple of the file's size.
  if (lzma_file_info_decoder(&info, &idx, UINT64_MAX, size) != LZMA_OK) {
    return Status::IoError("lzma_file_info_decoder failed");
  }
  info.next_in = reinterpret_cast<const uint8_t*>(data);
  info.avail_in = size;
  lzma_ret r;
  for (;;) {
    r = lzma_code(&info, LZMA_RUN);
    if (r == LZMA_SEEK_NEEDED) {
      if (info.seek_pos > size) break;
      info.next_in = reinterpret_cast<const uint8_t*>(data) + info.seek_pos;
      info.avail_in = size - info.seek_pos;
      continue;
    }
    if (r != LZMA_OK || info.avail_in == 0) break;
  }
  lzma_end(&info);
  if (r != LZMA_STREAM_END) {
    if (idx) lzma_index_end(idx, nullptr);
    return Bad(name, info.seek_pos,
               fmt::format("xz: unreadable index (error {}): corrupt or "
                           "truncated",
                           static_cast<int>(r)));
  }
  std::vector<SeekPoint> blocks;
  lzma_index_iter it;
  lzma_index_iter_init(&it, idx);
  while (!lzma_index_iter_next(&it, LZMA_INDEX_ITER_NONEMPTY_BLOCK)) {
    SeekPoint p;
    p.kind = SeekKind::kXzBlock;
    p.compressed = it.block.compressed_file_offset;
    p.decoded = it.block.uncompressed_file_offset;
    if (it.stream.flags) p.check = static_cast<uint8_t>(it.stream.flags->check);
    blocks.push_back(p);
  }
  lzma_index_end(idx, nullptr);
  return blocks;
}

Status DecodeXz(const std::string& name, const char* data, size_t size, DecodedSink* sink) {
  SHARDFS_ASSIGN_OR_RETURN(std::vector<SeekPoint> blocks, XzBlocks(name, data, size));
  lzma_ret r;
  // The decoded stream, in one pass.
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, codec::kXzMemLimit, LZMA_CONCATENATED) != LZMA_OK) {
    return Status::IoError("lzma_stream_decoder failed");
  }
  std::unique_ptr<lzma_stream, decltype(&lzma_end)> guard(&strm, &lzma_end);
  strm.next_in = reinterpret_cast<const uint8_t*>(data);
  strm.avail_in = size;
  size_t next_block = 0;
  for (;;) {
    while (next_block < blocks.size() && blocks[next_block].decoded <= sink->decoded()) {
      if (blocks[next_block].decoded == sink->decoded()) sink->AddPoint(blocks[next_block], false);
      ++next_block;
    }
    unsigned char* before = sink->out();
    // Stop at the next block's start, so that its point is recorded there.
    size_t room = sink->room();
    if (next_block < blocks.size()) {
      room = std::min<uint64_t>(room, blocks[next_block].decoded - sink->decoded());
    }
    strm.next_out = before;
    strm.avail_out = room;
    r = lzma_code(&strm, LZMA_FINISH);
    SHARDFS_RETURN_IF_ERROR(sink->Produced(strm.next_out - before));
    if (r == LZMA_STREAM_END) break;
    if (r == LZMA_MEMLIMIT_ERROR) {
      return Bad(
          name, strm.next_in - reinterpret_cast<const uint8_t*>(data),
          fmt::format("xz: decoding needs {} MiB of memory (the dictionary its header "
                      "declares), more than the limit of {} MiB: refused",
                      (lzma_memusage(&strm) + (1 << 20) - 1) >> 20, codec::kXzMemLimit >> 20));
    }
    if (r != LZMA_OK) {
      return Bad(name, strm.next_in - reinterpret_cast<const uint8_t*>(data),
                 fmt::format("xz: data error {}", static_cast<int>(r)));
    }
  }
  if (next_block < blocks.size()) {
    return Bad(name, size, "xz: the index lists more data than the stream holds");
  }
  return Status::Ok();
}

// bzip2: block by block (src/codec/bzip2_block.h), a point per block; each
// stream's combined CRC is checked against its blocks' CRCs.
Status DecodeBzip2(const std::string& name, const char* data, size_t size, DecodedSink* sink,
                   CompressedScan* out) {
  const std::string_view src(data, size);
  const uint64_t total = uint64_t{size} * 8;
  std::unique_ptr<char[]> block;
  size_t cap = 0;
  size_t pos = 0;
  while (pos < size) {
    if (size - pos < 4 || src.substr(pos, 3) != "BZh" || data[pos + 3] < '1' ||
        data[pos + 3] > '9') {
      return Bad(name, pos, "not a bzip2 stream header (trailing garbage?)");
    }
    const int level = data[pos + 3] - '0';
    if (codec::Bzip2MaxBlockBytes(level) > cap) {
      cap = static_cast<size_t>(codec::Bzip2MaxBlockBytes(level));
      block.reset(new char[cap]);
    }
    uint64_t bit = (uint64_t{pos} + 4) * 8;
    uint32_t combined = 0;
    bool any = false;
    for (;;) {
      if (bit + codec::kBzip2MarkBits > total) return Bad(name, bit / 8, "truncated bzip2 stream");
      const uint64_t magic = codec::ReadBits(src, bit, 48);
      if (magic == codec::kBzip2EndMagic) {
        const auto stored = static_cast<uint32_t>(codec::ReadBits(src, bit + 48, 32));
        if (stored != combined) {
          return Bad(name, bit / 8,
                     fmt::format("bzip2 stream CRC {:08x}, its blocks' combined CRC {:08x}", stored,
                                 combined));
        }
        if (any) out->table.points.back().check |= index::kBzip2LastInStream;
        pos = static_cast<size_t>((bit + codec::kBzip2MarkBits + 7) / 8);
        break;
      }
      if (magic != codec::kBzip2BlockMagic) {
        return Bad(
            name, bit / 8,
            fmt::format("no bzip2 block or end-of-stream magic at bit {} of the byte", bit % 8));
      }
      Result<codec::Bzip2Block> b = codec::FindBzip2Block(src, bit, level, block.get(), cap);
      if (!b.ok()) return Bad(name, bit / 8, b.status().message());
      SeekPoint p;
      p.kind = SeekKind::kBzip2Block;
      p.compressed = bit / 8;
      p.bits = static_cast<uint8_t>(bit % 8);
      p.check = static_cast<uint8_t>(level);
      sink->AddPoint(p, false);
      for (size_t done = 0; done < b->decoded;) {
        const size_t n = std::min(sink->room(), b->decoded - done);
        std::memcpy(sink->out(), block.get() + done, n);
        SHARDFS_RETURN_IF_ERROR(sink->Produced(n));
        done += n;
      }
      combined = ((combined << 1) | (combined >> 31)) ^ b->crc;
      any = true;
      bit = b->end;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<index::Codec> DetectCodecFd(const std::string& name, int fd) {
  char head[kCodecMagicBytes] = {};
  ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n < 0) return Status::FromErrno(errno, fmt::format("shard {}", name));
  return DetectCodec(std::string_view(head, static_cast<size_t>(n)));
}

DecodedBytes::~DecodedBytes() {
  if (data_ && size_) ::munmap(const_cast<char*>(data_), size_);
}

Status DecodeCompressedTar(const std::string& name, const char* data, size_t size,
                           index::Codec codec, uint64_t spacing, CompressedScan* out,
                           DecodedBytes* decoded, uint64_t max_decoded) {
  *out = CompressedScan{};
  out->codec = codec;
  DecodedSink sink(name, out, size, max_decoded);
  SHARDFS_RETURN_IF_ERROR(sink.Open());
  switch (codec) {
    case index::Codec::kGzip:
      SHARDFS_RETURN_IF_ERROR(DecodeGzip(name, data, size, std::max<uint64_t>(spacing, 1), &sink));
      break;
    case index::Codec::kZstd:
      SHARDFS_RETURN_IF_ERROR(DecodeZstd(name, data, size, &sink));
      break;
    case index::Codec::kXz:
      SHARDFS_RETURN_IF_ERROR(DecodeXz(name, data, size, &sink));
      break;
    case index::Codec::kBzip2:
      SHARDFS_RETURN_IF_ERROR(DecodeBzip2(name, data, size, &sink, out));
      break;
    default:
      return Status::InvalidArgument(fmt::format("shard {}: not a compressed stream", name));
  }
  SHARDFS_RETURN_IF_ERROR(sink.Finish());
  if (out->table.decoded_size == 0) {
    return Status::InvalidArgument(
        fmt::format("shard {}: the {} stream decodes to nothing, not a tar archive", name,
                    index::CodecName(codec)));
  }
  // A gzip interval is --seek-spacing and a block or two, unless one
  // deflate block is longer than a read may decode (no boundary in it).
  if (codec == index::Codec::kGzip && out->largest_interval > codec::kMaxIntervalBytes) {
    log::Warning(
        "shard {}: gzip stream with {} decoded bytes between two seek points (its deflate "
        "blocks are too long to place one closer): more than the {} MiB a mount decodes for "
        "one read, so reads of the files there fail (EIO). Re-compress it (gzip, pigz)",
        name, out->largest_interval, codec::kMaxIntervalBytes >> 20);
  }
  // (A bzip2 block decodes to at most Bzip2MaxBlockBytes: never sequential.)
  if (codec != index::Codec::kGzip && codec != index::Codec::kBzip2 &&
      (out->table.points.size() == 1 || out->largest_interval > kSequentialWarnBytes)) {
    log::Warning(
        "shard {}: {} stream with {} {} ({} decoded bytes in one): it can only be read "
        "sequentially; a mount decodes at most {} MiB for a read and refuses (EIO) files in a "
        "longer one. Re-pack it into frames: {}",
        name, index::CodecName(codec), out->table.points.size(),
        codec == index::Codec::kXz ? "block(s)" : "frame(s)", out->largest_interval,
        codec::kMaxIntervalBytes >> 20,
        codec == index::Codec::kXz ? "`xz -d | xz -T0 --block-size=4MiB`"
                                   : "`zstd -d` then `pzstd`, or `zstd -d | zstd --adapt` with "
                                     "a tool that cuts frames (t2sz)");
  }
  Mapping mapped;
  SHARDFS_RETURN_IF_ERROR(mapped.Map(name, sink.fd(), out->table.decoded_size));
  if (codec == index::Codec::kGzip) {
    DropVerifiedWindows(name, data, size, mapped.base, &out->table, &out->windows);
  }
  SHARDFS_ASSIGN_OR_RETURN(out->checksums,
                           codec::IntervalChecksumsOfFile(name, out->table, sink.fd()));
  // The mapping outlives the descriptor; DecodedBytes unmaps it.
  decoded->Adopt(std::exchange(mapped.base, nullptr), std::exchange(mapped.size, 0));
  return Status::Ok();
}

Status ScanCompressedTarFd(const std::string& name, int fd, index::Codec codec, uint64_t spacing,
                           const ScanOptions& options,
                           const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info,
                           CompressedScan* out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, fmt::format("shard {}", name));
  *info = ShardInfo{};
  *out = CompressedScan{};
  out->codec = codec;
  info->size = static_cast<uint64_t>(st.st_size);
  info->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  Result<uint64_t> fp = index::ShardFingerprint(fd, info->size);
  if (!fp.ok()) return fp.status().WithContext(fmt::format("shard {}", name));
  info->fingerprint = *fp;

  Mapping in;
  SHARDFS_RETURN_IF_ERROR(in.Map(name, fd, info->size));
  DecodedBytes decoded;
  SHARDFS_RETURN_IF_ERROR(
      DecodeCompressedTar(name, in.base, in.size, codec, spacing, out, &decoded));
  // A sparse member's extents would be ranges of the decoded stream, which
  // the mount's sparse path does not read: refused.
  auto not_sparse = [&](ScannedMember&& m) -> Status {
    if (m.sparse) {
      return Status::NotSupported(fmt::format(
          "shard {}: member '{}' at decoded byte {}: a sparse member in a compressed tar is not "
          "supported",
          name, m.path, m.header_offset));
    }
    return on_member(std::move(m));
  };
  return ScanTarBytes(name, decoded.data(), decoded.size(), options, not_sparse, info);
}

std::vector<std::pair<std::string, std::string>> SeekKeys(index::ShardId id,
                                                          const CompressedScan& scan) {
  std::vector<std::pair<std::string, std::string>> kvs;
  std::string table;
  index::EncodeSeekTable(scan.table, &table);
  kvs.emplace_back(index::EncodeSeekTableKey(id), std::move(table));
  for (size_t i = 0; i < scan.windows.size(); ++i) {
    if (!scan.windows[i].empty()) {
      kvs.emplace_back(index::EncodeSeekWindowKey(id, static_cast<uint32_t>(i)), scan.windows[i]);
    }
  }
  if (!scan.checksums.empty()) {
    kvs.emplace_back(index::EncodeSeekSumsKey(id), index::EncodeSeekSums(scan.checksums));
  }
  return kvs;
}

}  // namespace shardfs::archive
