// Scanning one uncompressed tar shard: every member's metadata and the exact
// byte range of its data inside the shard.
//
// The shard is mapped whole and handed to libarchive as its only block, so
// the data pointers libarchive returns point into the mapping and give each
// member's data offset exactly. A
// pointer outside the mapping means libarchive copied the data; such a member
// is refused, never guessed at. A sparse member (GNU sparse 0.0, 0.1, 1.0,
// old GNU 'S') stores only its data: libarchive returns each data block with
// its logical offset, so the same pointers give its extents exactly.
//
// Most shards never reach libarchive: a header walker (tar_walker.h) reads
// the common case (ustar/GNU/pax headers of files, directories and links)
// itself, with the same results, and declines every shard it does not fully
// understand, which then takes the path above.
//
// Thread-safe: each call owns its archive and mapping; scan shards in
// parallel by calling ScanTar from several threads.
#ifndef SHARDFS_ARCHIVE_TAR_SCANNER_H_
#define SHARDFS_ARCHIVE_TAR_SCANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
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
  // A zip member stored compressed (archive/zip_scanner.h): data_offset is
  // encoding.comp_offset, size the uncompressed size, xxh3 of the
  // uncompressed content.
  bool encoded = false;
  index::EncodedMember encoding;
  // A member of a slice shard (archive/nested_scan.h: a compressed tar inside
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
  bool zip = false;  // A zip archive (archive/zip_scanner.h), not a tar.
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
  // stay readable until the scan returns (archive/nested_scan.h reads the
  // members' content through them).
  std::function<void(const char* data, size_t size)> on_bytes;
  // A zip whose members declare in all more than kZipRatioFloor and more
  // than this many times the zip's bytes is refused as a zip bomb
  // (archive/zip_scanner.h; --max-zip-ratio). Tars ignore it.
  uint64_t max_zip_ratio = kDefaultMaxZipRatio;
  // Zips only: called once the first pass over the central directory and
  // the local headers (the bomb checks) has ended, before any member is
  // handed on; ScanTar drops the pages that pass touched from its mapping.
  std::function<void()> on_directory_read;
};

// Scans the shard at `path`, calling `on_member` for each member in archive
// order (a zip archive, found by its end record, is scanned by ScanZipBytes
// instead: archive/zip_scanner.h); a non-ok Status from `on_member` stops the scan and is returned.
// Returns InvalidArgument naming the shard and byte offset for anything that
// is not a well-formed uncompressed tar (truncated, bad checksum, ...), and
// NotSupported for members whose data libarchive does not return in place.
Status ScanTar(const std::string& path, const ScanOptions& options,
               const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info);

// The same over `fd`, an open regular file (a downloaded copy of a remote
// shard, say); `name` is used in messages, info->mtime_ns is the file's.
Status ScanTarFd(const std::string& name, int fd, const ScanOptions& options,
                 const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info);

// The scan itself, over a shard already in memory (`data`, `size` bytes);
// `name` is used in messages. Adds to info->members and info->data_bytes.
// ScanTar maps the file and calls this; fuzzers call it directly. The
// members and the Status are the same with options.walker on or off.
Status ScanTarBytes(std::string_view name, const char* data, size_t size,
                    const ScanOptions& options,
                    const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info);

}  // namespace shardfs::archive

#endif  // SHARDFS_ARCHIVE_TAR_SCANNER_H_
