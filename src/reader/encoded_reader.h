// Reads of encoded members (index/schema.h, EncodedMember: today a zip
// archive's deflated members; the method is codec::DecodeMember's to know).
// Such a member is never a byte range of its shard: its compressed bytes are
// read the way any shard bytes are (pread, or the chunk fetcher for a remote
// shard or a cache_dir, so the chunk cache holds compressed bytes), decoded
// whole by codec::DecodeMember (which checks the size and the CRC-32), and
// kept in the mount's DecodedCache under (shard, compressed
// offset), so that the many READs of one file inflate it once, and
// concurrent first READs of one member inflate it once too.
//
// Wrong bytes are never served: a short read, bad compressed data or a CRC-32
// (or, with verify, XXH3) mismatch is an error (EIO at the FUSE edge) with
// one log line naming the archive and the member's compressed offset. A
// failed decode is not cached; the next READ tries again.
//
// Thread-safe: the cache guards itself; the rest is per call.
#ifndef SHARDFS_SRC_READER_ENCODED_READER_H_
#define SHARDFS_SRC_READER_ENCODED_READER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "index/schema.h"
#include "src/reader/decoded_cache.h"
#include "src/reader/shard_files.h"

namespace shardfs::reader {

// How long a READ waits for another READ's inflate of the same member
// before inflating it itself.
inline constexpr std::chrono::milliseconds kDecodeWait{2000};

// What a read of an encoded member needs besides its shard.
struct EncodedRead {
  index::ShardId shard_id;
  const ShardHandle* shard = nullptr;
  index::EncodedMember encoding;
  uint64_t size = 0;         // Uncompressed bytes of the member.
  uint64_t offset = 0;       // Where in the member the read starts.
  size_t length = 0;         // Bytes to read, inside the member.
  std::string_view archive;  // The shard's path or URL (redacted), for messages.
};

// Checks a member's whole decoded content (verify=first|always); a
// non-ok Status refuses the bytes. Called only on a fresh decode or when the
// caller asks for every read.
using MemberCheck = std::function<Status(const std::string& content)>;

// Copies bytes [read.offset, read.offset + read.length) of the member into
// `buf`, decoding it through `cache` (not owned; nullptr: decode for this
// read alone). `check`, if set, runs on the decoded content before any
// byte of it is served. Returns IoError (raw read) or Corruption (sizes
// past codec::CheckMemberSizes' bounds, refused before anything is
// allocated; decode, check) naming the archive and the member's compressed
// offset, logged once.
Status ReadEncodedMember(const EncodedRead& read, DecodedCache* cache, const MemberCheck& check,
                         char* buf);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_ENCODED_READER_H_
