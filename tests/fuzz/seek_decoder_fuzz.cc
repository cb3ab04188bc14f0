// libFuzzer target: the seek-point decoder of compressed tar shards
// (src/codec/ctar_codec.h) on hostile input. Input layout: u16le n, then n
// bytes of a seek table value (index/schema.h), u16le w, then w bytes of a
// window, one byte naming the point, and the rest: the compressed bytes
// from that point on. Whatever the bytes, the table decoder and the
// interval decoder must return (never crash, hang or overrun), and an
// interval that decodes must have exactly the table's length, and a prefix
// of it (DecodeIntervalPrefix) its first bytes. Points of
// every kind: gzip members, deflate blocks, zstd frames, xz blocks and
// bzip2 blocks (bit-aligned; seeds bzip2-block, bzip2-blocks).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "index/schema.h"
#include "src/codec/ctar_codec.h"

namespace {

bool Take(std::string_view* in, size_t n, std::string_view* out) {
  if (in->size() < n) return false;
  *out = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

size_t U16(std::string_view b) {
  return static_cast<uint8_t>(b[0]) | static_cast<size_t>(static_cast<uint8_t>(b[1])) << 8;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view len, table_bytes, window, point;
  if (!Take(&in, 2, &len) || !Take(&in, U16(len), &table_bytes)) return 0;
  shardfs::index::SeekTable table;
  if (!shardfs::index::DecodeSeekTable(table_bytes, &table).ok() || table.points.empty()) {
    return 0;
  }
  // What the decoder is given, it reads back the same.
  std::string again;
  shardfs::index::EncodeSeekTable(table, &again);
  if (again != table_bytes) {
    std::fprintf(stderr, "seek table does not round-trip\n");
    std::abort();
  }
  if (!Take(&in, 2, &len) || !Take(&in, U16(len), &window) || !Take(&in, 1, &point)) return 0;
  const size_t i = static_cast<uint8_t>(point[0]) % table.points.size();
  (void)table.Find(static_cast<uint64_t>(size) * 977);
  constexpr uint64_t kMax = uint64_t{4} << 20;
  shardfs::Result<std::string> out =
      shardfs::codec::DecodeInterval("fuzz.tar.gz", table, i, window, in, kMax);
  if (out.ok() && out->size() != table.End(i) - table.points[i].decoded) {
    std::fprintf(stderr, "interval decoded to %zu bytes, not %llu\n", out->size(),
                 static_cast<unsigned long long>(table.End(i) - table.points[i].decoded));
    std::abort();
  }
  // A prefix, where the kind allows one, is the interval's first bytes.
  const uint64_t want = table.End(i) - table.points[i].decoded;
  if (want > 0 && want <= kMax && shardfs::codec::CanDecodePrefix(table.points[i].kind)) {
    const uint64_t prefix = (static_cast<uint64_t>(size) * 31) % want;
    shardfs::Result<std::string> part =
        shardfs::codec::DecodeIntervalPrefix("fuzz.tar.gz", table, i, window, in, kMax, prefix);
    if (part.ok() && part->size() != prefix) {
      std::fprintf(stderr, "prefix of %llu decoded to %zu bytes\n",
                   static_cast<unsigned long long>(prefix), part->size());
      std::abort();
    }
    if (part.ok() && out.ok() && *part != out->substr(0, prefix)) {
      std::fprintf(stderr, "a prefix differs from the interval's start\n");
      std::abort();
    }
  }
  return 0;
}
