#include "base/coding.h"

namespace shardfs {

void PutVarint64(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

bool GetVarint64(std::string_view* input, uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && !input->empty(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(input->front());
    input->remove_prefix(1);
    if (shift == 63 && b > 1) return false;
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *value = result;
      return true;
    }
  }
  return false;
}

}  // namespace shardfs
