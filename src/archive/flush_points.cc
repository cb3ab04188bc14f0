#include "src/archive/flush_points.h"

#include <cstring>
#include <string_view>

#include "src/codec/ctar_codec.h"

namespace shardfs::archive {

bool IsFlushCandidate(const char* data, size_t at, int bits) {
  return bits == 0 && at >= 4 && std::memcmp(data + at - 4, "\x00\x00\xff\xff", 4) == 0;
}

size_t DropVerifiedWindows(const std::string& name, const char* compressed, size_t compressed_size,
                           const char* decoded, index::SeekTable* table,
                           std::vector<std::string>* windows) {
  size_t dropped = 0;
  for (size_t i = 0; i < table->points.size(); ++i) {
    index::SeekPoint& p = table->points[i];
    if (p.kind != index::SeekKind::kDeflate || p.window == 0 || p.compressed > compressed_size ||
        !IsFlushCandidate(compressed, static_cast<size_t>(p.compressed), p.bits)) {
      continue;
    }
    // The point as it would be stored (no window) and the next one: all
    // that decoding its interval looks at.
    index::SeekTable bare;
    bare.decoded_size = table->decoded_size;
    bare.points.push_back(p);
    bare.points[0].window = 0;
    if (i + 1 < table->points.size()) bare.points.push_back(table->points[i + 1]);
    const uint64_t from = codec::IntervalInputStart(bare, 0);
    const uint64_t to = codec::IntervalInputEnd(bare, 0, compressed_size);
    if (from > to || to > compressed_size) continue;
    Result<std::string> got =
        codec::DecodeInterval(name, bare, 0, "", std::string_view(compressed + from, to - from),
                              codec::kMaxIntervalBytes);
    const uint64_t want = table->End(i) - p.decoded;
    if (!got.ok() || got->size() != want ||
        std::memcmp(got->data(), decoded + p.decoded, static_cast<size_t>(want)) != 0) {
      continue;  // A reference crosses it (a sync flush): the window stays.
    }
    p.window = 0;
    (*windows)[i].clear();
    ++dropped;
  }
  return dropped;
}

}  // namespace shardfs::archive
