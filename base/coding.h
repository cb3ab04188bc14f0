// Integers as bytes, the one codec of every format shardfs writes (LevelDB's
// util/coding.h): fixed-width little-endian for the fields of records,
// fixed-width big-endian for integers inside keys (bytewise order is then
// numeric order), and varints (LEB128: 7 bits a byte, low group first, the
// top bit set on every byte but the last).
//
// Encode* write into a buffer the caller sized, Decode* read from one; Put*
// append to a string; GetVarint64 consumes from the front of a string_view.
// Signed values go through the unsigned type of their width (two's
// complement): EncodeFixed64(p, static_cast<uint64_t>(ns)).
#ifndef SHARDFS_BASE_CODING_H_
#define SHARDFS_BASE_CODING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardfs {
namespace coding_internal {

template <typename U>
inline void EncodeLittle(char* dst, U v) {
  for (size_t i = 0; i < sizeof(U); ++i, v = static_cast<U>(v >> 8)) {
    dst[i] = static_cast<char>(v & 0xff);
  }
}
template <typename U>
inline U DecodeLittle(const char* p) {
  U v = 0;
  for (size_t i = sizeof(U); i-- > 0;) v = static_cast<U>((v << 8) | static_cast<uint8_t>(p[i]));
  return v;
}
template <typename U>
inline void EncodeBig(char* dst, U v) {
  for (size_t i = sizeof(U); i-- > 0; v = static_cast<U>(v >> 8)) {
    dst[i] = static_cast<char>(v & 0xff);
  }
}
template <typename U>
inline U DecodeBig(const char* p) {
  U v = 0;
  for (size_t i = 0; i < sizeof(U); ++i) v = static_cast<U>((v << 8) | static_cast<uint8_t>(p[i]));
  return v;
}

}  // namespace coding_internal

// Little-endian, fixed width. REQUIRES: dst (p) holds 2, 4 or 8 bytes.
inline void EncodeFixed16(char* dst, uint16_t v) { coding_internal::EncodeLittle(dst, v); }
inline void EncodeFixed32(char* dst, uint32_t v) { coding_internal::EncodeLittle(dst, v); }
inline void EncodeFixed64(char* dst, uint64_t v) { coding_internal::EncodeLittle(dst, v); }
inline uint16_t DecodeFixed16(const char* p) { return coding_internal::DecodeLittle<uint16_t>(p); }
inline uint32_t DecodeFixed32(const char* p) { return coding_internal::DecodeLittle<uint32_t>(p); }
inline uint64_t DecodeFixed64(const char* p) { return coding_internal::DecodeLittle<uint64_t>(p); }

// Appends 4 (8) little-endian bytes.
inline void PutFixed32(std::string* dst, uint32_t v) {
  char buf[4];
  EncodeFixed32(buf, v);
  dst->append(buf, sizeof buf);
}
inline void PutFixed64(std::string* dst, uint64_t v) {
  char buf[8];
  EncodeFixed64(buf, v);
  dst->append(buf, sizeof buf);
}

// Big-endian, fixed width, for integers inside keys. REQUIRES: dst (p) holds
// 4 or 8 bytes.
inline void EncodeBigEndian32(char* dst, uint32_t v) { coding_internal::EncodeBig(dst, v); }
inline void EncodeBigEndian64(char* dst, uint64_t v) { coding_internal::EncodeBig(dst, v); }
inline uint32_t DecodeBigEndian32(const char* p) { return coding_internal::DecodeBig<uint32_t>(p); }
inline uint64_t DecodeBigEndian64(const char* p) { return coding_internal::DecodeBig<uint64_t>(p); }

// Appends v as a varint of 1 to 10 bytes.
void PutVarint64(std::string* dst, uint64_t v);

// Reads a varint from the front of *input and drops its bytes. False if
// *input ends inside it or it does not fit in 64 bits; *input is then left
// somewhere inside it and *value untouched.
bool GetVarint64(std::string_view* input, uint64_t* value);

}  // namespace shardfs

#endif  // SHARDFS_BASE_CODING_H_
