// Paths on disk: where one resolves to, whether one lies inside another, and
// replacing one directory by another in a single step. Shared by the
// commands that may replace their output (`index build --force`,
// `pack --force`) so that they decide "is this inside that" one way.
#ifndef SHARDFS_BASE_PATHS_H_
#define SHARDFS_BASE_PATHS_H_

#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs {

// The absolute path `path` names, symlinks resolved in the part of it that
// exists (a missing tail is appended lexically normalised), without a
// trailing '/' (but "/" itself). IoError naming `path` if it cannot be
// resolved (a component that is not a directory, a symlink loop, ...).
Result<std::string> ResolvePath(const std::string& path);

// True if `inner` is `outer` or lies beneath it, comparing whole components
// ("/a/bc" is not inside "/a/b"). Both must be absolute and normal, as
// ResolvePath returns them; nothing on disk is consulted.
bool PathWithin(std::string_view inner, std::string_view outer);

// True if `path` is a directory (not a symlink to one) with no entries.
bool IsEmptyDirectory(const std::string& path);

// Renames `fresh` to a missing `target`, never over something that appeared
// there meanwhile (renameat2 RENAME_NOREPLACE; but over an empty directory
// where the filesystem has no RENAME_NOREPLACE: plain rename(2) replaces
// one). IoError naming both paths (EEXIST if `target` exists).
Status RenameToMissing(const std::string& fresh, const std::string& target);

// What ReplaceDirectory did.
struct Replaced {
  // Where what was at the target now is ("" if nothing was there). The
  // caller decides whether to remove it.
  std::string old_path;
  // False if the filesystem could not exchange the two and the target was
  // missing for a moment (see ReplaceDirectory).
  bool atomic = true;
};

// Puts the directory `fresh` at `target` (same filesystem; what is at
// `target` is the caller's to have checked). The caller fsyncs the parent.
// Missing `target`: `fresh` is renamed to it. Existing `target`: the two
// are swapped in one step (renameat2 RENAME_EXCHANGE), so that `target`
// names the old or the new directory at every moment, a crash included;
// the old one is left at `fresh`'s path. A filesystem that cannot exchange
// (EINVAL, ENOSYS) gets two renames instead: the old one to `fresh` +
// ".old", then `fresh` to `target` (the old one is put back if that fails);
// `target` is missing in between. IoError naming both paths on failure,
// with nothing moved.
Result<Replaced> ReplaceDirectory(const std::string& fresh, const std::string& target);

// ReplaceDirectory's way where the filesystem cannot exchange: two renames.
// Exposed for its tests.
Result<Replaced> ReplaceDirectoryByRenames(const std::string& fresh, const std::string& target);

// fsyncs the directory (or file) at `path`. IoError naming it on failure.
Status SyncPath(const std::string& path);

}  // namespace shardfs

#endif  // SHARDFS_BASE_PATHS_H_
