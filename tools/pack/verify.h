// `shardfs verify`: is a packed tree identical to its source?
//
// Both trees are listed in tree order and compared path by path: the set of
// paths, each entry's type, permission bits, owner, mtime (to the
// nanosecond), the size of files and symlinks, symlink targets, and hard
// links (the names that share a file must be the same on both sides: nlink
// counts names inside the tree). Directory sizes and link counts are
// filesystem details and are not compared.
//
// Content, against an index: the source's XXH3-64 against the checksum the
// index stores (the shards are not read; each shard's size and fingerprint
// are still checked). With `full`, source and shard bytes are both read and
// compared byte for byte, and the shard bytes are also checked against the
// stored checksum. Against a mount (`mounted`): every file is read through
// the mount and compared byte for byte with the source (`full` adds
// nothing). Content is compared by `jobs` threads at once.
//
// Each difference is one line, "KIND: PATH" or "KIND: PATH: SOURCE vs PACKED",
// with KIND one of: missing, extra, type differs, mode differs, owner
// differs, mtime differs, size differs, target differs, nlink differs, hard
// link differs, content differs, checksum differs, unreadable, shard
// differs. Paths are shown raw except that '\' and control characters are
// escaped (\\, \n, \t, \xHH), so each difference stays on one line; the
// root is ".".
#ifndef SHARDFS_TOOLS_PACK_VERIFY_H_
#define SHARDFS_TOOLS_PACK_VERIFY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "index/manifest.h"

namespace shardfs::pack {

struct VerifyOptions {
  std::string index;    // Compare against this index (and its shards), or
  std::string mounted;  // against the tree mounted here. Exactly one is set.
  // How the index's partitions are found if it is a manifest
  // (index/manifest.h); empty: local paths.
  index::PartitionResolver resolve_partition;
  std::string src;
  bool full = false;
  int jobs = 0;  // 0: twice the cores, at least 4.
  bool quiet = false;
};

struct VerifyReport {
  uint64_t source_entries = 0;
  uint64_t packed_entries = 0;
  uint64_t files_compared = 0;  // Files whose content was compared.
  uint64_t bytes_compared = 0;  // Source bytes read or hashed for that.
  // Every difference, in tree order (shard problems first).
  std::vector<std::string> differences;
  std::map<std::string, uint64_t> counts;  // KIND -> number of differences.
  double seconds = 0;

  bool identical() const { return differences.empty(); }
};

// Compares and fills *report. Returns a non-ok Status only when the
// comparison cannot be made at all (the source, the index or the mount
// cannot be opened); differences, unreadable files and bad shards are
// reported, not returned.
Status Verify(const VerifyOptions& options, VerifyReport* report);

// A path as verify prints it (see above).
std::string EscapePath(std::string_view path);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_VERIFY_H_
