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
// What a scan reports and is asked (ScannedMember, ShardInfo, ScanOptions)
// is in src/archive/scanned_member.h, shared with the other scanners.
//
// Thread-safe: each call owns its archive and mapping; scan shards in
// parallel by calling ScanTar from several threads.
#ifndef SHARDFS_SRC_ARCHIVE_TAR_SCANNER_H_
#define SHARDFS_SRC_ARCHIVE_TAR_SCANNER_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "src/archive/scanned_member.h"

namespace shardfs::archive {

// Scans the shard at `path`, calling `on_member` for each member in archive
// order (a zip archive, found by its end record, is scanned by ScanZipBytes
// instead: src/archive/zip_scanner.h); a non-ok Status from `on_member` stops the scan and is
// returned. Returns InvalidArgument naming the shard and byte offset for anything that is not a
// well-formed uncompressed tar (truncated, bad checksum, ...), and NotSupported for members whose
// data libarchive does not return in place.
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

#endif  // SHARDFS_SRC_ARCHIVE_TAR_SCANNER_H_
