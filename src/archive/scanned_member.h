// The plain data of a shard scan: what each scanner reports for a member
// (ScannedMember), for the whole shard (ShardInfo), and what it is asked to
// do (ScanOptions). Shared by every scanner (tar_scanner.h, tar_walker.h,
// zip_scanner.h, ctar_scanner.h, nested_scan.h), which fill them; this header
// holds no behaviour, so each scanner depends on it and not on the others.
#ifndef SHARDFS_SRC_ARCHIVE_SCANNED_MEMBER_H_
#define SHARDFS_SRC_ARCHIVE_SCANNED_MEMBER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "index/schema.h"

namespace shardfs::archive {

enum class MemberKind { kFile, kDir, kSymlink, kHardlink, kOther };

struct ScannedMember {
  std::string path;  // Raw, as the archive spells it.
  MemberKind kind = MemberKind::kFile;
  const char* other_type = "";  // For kOther: "fifo", "char device", ...
  uint32_t mode = 0;            // Permission bits.
  int64_t uid = 0;
  int64_t gid = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;           // Sparse members: the logical size.
  uint64_t header_offset = 0;  // Where the member's first header starts.
  uint64_t data_offset = 0;    // Where its data starts (0 for empty members).
  // A sparse member: its data extents, in order (possibly none); data_offset
  // is the first one's shard position and `xxh3` covers the stored bytes of
  // the extents only (holes are not hashed).
  bool sparse = false;
  std::vector<index::Extent> extents;
  bool has_checksum = false;
  uint64_t xxh3 = 0;
  std::string link_target;  // Symlink target or hard link target, raw.
  // A zip member stored compressed (src/archive/zip_scanner.h): data_offset is
  // encoding.comp_offset, size the uncompressed size, xxh3 of the
  // uncompressed content.
  bool encoded = false;
  index::EncodedMember encoding;
  // A member of a slice shard (src/archive/nested_scan.h: a compressed tar inside
  // the shard): k > 0 for the k-th slice of the shard's scan (offsets are
  // in that slice's decoded stream); 0 for the shard's own members.
  uint32_t slice = 0;
};

struct ShardInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t fingerprint = 0;
  uint64_t members = 0;
  uint64_t data_bytes = 0;
  bool zip = false;  // A zip archive (src/archive/zip_scanner.h), not a tar.
};

// The default of ScanOptions::max_zip_ratio: photos and audio stay near
// 1:1 and text near 10:1; deflate's own bound is 1032:1, reached by runs of
// one byte.
inline constexpr uint64_t kDefaultMaxZipRatio = 100;

struct ScanOptions {
  // Hash every member's content with XXH3-64 (reads the data). Off: only
  // headers are read and the scan's cost follows member count, not bytes.
  bool checksum = true;
  // Try the header walker (tar_walker.h) first; shards it declines, and
  // all shards when this is off, are read through libarchive. Off only to
  // compare the two.
  bool walker = true;
  // Set: the header walker reads a shard once, reporting members as it
  // goes, and calls `restart` if it then gives the shard to libarchive
  // after all; the caller drops every member it was given, and the scan
  // reports them all again from the first. Unset: the walker first reads the
  // whole shard to decide, and reports nothing it would take back.
  std::function<void()> restart;
  // Set: called once with the shard's bytes before the first member, which
  // stay readable until the scan returns (src/archive/nested_scan.h reads the
  // members' content through them).
  std::function<void(const char* data, size_t size)> on_bytes;
  // A zip whose members declare in all more than kZipRatioFloor and more
  // than this many times the zip's bytes is refused as a zip bomb
  // (src/archive/zip_scanner.h; --max-zip-ratio). Tars ignore it.
  uint64_t max_zip_ratio = kDefaultMaxZipRatio;
  // Zips only: called once the first pass over the central directory and
  // the local headers (the bomb checks) has ended, before any member is
  // handed on; ScanTar drops the pages that pass touched from its mapping.
  std::function<void()> on_directory_read;
};

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_SCANNED_MEMBER_H_
