#include "tools/pack/shard_compress.h"

#include <fmt/format.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <thread>

#include "base/io.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::pack {
namespace {

using index::Codec;
using index::SeekKind;
using index::SeekPoint;

constexpr uint32_t kSkippableSeekTableMagic = 0x184D2A5E;
constexpr uint32_t kSeekableMagic = 0x8F92EAB1;
constexpr uint8_t kSeekTableChecksums = 0x80;

void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// One group, compressed on its own.
struct Group {
  uint64_t from = 0, to = 0;  // Bytes [from, to) of the tar.
  std::string data;           // Those bytes, then freed.
  std::string out;            // Compressed.
  uint32_t check = 0;         // zstd: XXH64 low 32 bits; gzip: CRC-32 of `data`.
  Status status;
};

// A zstd frame with its content size and checksum.
Status CompressZstdGroup(const std::string& name, int level, Group* g) {
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
  g->out.resize(ZSTD_compressBound(g->data.size()));
  const size_t n =
      ZSTD_compress2(cctx.get(), g->out.data(), g->out.size(), g->data.data(), g->data.size());
  SHARDFS_RETURN_IF_ERROR(check(n));
  g->out.resize(n);
  g->check = static_cast<uint32_t>(XXH64(g->data.data(), g->data.size(), 0) & 0xffffffffu);
  return Status::Ok();
}

// Raw deflate from an empty window, ending in a full flush (an empty stored
// block, byte aligned), or for the last group in the final block.
Status CompressDeflateGroup(const std::string& name, int level, bool last, Group* g) {
  z_stream strm{};
  if (deflateInit2(&strm, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Status::IoError("deflateInit2 failed");
  }
  std::unique_ptr<z_stream, decltype(&deflateEnd)> guard(&strm, &deflateEnd);
  // Room for all of it: the bound, plus the flush's empty stored block.
  g->out.resize(deflateBound(&strm, static_cast<uLong>(g->data.size())) + 16);
  strm.next_in = reinterpret_cast<Bytef*>(g->data.data());
  strm.avail_in = static_cast<uInt>(g->data.size());
  strm.next_out = reinterpret_cast<Bytef*>(g->out.data());
  strm.avail_out = static_cast<uInt>(g->out.size());
  const int r = deflate(&strm, last ? Z_FINISH : Z_FULL_FLUSH);
  if (r != (last ? Z_STREAM_END : Z_OK) || strm.avail_in != 0 || strm.avail_out == 0) {
    return Status::IoError(fmt::format("{}: deflate of bytes {}..{} failed", name, g->from, g->to));
  }
  g->out.resize(g->out.size() - strm.avail_out);
  g->check = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(g->data.data()), static_cast<uInt>(g->data.size())));
  return Status::Ok();
}

// The gzip header zlib writes for deflateInit2(.., 31, ..): no name, mtime
// 0, the extra flags for the level, OS 3 (Unix).
std::string GzipHeader(int level) {
  std::string h("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8);
  h.push_back(level == 9 ? 2 : level < 2 ? 4 : 0);
  h.push_back(3);
  return h;
}

// Reads the groups of `batch` from the tar and compresses them, each on its
// own, batch->size() threads at a time; batch[k] is group first + k of n.
// Sets each group's status, out and check (its data freed again).
void CompressBatch(const std::string& name, int tar_fd, const GroupCompression& c, size_t first,
                   size_t n, std::vector<Group>* batch) {
  const bool zstd = c.codec == Codec::kZstd;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < batch->size();) {
      Group& g = (*batch)[k];
      g.data.resize(static_cast<size_t>(g.to - g.from));
      g.status = PreadExact(tar_fd, g.data.data(), g.data.size(), g.from);
      if (!g.status.ok()) {
        g.status = g.status.WithContext(fmt::format("read the tar of {}", name));
        continue;
      }
      g.status = zstd ? CompressZstdGroup(name, c.level, &g)
                      : CompressDeflateGroup(name, c.level, first + k + 1 == n, &g);
      g.data = std::string();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < batch->size(); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// The seekable format's seek table of `n` frames (`entries`, 12 bytes a
// frame), a skippable frame, appended to *out.
void AppendZstdSeekTable(const std::string& entries, size_t n, std::string* out) {
  PutLe32(out, kSkippableSeekTableMagic);
  PutLe32(out, static_cast<uint32_t>(entries.size() + 9));
  *out += entries;
  PutLe32(out, static_cast<uint32_t>(n));
  out->push_back(static_cast<char>(kSeekTableChecksums));
  PutLe32(out, kSeekableMagic);
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
  if (c.group_bytes < kMinGroupBytes || c.group_bytes > codec::kMaxIntervalBytes) {
    return Status::InvalidArgument(fmt::format(
        "--group-bytes {}: must be from {} to {} bytes (a mount decodes at most {} MiB for one "
        "read)",
        c.group_bytes, kMinGroupBytes, codec::kMaxIntervalBytes, codec::kMaxIntervalBytes >> 20));
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
  const bool zstd = c.codec == Codec::kZstd;
  const size_t n = group_starts.size();
  const size_t threads = static_cast<size_t>(std::max(
      1, c.threads > 0 ? c.threads : static_cast<int>(std::thread::hardware_concurrency())));
  std::string out = zstd ? "" : GzipHeader(c.level);
  uint64_t written = 0;
  auto drain = [&]() -> Status {
    if (!WriteFully(out_fd, out.data(), out.size())) {
      return Status::FromErrno(errno, fmt::format("write {}", name));
    }
    written += out.size();
    out.clear();
    return Status::Ok();
  };
  std::string seek_entries;
  uLong crc = crc32(0, nullptr, 0);
  // Groups are compressed `threads` at a time, each on its own, and written
  // in order: the bytes do not depend on the number of threads.
  std::vector<Group> batch;
  for (size_t first = 0; first < n; first += batch.size()) {
    batch.assign(std::min(threads, n - first), Group{});
    for (size_t k = 0; k < batch.size(); ++k) {
      batch[k].from = group_starts[first + k];
      batch[k].to = first + k + 1 < n ? group_starts[first + k + 1] : tar_size;
    }
    CompressBatch(name, tar_fd, c, first, n, &batch);
    for (size_t k = 0; k < batch.size(); ++k) {
      Group& g = batch[k];
      SHARDFS_RETURN_IF_ERROR(g.status);
      SeekPoint p;
      p.decoded = g.from;
      p.compressed = written + out.size();
      p.kind = zstd             ? SeekKind::kZstdFrame
               : first + k == 0 ? SeekKind::kGzipMember
                                : SeekKind::kDeflate;
      if (p.kind == SeekKind::kGzipMember) p.compressed = 0;
      table->points.push_back(p);
      out += g.out;
      if (zstd) {
        PutLe32(&seek_entries, static_cast<uint32_t>(g.out.size()));
        PutLe32(&seek_entries, static_cast<uint32_t>(g.to - g.from));
        PutLe32(&seek_entries, g.check);
      } else {
        crc = crc32_combine(crc, g.check, static_cast<z_off_t>(g.to - g.from));
      }
      g.out = std::string();
      SHARDFS_RETURN_IF_ERROR(drain());
    }
  }
  if (zstd) {
    AppendZstdSeekTable(seek_entries, n, &out);
  } else {
    PutLe32(&out, static_cast<uint32_t>(crc));
    PutLe32(&out, static_cast<uint32_t>(tar_size & 0xffffffffu));
  }
  return drain();
}

}  // namespace shardfs::pack
