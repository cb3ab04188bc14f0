// The files of an index directory, by name: what RocksDB and shardfs write
// there, so that replacing an index (`--force`) or cleaning up after a build
// removes those and nothing else. An index directory has no subdirectory:
// nothing here ever descends into one, and a directory holding anything
// else (a user's notes, a subdirectory, a symlink) is never removed whole.
#ifndef SHARDFS_INDEX_INDEX_FILES_H_
#define SHARDFS_INDEX_INDEX_FILES_H_

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// The prefix of a table file a view edit (view create, index add) writes in
// the index before it is ingested.
inline constexpr std::string_view kEditTempPrefix = "shardfs-edit-";

// Which names a directory's own files have.
enum class DirKind {
  // A published index: RocksDB's files (CURRENT, IDENTITY, LOCK, LOG,
  // LOG.old.N, MANIFEST-N, OPTIONS-N, N.sst, N.log, N.blob, N.ldb, N.dbtmp,
  // OPTIONS-N.dbtmp) and a view edit's table files (kEditTempPrefix*.sst).
  kIndex,
  // A build's temporary directory beside its output (OUT.tmp-*): an index's
  // files, the table parts before their ingest (index_publish.h: NAME.sst,
  // NAME of [a-z0-9_-], as dirents.sst) and spill runs
  // (index/external_sort.h: members-K-N, dirents-N, inodes-N, dir-inodes-N,
  // PREFIX-merge-N).
  kBuild,
};

// True if a regular file named `name` in a directory of `kind` is one that
// RocksDB or shardfs writes there.
bool IsOwnFileName(std::string_view name, DirKind kind);

// The entries of `dir` that are not regular files with an own name of
// `kind`, sorted; a directory is shown with a trailing '/'. IoError naming
// `dir` if it cannot be listed.
Result<std::vector<std::string>> ForeignEntries(const std::string& dir, DirKind kind);

// Removes the regular files of `dir` with an own name of `kind`, then `dir`
// if that emptied it; never descends into a subdirectory. Returns what is
// left in `dir` (empty if `dir` is gone). IoError naming the file that
// could not be removed.
Result<std::vector<std::string>> RemoveOwnFiles(const std::string& dir, DirKind kind);

// Removes this process's temporary directory `dir` (made with MakeTempDir,
// base/temp_dirs.h) as RemoveOwnFiles(kBuild) does, and forgets it; what it
// cannot remove is left with a warning naming it.
void RemoveBuildDir(const std::string& dir);

// "a, b/ and 3 more": the first `max` of `names`, for a message.
std::string ListNames(const std::vector<std::string>& names, size_t max = 5);

// True if `name` (an entry beside the output named `out_name`) is a
// temporary directory's name (base/temp_dirs.h) made on this host by a
// process that no longer exists; its PID in `*pid`.
bool IsStaleBuildDirName(std::string_view name, std::string_view out_name, pid_t* pid);

// Removes the temporary directories beside `out_abs` (base/temp_dirs.h)
// whose maker is gone: made on this host (the name carries the host) by a
// process that no longer exists (a build killed by SIGKILL, a crash).
// Their files go as RemoveOwnFiles(kBuild) removes them, with one warning
// per directory; anything else in one keeps it, with a warning. A live
// process's directory, another host's and a name without a host (made by an
// older shardfs) are left alone.
void RemoveStaleBuildDirs(const std::filesystem::path& out_abs);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INDEX_FILES_H_
