// Zip archives inside a shard, for `index build --recursive`
// (tools/nested_scan.h): the checks made on an inner zip before any of its
// members is handed on, and the look at the start of a deflated member that
// tells whether it holds an archive.
//
// A zip bomb is refused before its members are scanned (with checksums on,
// the scan inflates every member). Two bounds, both on the central
// directory alone:
//   - overlap: every member's bytes (local header to the end of its data)
//     must lie apart from every other member's. Overlapping members are how
//     a zip bomb reaches its ratio without nesting (one deflate stream
//     shared by many entries); no zip writer produces them.
//   - ratio: the members' declared uncompressed sizes, summed, may exceed
//     kNestedZipRatioFloor only up to kNestedZipMaxRatio times the bytes of
//     the zip itself. Photos and audio stay near 1:1 and text near 10:1;
//     deflate's own bound is 1032:1, reached by runs of one byte. The sizes
//     are checked when a member is inflated (index/encoded_member.h), so the
//     declared sum is the real one.
// A quine (an archive that holds itself) needs a compressed copy of itself:
// every nested level is a byte range strictly inside its parent's, and an
// archive stored deflated inside a zip is refused (its members would not be
// byte ranges of the shard), so nesting always ends, bounded by the depth.
//
// Thread-safe: pure functions.
#ifndef SHARDFS_TOOLS_NESTED_ZIP_H_
#define SHARDFS_TOOLS_NESTED_ZIP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs::tools {

inline constexpr uint64_t kNestedZipMaxRatio = 100;
inline constexpr uint64_t kNestedZipRatioFloor = uint64_t{256} << 20;

// Checks the zip in `data` (`size` bytes, the whole inner archive) as above.
// Returns InvalidArgument starting with `where` for a zip bomb, and whatever
// ScanZipBytes refuses in the zip's structure (named after `where` too).
Status CheckNestedZip(std::string_view where, const char* data, size_t size);

// The first `want` decoded bytes of the raw deflate stream `compressed`, or
// fewer if the stream ends or is damaged before (the caller only looks at
// them; the member itself is checked when it is inflated whole).
std::string InflatePrefix(std::string_view compressed, size_t want);

}  // namespace shardfs::tools

#endif  // SHARDFS_TOOLS_NESTED_ZIP_H_
