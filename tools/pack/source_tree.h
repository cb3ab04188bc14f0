// The loose source tree as pack and verify see it: a parallel scan that
// lists every entry (lstat and readlink only; no file is opened), opening a
// file without leaving the tree, and hashing a file's content.
//
// Thread safety: ScanTree is self-contained (it runs its own threads);
// OpenBeneath and HashFile may be called from any thread.
#ifndef SHARDFS_TOOLS_PACK_SOURCE_TREE_H_
#define SHARDFS_TOOLS_PACK_SOURCE_TREE_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "index/schema.h"

namespace shardfs::pack {

enum class SourceKind : uint8_t { kFile, kDir, kSymlink, kSpecial };

// A file of an index source (pack --from-index): where its bytes lie in the
// source's shards, as the index records them.
struct StoredData {
  uint32_t shard = 0;  // Into StoredShards.
  // The file's data ranges: (logical, length, physical in the shard). One
  // range (none for an empty file) unless sparse; between them, zeros.
  std::vector<index::Extent> ranges;
  bool sparse = false;
  // The index's XXH3-64 of the stored bytes (the ranges' bytes in order).
  bool has_xxh3 = false;
  uint64_t xxh3 = 0;
};

// The source shards of an index source, open and checked against the
// index (size and fingerprint) before anything is read.
struct StoredShards {
  std::vector<int> fds;            // -1 for shards no file of the source uses.
  std::vector<std::string> paths;  // As the index names them, for messages.
};

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
  int64_t ctime_ns = 0;  // What tells a file apart where inode numbers are not kept.
  uint64_t size = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t nlink = 0;
  std::string link_target;  // Symlinks: the raw target.
  // Files of an index source: where the bytes are (read from the shards,
  // not opened below a root). Null for a loose tree.
  std::shared_ptr<const StoredData> stored;

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
  // Instead of from_list: these paths (normalized, as ReadPathList returns
  // them), with the same meaning. Empty: the root alone (pack --part's part
  // of a list that takes no path). Null: not used.
  const std::vector<std::string>* only = nullptr;
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
  // With TreeScanOptions::from_list: its paths as ReadPathList returns
  // them, in the file's order (the order pack stores samples in).
  std::vector<std::string> listed;
};

// Scans the tree at `root` (lstat of every entry, readlink of symlinks; no
// file is opened). Entries that cannot be scanned are returned with
// `unreadable` set; only a root that cannot be opened is an error.
Result<TreeScan> ScanTree(const std::string& root, const TreeScanOptions& options);

// The paths of a --from-list FILE, one per line (empty lines skipped), each
// normalized (index::NormalizeMemberPath), in the file's order. Returns
// InvalidArgument naming FILE and the line for a path that cannot be a
// member path or for a file without paths, or the open error naming FILE.
Result<std::vector<std::string>> ReadPathList(const std::string& file);

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

// Shard `shard` of `shards` as messages name it: its path, or its number.
std::string StoredShardName(const StoredShards& shards, uint32_t shard);

// Logical bytes [pos, pos + n) of the stored file `e` (zeros between its
// ranges) into `buf`, read from its shard. Returns IoError naming the shard
// if a read fails or the shard ends early.
// REQUIRES: e.stored; pos + n <= e.size.
Status ReadStoredAt(const StoredShards& shards, const SourceEntry& e, uint64_t pos, char* buf,
                    size_t n);

// Why a stored file's bytes cannot be trusted: "shard P: changed since it was
// indexed: <what>".
std::string StoredChangedReason(const StoredShards& shards, const StoredData& d,
                                std::string_view what);

// Feeds `n` zero bytes (a hole of a sparse file) to `state`.
void HashZeros(XXH3_state_t* state, uint64_t n);

// fstat(2) of an open source file, all but its access time (st_atim is
// zero). A FUSE filesystem mounted read-write marks a file's atime stale
// after every read, so an fstat after a read asks the daemon again; statx(2)
// without STATX_ATIME is answered from the attributes the kernel holds while
// they are valid, as an fstat before the read is. Returns 0, or -1 with
// errno set.
int StatOpenFile(int fd, struct stat* st);

// st_mtim in nanoseconds, as SourceEntry::mtime_ns holds it.
int64_t MtimeNs(const struct stat& st);
int64_t CtimeNs(const struct stat& st);

// Which devices are FUSE filesystems, asked once per device with fstatfs(2)
// (on FUSE a request to the daemon; on sshfs a round trip to the server).
// Keep one for one pack: device numbers are reused once unmounted.
// Thread-safe.
class FuseDevices {
 public:
  // Whether the filesystem of `fd`, device `dev`, is FUSE. Returns -1 with
  // errno set if fstatfs fails (not remembered).
  int IsFuse(dev_t dev, int fd);

 private:
  std::mutex mu_;
  std::vector<std::pair<dev_t, bool>> known_;  // Guarded by mu_.
};

// Whether `st`, of the file open at `fd`, is not the file the scan saw as
// `e`: not a regular file, another device, or another inode number. A FUSE
// filesystem may number a file anew once the kernel has forgotten it (sshfs
// without -o use_ino numbers files per lookup), so there a new number with
// the scan's ctime is the same file: a file put in its place has a ctime of
// its own. `fuse` tells the FUSE devices.
bool ReplacedSince(const SourceEntry& e, const struct stat& st, int fd, FuseDevices* fuse);

// How a path is shown in pack's messages: as is, the root as ".".
std::string ShownPath(std::string_view path);

// "changed while being packed (size A -> B, mtime C -> D)": `e` as scanned,
// `st` as found now.
std::string ChangedReason(const SourceEntry& e, const struct stat& st);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_SOURCE_TREE_H_
