// Reading a tar member's raw headers where libarchive 3.6.2 and GNU tar
// 1.34 disagree, so that the index means what GNU tar's extraction means.
//
// libarchive applies extension headers innermost first (a GNU 'L' name beats
// a later pax path; GNU tar lets the pax record win in either order), reads
// a negative pax time with a fraction as -1 s + 0.25 s, and positions itself
// after a GNU sparse 1.0 member by its map instead of by the member's size.
// The scanner has the whole shard in memory: these functions read the
// headers themselves and the scanner lets them decide. All of them are pure
// functions of the bytes; none trusts a length it has not bounded.
#ifndef SHARDFS_SRC_ARCHIVE_TAR_HEADERS_H_
#define SHARDFS_SRC_ARCHIVE_TAR_HEADERS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace shardfs::archive {

// The tar block: headers and data are padded to it.
inline constexpr uint64_t kTarBlock = 512;

// A pax time, parsed exactly: "-1.25" is 1.25 s before the epoch, as POSIX
// and GNU tar read it. False if it is not a plain decimal or does not fit.
bool ParsePaxTimeNs(std::string_view v, int64_t* out);

// What the extension headers ahead of a member's own header say. Views point
// into the shard.
struct Extensions {
  bool gnu_name = false;  // A GNU 'L' header names the member.
  bool gnu_link = false;  // A GNU 'K' header gives its link target.
  std::optional<std::string_view> path, linkpath, mtime, size;  // pax records.
  std::optional<std::string_view> sparse_major;                 // GNU.sparse.major
  uint64_t own_header = 0;  // Where the member's own (ustar) header starts.
};

// Reads the extension headers ('L', 'K', pax 'x'; global 'g' ones are
// skipped) from `header`, the member's first header, up to its own header.
// Later records win over earlier ones. False if they cannot be walked (a
// damaged archive: libarchive has the last word then).
bool ReadExtensions(const char* data, size_t size, uint64_t header, Extensions* ext);

// A GNU sparse 1.0 member's map, read as GNU tar reads it: decimal lines,
// digits only, a count then that many (offset, length) pairs, at the start
// of the member's data area and padded to a block.
struct Sparse10Map {
  std::vector<std::pair<uint64_t, uint64_t>> entries;  // (offset, length)
  uint64_t data_start = 0;                             // Shard position of the first stored byte.
  // Where the member ends and the next header starts: the data area's start
  // plus the member's declared size (pax `size`, else the ustar field),
  // rounded up to a block. GNU tar goes there whatever the map accounts for.
  uint64_t member_end = 0;
  // The file's size as GNU tar extracts it: the end of the last map entry.
  uint64_t logical_end = 0;
  // The data bytes the map accounts for: the sum of its lengths.
  uint64_t stored = 0;
};

// For a member whose extension headers `ext` mark it GNU sparse 1.0: its
// map. nullopt if the map is malformed in a way GNU tar refuses ("malformed
// sparse archive member"), or if it or the declared size runs past the shard.
std::optional<Sparse10Map> ReadSparse10Map(const char* data, size_t size, const Extensions& ext);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_TAR_HEADERS_H_
