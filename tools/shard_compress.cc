#include "tools/shard_compress.h"

#include <fmt/format.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "base/io.h"
#include "tools/ctar_codec.h"

namespace shardfs::tools {
namespace {

using index::Codec;
using index::SeekKind;
using index::SeekPoint;

constexpr size_t kChunk = size_t{1} << 20;
constexpr uint32_t kSkippableSeekTableMagic = 0x184D2A5E;
constexpr uint32_t kSeekableMagic = 0x8F92EAB1;
constexpr uint8_t kSeekTableChecksums = 0x80;

void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Compressed bytes on their way to the output file, counted.
class Output {
 public:
  Output(const std::string& name, int fd) : name_(name), fd_(fd) { buf_.reserve(kChunk); }

  uint64_t offset() const { return written_ + buf_.size(); }
  std::string& buf() { return buf_; }

  // Writes what is buffered once there is a chunk of it (or `force`).
  Status Drain(bool force) {
    if (buf_.empty() || (!force && buf_.size() < kChunk)) return Status::Ok();
    if (!WriteFully(fd_, buf_.data(), buf_.size())) {
      return Status::FromErrno(errno, fmt::format("write {}", name_));
    }
    written_ += buf_.size();
    buf_.clear();
    return Status::Ok();
  }

 private:
  const std::string& name_;
  const int fd_;
  std::string buf_;
  uint64_t written_ = 0;
};

// Reads the tar group by group, in chunks.
class GroupReader {
 public:
  GroupReader(const std::string& name, int fd) : name_(name), fd_(fd), chunk_(new char[kChunk]) {}

  // Calls fn(data, len, last) over bytes [from, to).
  template <typename Fn>
  Status Each(uint64_t from, uint64_t to, Fn fn) {
    if (from == to) return fn(chunk_.get(), 0, true);
    for (uint64_t pos = from; pos < to;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, to - pos));
      if (Status s = PreadExact(fd_, chunk_.get(), n, pos); !s.ok()) {
        return s.WithContext(fmt::format("read the tar of {}", name_));
      }
      pos += n;
      SHARDFS_RETURN_IF_ERROR(fn(chunk_.get(), n, pos == to));
    }
    return Status::Ok();
  }

 private:
  const std::string& name_;
  const int fd_;
  std::unique_ptr<char[]> chunk_;
};

Status CompressZstd(const std::string& name, GroupReader* in, uint64_t tar_size,
                    const std::vector<uint64_t>& starts, int level, Output* out,
                    index::SeekTable* table) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  if (!cctx) return Status::IoError("ZSTD_createCCtx failed");
  auto check = [&](size_t r) {
    return ZSTD_isError(r)
               ? Status::IoError(fmt::format("{}: zstd: {}", name, ZSTD_getErrorName(r)))
               : Status::Ok();
  };
  SHARDFS_RETURN_IF_ERROR(
      check(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level)));
  SHARDFS_RETURN_IF_ERROR(check(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1)));
  SHARDFS_RETURN_IF_ERROR(check(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 1)));
  std::string seek_entries;
  const size_t out_room = ZSTD_CStreamOutSize();
  for (size_t g = 0; g < starts.size(); ++g) {
    const uint64_t from = starts[g];
    const uint64_t to = g + 1 < starts.size() ? starts[g + 1] : tar_size;
    SeekPoint p;
    p.kind = SeekKind::kZstdFrame;
    p.decoded = from;
    p.compressed = out->offset();
    table->points.push_back(p);
    SHARDFS_RETURN_IF_ERROR(check(ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_only)));
    SHARDFS_RETURN_IF_ERROR(check(ZSTD_CCtx_setPledgedSrcSize(cctx.get(), to - from)));
    XXH64_state_t* h = XXH64_createState();
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> hold(h, &XXH64_freeState);
    XXH64_reset(h, 0);
    SHARDFS_RETURN_IF_ERROR(in->Each(from, to, [&](const char* data, size_t n, bool last) {
      XXH64_update(h, data, n);
      ZSTD_inBuffer ib{data, n, 0};
      const ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
      for (;;) {
        std::string& b = out->buf();
        const size_t at = b.size();
        b.resize(at + out_room);
        ZSTD_outBuffer ob{b.data() + at, out_room, 0};
        const size_t r = ZSTD_compressStream2(cctx.get(), &ob, &ib, mode);
        b.resize(at + ob.pos);
        SHARDFS_RETURN_IF_ERROR(check(r));
        SHARDFS_RETURN_IF_ERROR(out->Drain(false));
        if (last ? r == 0 : ib.pos == ib.size) break;
      }
      return Status::Ok();
    }));
    PutLe32(&seek_entries, static_cast<uint32_t>(out->offset() - p.compressed));
    PutLe32(&seek_entries, static_cast<uint32_t>(to - from));
    PutLe32(&seek_entries, static_cast<uint32_t>(XXH64_digest(h) & 0xffffffffu));
  }
  // The seekable format's seek table, a skippable frame.
  std::string& b = out->buf();
  PutLe32(&b, kSkippableSeekTableMagic);
  PutLe32(&b, static_cast<uint32_t>(seek_entries.size() + 9));
  b += seek_entries;
  PutLe32(&b, static_cast<uint32_t>(starts.size()));
  b.push_back(static_cast<char>(kSeekTableChecksums));
  PutLe32(&b, kSeekableMagic);
  return Status::Ok();
}

Status CompressGzip(const std::string& name, GroupReader* in, uint64_t tar_size,
                    const std::vector<uint64_t>& starts, int level, Output* out,
                    index::SeekTable* table) {
  z_stream strm{};
  if (deflateInit2(&strm, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Status::IoError("deflateInit2 failed");
  }
  std::unique_ptr<z_stream, decltype(&deflateEnd)> guard(&strm, &deflateEnd);
  const size_t out_room = 256 << 10;
  for (size_t g = 0; g < starts.size(); ++g) {
    const uint64_t from = starts[g];
    const uint64_t to = g + 1 < starts.size() ? starts[g + 1] : tar_size;
    const bool final_group = g + 1 == starts.size();
    SeekPoint p;
    p.decoded = from;
    p.compressed = g == 0 ? 0 : out->offset();
    p.kind = g == 0 ? SeekKind::kGzipMember : SeekKind::kDeflate;
    table->points.push_back(p);
    SHARDFS_RETURN_IF_ERROR(in->Each(from, to, [&](const char* data, size_t n, bool last) {
      strm.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
      strm.avail_in = static_cast<uInt>(n);
      const int flush = !last ? Z_NO_FLUSH : final_group ? Z_FINISH : Z_FULL_FLUSH;
      for (;;) {
        std::string& b = out->buf();
        const size_t at = b.size();
        b.resize(at + out_room);
        strm.next_out = reinterpret_cast<Bytef*>(b.data() + at);
        strm.avail_out = static_cast<uInt>(out_room);
        const int r = deflate(&strm, flush);
        b.resize(at + out_room - strm.avail_out);
        if (r == Z_STREAM_ERROR) return Status::IoError(fmt::format("{}: deflate failed", name));
        SHARDFS_RETURN_IF_ERROR(out->Drain(false));
        // Done when the input is used and, flushing, the output had room.
        if (flush == Z_FINISH ? r == Z_STREAM_END : strm.avail_in == 0 && strm.avail_out > 0) {
          break;
        }
      }
      return Status::Ok();
    }));
  }
  return Status::Ok();
}

}  // namespace

int DefaultCompressLevel(Codec codec) {
  return codec == Codec::kGzip ? kDefaultGzipLevel : kDefaultZstdLevel;
}

Status CheckGroupCompression(const GroupCompression& c) {
  if (c.codec == Codec::kZstd) {
    if (c.level < 1 || c.level > ZSTD_maxCLevel()) {
      return Status::InvalidArgument(
          fmt::format("--compress-level {}: zstd levels are 1 to {}", c.level, ZSTD_maxCLevel()));
    }
  } else if (c.codec == Codec::kGzip) {
    if (c.level < 0 || c.level > 9) {
      return Status::InvalidArgument(
          fmt::format("--compress-level {}: gzip levels are 0 to 9", c.level));
    }
  } else {
    return Status::InvalidArgument("--compress: zstd or gzip");
  }
  if (c.group_bytes < kMinGroupBytes || c.group_bytes > kMaxIntervalBytes) {
    return Status::InvalidArgument(fmt::format(
        "--group-bytes {}: must be from {} to {} bytes (a mount decodes at most {} MiB for one "
        "read)",
        c.group_bytes, kMinGroupBytes, kMaxIntervalBytes, kMaxIntervalBytes >> 20));
  }
  return Status::Ok();
}

std::vector<uint64_t> PlanGroups(const std::vector<uint64_t>& sample_starts, uint64_t tar_size,
                                 uint64_t group_bytes) {
  std::vector<uint64_t> groups = {0};
  uint64_t g = 0;
  for (size_t k = 0; k < sample_starts.size(); ++k) {
    const uint64_t s = sample_starts[k];
    const uint64_t e = k + 1 < sample_starts.size() ? sample_starts[k + 1] : tar_size;
    if (s > g && e - g > group_bytes) {
      groups.push_back(s);
      g = s;
    }
    while (e - g > group_bytes) {  // One sample longer than a group.
      g += group_bytes;
      groups.push_back(g);
    }
  }
  return groups;
}

Status CompressShard(const std::string& name, int tar_fd, uint64_t tar_size,
                     const std::vector<uint64_t>& group_starts, const GroupCompression& c,
                     int out_fd, index::SeekTable* table) {
  *table = index::SeekTable{};
  table->decoded_size = tar_size;
  GroupReader in(name, tar_fd);
  Output out(name, out_fd);
  if (c.codec == Codec::kZstd) {
    SHARDFS_RETURN_IF_ERROR(CompressZstd(name, &in, tar_size, group_starts, c.level, &out, table));
  } else {
    SHARDFS_RETURN_IF_ERROR(CompressGzip(name, &in, tar_size, group_starts, c.level, &out, table));
  }
  return out.Drain(true);
}

}  // namespace shardfs::tools
