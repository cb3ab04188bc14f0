#include "src/codec/encoded_member.h"

#include <libdeflate.h>

#include <memory>

namespace shardfs::codec {
namespace {

struct FreeDecompressor {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

libdeflate_decompressor* ThreadDecompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, FreeDecompressor> d(
      libdeflate_alloc_decompressor());
  return d.get();
}

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t len) {
  return libdeflate_crc32(crc, data, len);
}

Status CheckMemberSizes(const index::EncodedMember& encoding, uint64_t size) {
  if (size > kMaxDeflatedMember) {
    return Status::Corruption(
        fmt::format("recorded as inflating to {} bytes, more than the {} a member may", size,
                    kMaxDeflatedMember));
  }
  if (encoding.comp_size > kMaxDeflatedInput) {
    return Status::Corruption(
        fmt::format("recorded with {} compressed bytes, more than the {} a member may have",
                    encoding.comp_size, kMaxDeflatedInput));
  }
  return Status::Ok();
}

Result<std::string> DecodeMember(const index::EncodedMember& encoding, std::string_view compressed,
                                 uint64_t size) {
  if (encoding.method != index::kMethodDeflate) {
    return Status::NotSupported(fmt::format("compression method {}", encoding.method));
  }
  SHARDFS_RETURN_IF_ERROR(CheckMemberSizes(encoding, size));
  if (compressed.size() != encoding.comp_size) {
    return Status::Corruption(
        fmt::format("{} compressed bytes, expected {}", compressed.size(), encoding.comp_size));
  }
  libdeflate_decompressor* d = ThreadDecompressor();
  if (d == nullptr) return Status::IoError("out of memory for a decompressor");
  std::string out;
  // One spare byte: output longer than `size` shows as filling it.
  out.resize(static_cast<size_t>(size) + 1);
  size_t in_used = 0, out_used = 0;
  const libdeflate_result r = libdeflate_deflate_decompress_ex(
      d, compressed.data(), compressed.size(), out.data(), out.size(), &in_used, &out_used);
  switch (r) {
    case LIBDEFLATE_SUCCESS:
      break;
    case LIBDEFLATE_INSUFFICIENT_SPACE:
      return Status::Corruption(
          fmt::format("deflate data inflates to more than the recorded {} bytes", size));
    default:
      return Status::Corruption(
          fmt::format("bad deflate data (libdeflate result {})", static_cast<int>(r)));
  }
  if (out_used != size) {
    return Status::Corruption(
        fmt::format("deflate data inflates to {} bytes, recorded {}", out_used, size));
  }
  if (in_used != compressed.size()) {
    return Status::Corruption(
        fmt::format("deflate data ends after {} of the recorded {} compressed bytes", in_used,
                    compressed.size()));
  }
  out.resize(out_used);
  const uint32_t crc = Crc32(0, out.data(), out.size());
  if (crc != encoding.crc32) {
    return Status::Corruption(
        fmt::format("CRC-32 {:08x} of the inflated bytes, recorded {:08x}", crc, encoding.crc32));
  }
  return out;
}

}  // namespace shardfs::codec
