// The on-disk side of the chunk cache's directory (-o cache_dir=DIR): opening
// and checking DIR and its chunk subdirectory, the marker that says the
// subdirectory is shardfs's, its lock file, and the names of the files in it. The chunk files'
// contents and the cache policy are src/reader/chunk_cache.h's.
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

// The chunk subdirectory of an open cache_dir.
struct CacheDir {
  std::string chunk_dir;  // DIR/chunk_subdir, for messages.
  UniqueFd dir_fd;        // The subdirectory: every file operation is relative to it.
  UniqueFd lock_fd;       // Its lock file: flock'd by OpenCacheDir, not by OpenSharedCacheDir.
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

// OpenCacheDir for a directory that many processes use at once: the same
// checks and marker, and the lock file opened (created 0600 if missing) but
// not locked; its users flock it for what must not run twice at once.
Result<CacheDir> OpenSharedCacheDir(const std::string& dir, const char* chunk_subdir);

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

// "<idhash>-<index>.chunk" (hex): a chunk file's name, the same in every
// process, so that any of them finds a chunk another one stored.
std::string FormatChunkName(uint64_t id_hash, uint64_t index);
// Parses a chunk file's name; false if `name` is not one.
bool ParseChunkName(std::string_view name, uint64_t* id_hash, uint64_t* index);
// "<idhash>-<index>.claim" (hex): the file that says a process is fetching
// that chunk (created O_EXCL; it holds the holder's ProcessStamp as text).
std::string FormatClaimName(uint64_t id_hash, uint64_t index);
bool ParseClaimName(std::string_view name);

// A process as its files name it: its pid and its start time (clock ticks
// after boot, /proc/PID/stat), so that a pid used again by a new process is
// not taken for the one that wrote the file.
struct ProcessStamp {
  int64_t pid = 0;
  uint64_t start = 0;  // 0: unknown.
};
// This process's stamp (taken again after a fork).
ProcessStamp ThisProcess();
// True only if the process `p` is provably gone: no process has its pid, or
// the one that has it started at another time. A process of another pid
// namespace is not seen: processes that share a cache directory must share
// their pid namespace, or a live writer's temp file may be taken for a dead
// one's (its Insert then fails; no chunk is ever torn or wrong).
bool ProcessGone(const ProcessStamp& p);
// "<pid> <start>", and back; false if `text` is not one.
std::string FormatStamp(const ProcessStamp& p);
bool ParseStamp(std::string_view text, ProcessStamp* p);

// Whether temp or claim file `name` in directory `dir_fd` was left by a
// process that is gone: its name (a temp file) or its text (a claim) says
// which process wrote it. A claim still empty is its live writer's.
bool LeftByTheDead(int dir_fd, const char* name);

// "tmp-<gen>" (hex): the name a file is written under before its rename.
std::string FormatTmpName(uint64_t gen);
// "tmp-<pid>-<start>-<seq>" (hex): a chunk file before its rename, named
// after its writer so that only a dead writer's is ever deleted.
std::string FormatOwnedTmpName(const ProcessStamp& p, uint64_t seq);
bool ParseOwnedTmpName(std::string_view name, ProcessStamp* p);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CACHE_DIR_H_
