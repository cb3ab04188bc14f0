// A node-local copy of an index directory that sits on network storage, so
// that a mount's lookups and its opening never wait on a round trip per
// RocksDB block (src/reader/storage_plan.h says when it is made).
//
// The copy is kept in CACHE_ROOT/shardfs-index-copies-v1/KEY-RECORD, KEY a hash of
// the index's real path and RECORD one of a record of what it was copied
// from: each file's name, size, mtime, inode and ctime. A later mount lists
// the index directory (one directory read and a stat per file, a handful of
// files) and reuses the copy whose record matches; after a `view create` or
// `index add` the listing differs, a new copy is made, and the older copies
// of that index are removed. RocksDB's log files (LOG*) and its
// LOCK are not copied.
//
// Safety: CACHE_ROOT must be a directory of this user, with no access for
// others, not a symbolic link; the copy is written into a temporary
// directory beside it and renamed into place; only files named in an old
// copy's record (and the record) are ever deleted. Each file is copied from
// one descriptor, opened without following a symbolic link (nor opening
// anything but a regular file: base/open_file.h) and held on that
// descriptor to what the listing saw (inode, size, mtime, ctime), before the
// copy and after it: a file swapped or written between the listing and the
// copy, or during it, fails the copy. One process at a time makes a given
// copy (a lock file beside it, waited for at most kCopyLockWait).
//
// Relative shard paths of the copy are resolved from the original index's
// directory: the caller opens the copy with ReaderOptions::shard_base.
#ifndef SHARDFS_SRC_READER_INDEX_COPY_H_
#define SHARDFS_SRC_READER_INDEX_COPY_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "base/open_file.h"
#include "base/status.h"

namespace shardfs::reader {

// Not the index cache's subdirectory, which may share the cache root.
inline constexpr char kIndexCopySubdir[] = "shardfs-index-copies-v1";
inline constexpr std::chrono::seconds kCopyLockWait{30};

struct IndexCopy {
  std::string path;     // The copy: open this.
  bool reused = false;  // It was there already, unchanged.
  uint64_t bytes = 0;   // The index's size.
};

// A file of an index directory as the listing saw it (fstatat, not following
// a symbolic link): what its copy is held to and its record says.
struct ListedFile {
  std::string name;
  FileStamp stamp;
};

// Copies file `file.name` of directory `dir` to new file `to` as above:
// from one descriptor, checked to be `file` before and after. Errors name
// the file: InvalidArgument for a symbolic link or a special file (never
// opened for reading), Corruption for another file or a changed one,
// IoError for a read or write that failed. Used by LocalIndexCopy for each
// file; public for its tests.
Status CopyListedFile(const std::string& dir, const ListedFile& file, const std::string& to);

// The copy of index directory `index` under `cache_root`, made or reused.
// Refuses (InvalidArgument) an index of more than `max_bytes`, a cache root
// that fails the checks above, and an index directory holding anything but
// regular files. A file that changed between the listing and its copy
// (Corruption above) has the index listed and copied again, three times at
// most. Errors name the path and the reason.
Result<IndexCopy> LocalIndexCopy(const std::string& index, const std::string& cache_root,
                                 uint64_t max_bytes);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_INDEX_COPY_H_
