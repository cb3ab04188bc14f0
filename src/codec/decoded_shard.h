// A compressed tar shard's whole decoded stream, for the commands that read
// files of such shards by their decoded offsets (`verify --full`, `pack
// --from-index`): decoded once, seek point by seek point as the mount does
// (src/codec/ctar_codec.h), into an unnamed temporary file.
//
// Thread-safe: each call owns its buffers and file.
#ifndef SHARDFS_SRC_CODEC_DECODED_SHARD_H_
#define SHARDFS_SRC_CODEC_DECODED_SHARD_H_

#include "base/fd.h"
#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"

namespace shardfs::codec {

// Decodes compressed shard `id` of `reader`, open at `fd` (checked against
// the index already; a slice shard's whole file, of which its range is
// read), into a temporary file in $TMPDIR (/tmp if unset),
// removed when the returned fd is closed. Every interval must decode to
// exactly its size. Returns Corruption naming the shard and the compressed
// offset if it does not (corrupt or truncated data, a frame checksum that
// does not match), NotSupported for an interval longer than
// codec::kMaxIntervalBytes (a single-frame stream: only its checksums can
// be compared), IoError if reading or writing fails.
Result<UniqueFd> DecodeShardToTemp(const index::IndexReader& reader, index::ShardId id, int fd);

}  // namespace shardfs::codec

#endif  // SHARDFS_SRC_CODEC_DECODED_SHARD_H_
