// Zip archives inside a shard, for `index build --recursive`
// (src/archive/nested_scan.h): the look at the start of a deflated member that
// tells whether it holds an archive.
//
// A nested zip is checked as a zip shard is (src/archive/zip_scanner.h), zip
// bombs included. A quine (an archive that holds itself) needs a compressed
// copy of itself: every nested level is a byte range strictly inside its
// parent's, and an archive stored deflated inside a zip is refused (its
// members would not be byte ranges of the shard), so nesting always ends,
// bounded by the depth.
//
// Thread-safe: pure functions.
#ifndef SHARDFS_SRC_ARCHIVE_NESTED_ZIP_H_
#define SHARDFS_SRC_ARCHIVE_NESTED_ZIP_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace shardfs::archive {

// The first `want` decoded bytes of the raw deflate stream `compressed`, or
// fewer if the stream ends or is damaged before (the caller only looks at
// them; the member itself is checked when it is inflated whole).
std::string InflatePrefix(std::string_view compressed, size_t want);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_NESTED_ZIP_H_
