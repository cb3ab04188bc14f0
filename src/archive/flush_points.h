// Full-flush points of a foreign gzip stream (`index build` of a .tar.gz):
// where a deflate encoder flushed with Z_FULL_FLUSH (as `pack --compress
// gzip` does between groups), decoding can start with an empty window, so
// the seek point there needs no stored 32 KiB window.
//
// A candidate is a block boundary at a byte boundary right after an empty
// stored block (the bytes 00 00 ff ff). Z_SYNC_FLUSH writes the same bytes
// but lets later data refer back across them, so a candidate is only
// trusted once verified: the interval that starts there is decoded by the
// mount's own decoder (src/codec/ctar_codec.h) with no window, and must succeed
// and equal the decoded stream. zlib refuses a distance that reaches before
// the start of its output when no window was given ("invalid distance too
// far back"), so a successful decode proves that no back-reference crosses
// the point.
//
// Thread-safe: pure functions.
#ifndef SHARDFS_SRC_ARCHIVE_FLUSH_POINTS_H_
#define SHARDFS_SRC_ARCHIVE_FLUSH_POINTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "index/schema.h"

namespace shardfs::archive {

// True if a deflate block boundary at compressed byte `at` with `bits`
// unused bits of the byte before is a full-flush candidate: bits == 0 and
// the 4 bytes before `at` are 00 00 ff ff.
bool IsFlushCandidate(const char* data, size_t at, int bits);

// For each raw-deflate point of `table` at a flush candidate that has a
// window: decodes its interval from `compressed` (the whole shard) with no
// window and, if that succeeds and equals bytes [point, end) of `decoded`
// (the whole decoded stream), drops the window (point.window = 0,
// windows[i] cleared). Returns the number of windows dropped.
size_t DropVerifiedWindows(const std::string& name, const char* compressed, size_t compressed_size,
                           const char* decoded, index::SeekTable* table,
                           std::vector<std::string>* windows);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_FLUSH_POINTS_H_
