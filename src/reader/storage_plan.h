// How a volume reads shards that sit on network storage (base/storage.h):
// through the chunk cache (src/reader/shard_fetcher.h), in large aligned
// chunks with several in flight and read ahead along the reader's way, kept
// in a node-local cache directory, so that a shard's bytes cross the network
// once and no READ waits on a round trip per member.
//
// With -o storage=auto (the default) a volume is on network storage when its
// index or any local shard is; -o storage=network and storage=local say so
// instead. On network storage without -o cache_dir the cache goes to the
// first of these that is on a local filesystem and can be used:
//   $XDG_CACHE_HOME/shardfs, $HOME/.cache/shardfs, /var/tmp/shardfs-UID
// each checked as -o cache_dir is (owned by the user, not writable by group
// or others, no symbolic link; the directories made for it too:
// src/reader/cache_dir.h's OpenCacheRoot); one that fails is passed over, for
// the next or for memory. Every process of the user on the node (mounts,
// ranks, DataLoader workers) shares the cache in it (src/reader/chunk_cache.h),
// so each chunk crosses the network once per node. Its size is
// kAutoCacheShare of the free space there, at most the disk cache's default.
// When no directory can be used, the chunks are kept in memory, with one
// warning saying why.
#ifndef SHARDFS_SRC_READER_STORAGE_PLAN_H_
#define SHARDFS_SRC_READER_STORAGE_PLAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/storage.h"
#include "index/index_reader.h"

namespace shardfs::reader {

struct StorageSurvey {
  bool network = false;
  // What was found on network storage, for the mount's message: "index
  // /data/train.idx on nfs", "shard /data/s0.tar on fuse.sshfs",
  // "-o storage=network".
  std::string why;
};

// Where the index at `index_path` and the local shards of `r` live: one
// statfs per distinct directory, no call per member.
StorageSurvey SurveyStorage(const index::IndexReader& r, const std::string& index_path,
                            StorageMode mode);

// The default cache roots, in order of preference (see the top), whether or
// not they exist.
std::vector<std::string> DefaultCacheRoots();

// The first of `roots` that is on local storage and that OpenCacheRoot
// (src/reader/cache_dir.h) opens, made (mode 0700, with the missing directories
// above it) if missing: one that is a symbolic link, another user's or
// writable by group or others is passed over, as a cache_dir is refused.
// NotFound with the reason for each when none can be used ("ROOT: owned by
// uid 4242 (attacker), mode 0777, ...").
Result<std::string> PickCacheRoot(const std::vector<std::string>& roots);

// kAutoCacheShare of the free space of the filesystem of `dir` plus
// `in_use` (bytes the cache already holds there: a cache shared by the
// node's processes must not shrink as it fills), at most `max`; 0 if that
// is less than kMinAutoCache.
inline constexpr double kAutoCacheShare = 0.25;
inline constexpr uint64_t kMinAutoCache = 256ull << 20;
uint64_t AutoCacheSize(const std::string& dir, uint64_t max, uint64_t in_use = 0);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_STORAGE_PLAN_H_
