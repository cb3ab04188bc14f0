#include "src/archive/format_sniff.h"

#include <cstdint>

namespace shardfs::archive {

// GNU tar's tar_checksum: the checksum field (octal, spaces before, a space
// or NUL after) equals the unsigned or the signed sum of the block, the
// field counted as spaces.
bool ValidTarChecksum(std::string_view block) {
  constexpr size_t kField = 148, kFieldEnd = 156, kBlock = 512;
  if (block.size() < kBlock) return false;
  size_t i = kField;
  while (i < kFieldEnd && block[i] == ' ') ++i;
  uint64_t stored = 0;
  bool digits = false;
  for (; i < kFieldEnd && block[i] >= '0' && block[i] <= '7'; ++i) {
    stored = stored * 8 + static_cast<uint64_t>(block[i] - '0');
    digits = true;
  }
  if (!digits || (i < kFieldEnd && block[i] != ' ' && block[i] != '\0')) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t k = 0; k < kBlock; ++k) {
    const bool field = k >= kField && k < kFieldEnd;
    unsigned_sum += field ? ' ' : static_cast<uint8_t>(block[k]);
    signed_sum += field ? ' ' : static_cast<signed char>(block[k]);
  }
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

index::Codec DetectCodec(std::string_view head) {
  if (ValidTarChecksum(head)) return index::Codec::kNone;
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("\x1f\x8b")) return index::Codec::kGzip;
  if (starts(std::string_view("\x28\xb5\x2f\xfd", 4))) return index::Codec::kZstd;
  if (head.size() >= 4 && (static_cast<uint8_t>(head[0]) & 0xf0) == 0x50 &&
      head.substr(1, 3) == "\x2a\x4d\x18") {
    return index::Codec::kZstd;  // A skippable frame first.
  }
  if (starts(std::string_view("\xfd"
                              "7zXZ\0",
                              6)))
    return index::Codec::kXz;
  if (starts("BZh")) return index::Codec::kBzip2;
  return index::Codec::kNone;
}

}  // namespace shardfs::archive
