// Decoding an encoded member (index/schema.h, "Encoded members"): a file
// stored compressed on its own, such as a deflated zip member. The index
// builder decodes each member once to hash it; the mount decodes a member on
// its first read and keeps the result in its decoded cache; `verify` decodes
// to check. All three go through DecodeMember, so they agree on what a good
// member is: exactly `size` bytes out, every compressed byte consumed, and
// the CRC-32 the archive recorded.
//
// Inflation is libdeflate's whole-buffer decompressor (one per thread): the
// sizes are known, so nothing streams and nothing is copied twice. zlib would
// do the same job about half as fast.
//
// Thread-safe.
#ifndef SHARDFS_SRC_CODEC_ENCODED_MEMBER_H_
#define SHARDFS_SRC_CODEC_ENCODED_MEMBER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::codec {

// The most bytes a deflated member may inflate to: a read inflates a member
// whole, so `index build` refuses a larger one and a decode refuses an index
// that records one.
inline constexpr uint64_t kMaxDeflatedMember = uint64_t{1} << 30;
// The most compressed bytes such a member may have: deflate's worst case
// (stored blocks) adds 5 bytes per 65,535; 1/1024 more covers every writer.
inline constexpr uint64_t kMaxDeflatedInput = kMaxDeflatedMember + (kMaxDeflatedMember >> 10);

// Corruption unless an index's sizes of an encoded member (`size`
// uncompressed, encoding.comp_size compressed) are within the bounds above:
// what a reader checks before it allocates either (a record may be damaged
// or crafted). Allocates nothing when Ok.
Status CheckMemberSizes(const index::EncodedMember& encoding, uint64_t size);

// The member's `size` uncompressed bytes from its `compressed` bytes
// (encoding.comp_size of them). Returns Corruption saying what is wrong
// (sizes past CheckMemberSizes' bounds, checked before anything is
// allocated; bad deflate data, output longer or shorter than `size`, CRC
// mismatch); the caller names the archive and the offset. NotSupported for a
// method other than kMethodDeflate.
Result<std::string> DecodeMember(const index::EncodedMember& encoding, std::string_view compressed,
                                 uint64_t size);

// Zip's CRC-32 (ISO 3309), continued from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, const void* data, size_t len);

}  // namespace shardfs::codec

#endif  // SHARDFS_SRC_CODEC_ENCODED_MEMBER_H_
