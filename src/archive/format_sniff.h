// Telling an archive's format from its first bytes: a tar header by its
// checksum, a compressed tar by its codec's magic. The scanners ask this
// before they read a shard (tar_scanner.h, ctar_scanner.h, nested_scan.h);
// decoding the codec found is src/codec/ctar_codec.h's.
//
// Pure functions of the bytes; thread-safe.
#ifndef SHARDFS_SRC_ARCHIVE_FORMAT_SNIFF_H_
#define SHARDFS_SRC_ARCHIVE_FORMAT_SNIFF_H_

#include <cstddef>
#include <string_view>

#include "index/schema.h"

namespace shardfs::archive {

// Bytes of a shard's head that DetectCodec looks at: one tar block.
inline constexpr size_t kCodecMagicBytes = 512;

// Whether `block` (at least 512 bytes) is a tar header by GNU tar's test:
// its checksum field (octal, spaces before, a space or NUL after) equals the
// unsigned or the signed sum of the block, the field counted as spaces.
bool ValidTarChecksum(std::string_view block);

// The codec whose magic `head` (the first bytes of a file, possibly fewer
// than kCodecMagicBytes) starts with: gzip 1f 8b, zstd 28 b5 2f fd (or a
// skippable frame, 5? 2a 4d 18), xz fd '7zXZ' 00, bzip2 'BZh'. kNone
// otherwise (a plain tar, or anything else: the tar scanner judges it), and
// kNone if `head` holds a whole block with a valid tar header checksum, as
// GNU tar checks before any magic (a first member named "BZh9...").
index::Codec DetectCodec(std::string_view head);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_FORMAT_SNIFF_H_
