// A cheap identity for a shard file, so a mount can tell that a shard was
// replaced after indexing without reading it whole.
#ifndef SHARDFS_INDEX_FINGERPRINT_H_
#define SHARDFS_INDEX_FINGERPRINT_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "base/fd.h"
#include "base/open_file.h"
#include "base/status.h"

namespace shardfs::index {

// Bytes hashed at each end of the file.
inline constexpr uint64_t kFingerprintSpan = 64 * 1024;

// XXH3-64 over: the first kFingerprintSpan bytes, the last kFingerprintSpan
// bytes (overlapping for small files), and the size as 8 little-endian bytes.
// Reads with pread on `fd`; `size` is the size the caller expects.
// Returns IoError if the reads fail or come up short.
Result<uint64_t> ShardFingerprint(int fd, uint64_t size);

// The same over any reader of the shard's bytes (a remote shard's ranges):
// read_at(buf, len, pos) fills buf with bytes [pos, pos + len).
using ReadAtFn = std::function<Status(char* buf, size_t len, uint64_t pos)>;
Result<uint64_t> ShardFingerprint(uint64_t size, const ReadAtFn& read_at);

struct ShardMeta;

// Corruption naming shard `location` (a URL redacted) unless `fp` is the
// fingerprint it was indexed with.
Status CheckShardFingerprint(const std::string& location, const ShardMeta& meta, uint64_t fp);

// How OpenCheckedShard opens and checks a local shard.
struct ShardCheck {
  // The mtime too, to the nanosecond: for readers that check nothing after
  // the open (the kernel's EROFS driver), where a shard rewritten to the
  // same head and tail must still be refused.
  bool mtime = false;
  // Non-empty: the directory the shard's stored relative path must stay in,
  // with no symbolic link on the way (base/open_file.h), for an index the
  // reader does not trust to name files on this machine.
  std::string beneath;
};

// Checks open local shard `fd` (`st` its fstat) against `meta`, as
// OpenCheckedShard does after the open: size, with check.mtime the mtime,
// and the fingerprint. Corruption naming `path` and what differs. For a
// caller that keeps the descriptor of a shard that differs (verify reports
// each file's difference).
Status CheckShardFile(int fd, const struct stat& st, const std::string& path, const ShardMeta& meta,
                      const ShardCheck& check = {});

// Opens local shard file `path` (IndexReader::ShardPath) and checks, on the
// very descriptor returned, that it is the file `meta` describes: a regular
// file (nothing else is opened: base/open_file.h), of the indexed size, with
// check.mtime of the indexed mtime, and of the indexed fingerprint. A
// slice's file is checked whole. With check.beneath, `path` must be
// beneath/meta.path. Corruption naming the path and what differs; the
// errno's Status if the file cannot be opened (sys_errno set). With `stamp`,
// the descriptor's stamp as it was before the fingerprint was read
// (base/open_file.h): a reader that compares it before each use serves
// nothing written after the check.
Result<UniqueFd> OpenCheckedShard(const std::string& path, const ShardMeta& meta,
                                  const ShardCheck& check = {}, FileStamp* stamp = nullptr);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_FINGERPRINT_H_
