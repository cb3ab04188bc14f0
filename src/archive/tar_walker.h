// A hand-written header walker for the common tar shard: the fast path of
// ScanTarBytes (tar_scanner.h), which otherwise drives libarchive.
//
// It reads what ScanTarBytes reads through libarchive 3.6.2 plus the raw
// extension-header rules of tar_headers.h, and nothing more: ustar and GNU
// headers with a valid (unsigned) checksum, regular files ('0', '\0'),
// directories ('5'), symlinks ('2'), hard links ('1') without data, GNU long
// names and link names ('L', 'K'), one pax 'x' header per member with a
// small set of keys (path, linkpath, size, mtime, uid, gid and keys that do
// not touch a ScannedMember field), and pax 'g' headers (which libarchive
// 3.6.2 reads and ignores). Anything else declines the whole shard: sparse
// members, other typeflags, base-256 or negative numbers, old v7 headers,
// unknown pax keys (GNU.sparse.*, hdrcharset, charset, ...), non-ASCII pax
// names (libarchive converts those from UTF-8), damaged or truncated input.
// Declining is never an error; the caller then runs libarchive, which has
// the last word and the error messages. The walker never guesses: where it
// accepts a shard its members equal libarchive's, field for field, which
// tests/fuzz/tar_walker_fuzz.cc and tests/unit/archive/tar_walker_test.cc check.
//
// Pure function of the bytes; thread-safe.
#ifndef SHARDFS_SRC_ARCHIVE_TAR_WALKER_H_
#define SHARDFS_SRC_ARCHIVE_TAR_WALKER_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "base/status.h"
#include "src/archive/scanned_member.h"

namespace shardfs::archive {

// Walks the tar held in `data` (`size` bytes). Returns true and fills
// *members (archive order, the same fields ScanTarBytes would report; data
// hashed if options.checksum) if it understands the whole shard; returns
// false, with *members in an unspecified state, if the shard must go to
// libarchive.
bool WalkTar(const char* data, size_t size, const ScanOptions& options,
             std::vector<ScannedMember>* members);

// The same, reporting members one at a time: calls on_member for each
// member in order, stops at the first non-ok Status, sets *status to it (or
// Ok) and returns true; returns false if it declines the shard. Declining
// after reporting members happens only if `report_before_deciding`, and the
// caller then drops them. Otherwise it reads the shard twice: once to
// decide, from the whole shard, and once to report.
bool WalkTar(const char* data, size_t size, const ScanOptions& options,
             const std::function<Status(ScannedMember&&)>& on_member, Status* status,
             bool report_before_deciding = false);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_TAR_WALKER_H_
