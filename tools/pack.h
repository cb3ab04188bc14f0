// `shardfs pack`: a directory tree in, tar shards and their index out.
//
// The tree is scanned first (in parallel; nothing is read but directories and
// inodes), sorted in tree order (index::TreeOrderLess) and cut into shards;
// then a pool of reader threads opens and reads files ahead of one writer
// thread, which writes the shards in order with tools/TarWriter and feeds
// each member's exact data offset and XXH3-64 to index::IndexWriter. The
// index is published last, at OUT_DIR/index.
//
// Shards. Members are grouped into samples (WebDataset): consecutive
// non-directory entries of one directory whose names agree up to the first
// '.' ("a/img1.jpg", "a/img1.cls"). A sample is never split; a shard is cut
// before a sample that would take it past shard_size bytes (trailer
// included) or max_files members. A sample larger than shard_size gets a
// shard of its own. Directories (the root as "./") and symlinks are members
// too; the second and later names of a hard-linked file are tar hard links.
//
// Safety. The source is opened read-only, O_NOATIME where allowed, with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) so nothing outside SRC_DIR
// is read even if the tree changes under the pack. Each shard is written as
// NAME.tmp, fsynced and renamed; the directory is fsynced before the index is
// published atomically. An interrupted pack therefore leaves no index.
//
// Re-running. A pack starts clean: it refuses to run if OUT_DIR/index exists
// (unless force, which removes the old index before anything else is
// touched), and it removes every file in OUT_DIR that its name pattern could
// have produced (shards and NAME.tmp) and index.tmp-* leftovers of an
// interrupted publish. Output is deterministic (same tree, same options ->
// byte-identical shards), so a clean restart reproduces an interrupted pack.
// A failed pack removes the shards it wrote.
//
// Thread safety: Pack and ScanTree are self-contained; call them from one
// thread each.
#ifndef SHARDFS_TOOLS_PACK_H_
#define SHARDFS_TOOLS_PACK_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "index/index_writer.h"
#include "index/status.h"
#include "tools/progress.h"

namespace shardfs::tools {

// ---- The source tree, as pack and verify see it ------------------------------

enum class SourceKind : uint8_t { kFile, kDir, kSymlink, kSpecial };

struct SourceEntry {
  std::string path;  // Relative, '/'-separated; "" is the root.
  // Where to open the entry, relative to the root, when that is not `path`
  // (an entry reached through a followed symlink). See open_path().
  std::string src;
  SourceKind kind = SourceKind::kFile;
  const char* special = "";  // kSpecial: "fifo", "socket", "character device", ...
  // Non-empty if the entry could not be scanned (a directory that would not
  // open, an inode that would not stat): the reason.
  std::string unreadable;
  uint32_t mode = 0;  // st_mode, type bits included.
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t nlink = 0;
  std::string link_target;  // Symlinks: the raw target.

  const std::string& open_path() const { return src.empty() ? path : src; }
};

struct TreeScanOptions {
  // fnmatch(3) patterns. One without '/' is matched against each entry's
  // name, one with '/' against its path relative to the root; a match leaves
  // the entry (and all below it) out.
  std::vector<std::string> excludes;
  // A file of paths relative to the root, one per line: only those entries
  // (a directory with everything below it) and the directories above them
  // are scanned. Returns InvalidArgument naming a path that does not exist.
  std::string from_list;
  // Symlinks whose target lies inside the root are replaced by the target
  // (a directory is walked, with loops detected); the others stay symlinks,
  // with a warning.
  bool follow_symlinks = false;
  int jobs = 4;
  bool quiet = true;  // No progress display.
};

struct TreeScan {
  std::string root;                   // The root's real path.
  std::vector<SourceEntry> entries;   // In tree order; entries[0] is the root.
  std::vector<std::string> warnings;  // "PATH: symlink kept: target outside SRC_DIR", ...
};

// Scans the tree at `root` (lstat of every entry, readlink of symlinks; no
// file is opened). Entries that cannot be scanned are returned with
// `unreadable` set; only a root that cannot be opened is an error.
Result<TreeScan> ScanTree(const std::string& root, const TreeScanOptions& options);

// Opens `rel` below the directory `dir_fd` read-only without following any
// symlink and without leaving the directory (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS; O_NOFOLLOW openat where openat2 is missing). Tries
// O_NOATIME first. Returns the fd or -1 with errno set.
int OpenBeneath(int dir_fd, const std::string& rel, int flags);

// XXH3-64 of the first `size` bytes of `fd`, read with pread from offset 0;
// holes (SEEK_HOLE) are hashed as zeros without being read. Adds the bytes
// covered to `progress` if not null. Returns IoError naming `what` if a read
// fails, and sets *short_read if the file ended before `size`.
Result<uint64_t> HashFile(int fd, uint64_t size, std::string_view what, bool* short_read,
                          Progress* progress = nullptr);

// ---- Shard names ------------------------------------------------------------

// A printf-like shard name with exactly one integer conversion
// ("train-%06d.tar"; "%%" is a literal '%').
struct ShardNamePattern {
  std::string prefix;
  std::string suffix;
  int width = 0;
  bool zero_pad = false;

  std::string Format(uint64_t n) const;
  // True if Format could have produced `name` (or `name` minus ".tmp" when
  // `or_tmp`).
  bool Matches(std::string_view name, bool or_tmp) const;
};
// Returns InvalidArgument if `text` has no or several conversions, a
// conversion other than d/u/i, or a '/'.
Result<ShardNamePattern> ParseShardName(std::string_view text);

// ---- Pack -------------------------------------------------------------------

struct PackOptions {
  std::string src;
  std::string out;
  uint64_t shard_size = 1ull << 30;
  uint64_t max_files = 0;  // Members per shard; 0: no limit.
  std::string name = "train-%06d.tar";
  int jobs = 0;  // Reader threads; 0: twice the cores, at least 4.
  std::string from_list;
  std::vector<std::string> excludes;
  bool skip_unreadable = false;
  bool skip_special = false;
  bool follow_symlinks = false;
  bool quiet = false;
  bool force = false;
};

struct PackReport {
  uint64_t files = 0;      // Regular files stored with their data.
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;  // Names stored as tar hard links.
  uint64_t bytes = 0;      // File content bytes.
  uint64_t shards = 0;
  uint64_t shard_bytes = 0;
  std::vector<std::string> shard_paths;
  std::string index_path;
  index::WriteStats index_stats;
  // "PATH: reason" for entries left out (--skip-unreadable, --skip-special).
  std::vector<std::string> skipped;
  // "PATH: reason" for each problem that failed the pack.
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  double seconds = 0;
};

// Packs options.src into shards and an index in options.out. On failure
// returns a non-ok Status (report->errors then lists every unreadable or
// unsupported entry found, each with its reason) and publishes no index:
// InvalidArgument for bad options or entries that cannot be packed,
// AlreadyExists if OUT_DIR/index exists and !force, IoError if writing fails,
// Corruption if a file changed while it was packed.
Status Pack(const PackOptions& options, PackReport* report);

}  // namespace shardfs::tools

#endif  // SHARDFS_TOOLS_PACK_H_
