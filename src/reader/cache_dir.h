// The on-disk side of the chunk cache's directory (-o cache_dir=DIR): opening
// and checking DIR and its chunk subdirectory, the marker that says the
// subdirectory is shardfs's, the lock that keeps it to one process, and the
// names of the files in it. The chunk files' contents and the cache policy
// are src/reader/chunk_cache.h's.
#ifndef SHARDFS_SRC_READER_CACHE_DIR_H_
#define SHARDFS_SRC_READER_CACHE_DIR_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/fd.h"
#include "base/status.h"

namespace shardfs::reader {

// The two files in the chunk subdirectory that are not chunks.
inline constexpr char kCacheMarker[] = "shardfs-cache";
inline constexpr char kCacheLock[] = "lock";

// The chunk subdirectory of an open cache_dir, locked by this process.
struct CacheDir {
  std::string chunk_dir;  // DIR/chunk_subdir, for messages.
  UniqueFd dir_fd;        // The subdirectory: every file operation is relative to it.
  UniqueFd lock_fd;       // Holds the flock while open.
};

// Opens `dir` and `dir`/`chunk_subdir` (creating either 0700 if missing),
// refuses either if it is a symbolic link, owned by another user or writable
// by group or others; refuses a subdirectory that holds files but no marker
// (writing the marker into an empty one) and one that another process has
// locked (AlreadyExists). A lock held by another process is waited for up to `lock_wait`
// (polled): a daemon that was just unmounted still holds it while it exits,
// and a mount right after an unmount must not fail for that.
inline constexpr std::chrono::milliseconds kCacheLockWait{3000};
Result<CacheDir> OpenCacheDir(const std::string& dir, const char* chunk_subdir,
                              std::chrono::milliseconds lock_wait = kCacheLockWait);

// Opens directory `name` under `at` (AT_FDCWD: a path) without following a
// symbolic link in its place, creating it 0700 if it is missing (only it: a
// mistyped parent should fail, not be made). Refuses one that another user
// owns or that group or others may write to: whoever can write there could
// plant files the mount would trust. `shown` names it in errors, after
// "cache_dir ".
Result<UniqueFd> OpenPrivateDir(int at, const char* name, const std::string& shown);

// Opens the cache root `root` (an absolute path) as a default root
// (src/reader/storage_plan.h) is opened, making it and the missing directories
// above it: the nearest existing directory above it is opened by its path
// (a home directory may be a symbolic link), and each directory below that,
// `root` last, is opened, or made and opened, as OpenPrivateDir does, from
// its parent's descriptor. So `root` and every directory made for it is
// refused for exactly what a cache_dir is refused for: a symbolic link,
// another user's, writable by group or others. Errors begin with `root`,
// then name the directory above it that failed, if it was not `root`.
Result<UniqueFd> OpenCacheRoot(const std::string& root);

// "<idhash>-<index>-<gen>.chunk" (hex): a chunk file's name.
std::string FormatChunkName(uint64_t id_hash, uint64_t index, uint64_t gen);
// Parses a chunk file's name; false if `name` is not one.
bool ParseChunkName(std::string_view name, uint64_t* id_hash, uint64_t* index, uint64_t* gen);
// "tmp-<gen>" (hex): the name a chunk file is written under before its rename.
std::string FormatTmpName(uint64_t gen);
// Parses a temp file's name; false if `name` is not one.
bool ParseTmpName(std::string_view name, uint64_t* gen);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CACHE_DIR_H_
