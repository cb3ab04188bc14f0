// Open shard files for the read path: opened lazily, checked against the
// index before first use, kept in a bounded LRU.
//
// A shard is checked (size, then the fingerprint of index/fingerprint.h)
// each time it is opened. A shard that is missing, unreadable or differs is
// marked bad: every read of its files fails with EIO and the reason is logged
// once per shard. Bytes are never served from a shard that failed its check.
//
// Thread safety: all methods may be called from any thread. The LRU and the
// fd table are guarded by mu_; a ShardHandle keeps its fd open while held,
// even if the cache evicts it meanwhile, so a read never uses a closed or
// reused descriptor.
#ifndef SHARDFS_SRC_SHARD_CACHE_H_
#define SHARDFS_SRC_SHARD_CACHE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "index/schema.h"
#include "index/status.h"

namespace shardfs::mount {

// An open shard file; closes it when the last holder lets go.
class OpenShard {
 public:
  explicit OpenShard(int fd) : fd_(fd) {}
  ~OpenShard();
  OpenShard(const OpenShard&) = delete;
  OpenShard& operator=(const OpenShard&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};
using ShardHandle = std::shared_ptr<OpenShard>;

struct ShardCacheOptions {
  size_t max_open = 128;  // Open shard files at most (plus those held).
  // Bytes to ask the kernel to read ahead of a sequential reader of a shard
  // (posix_fadvise WILLNEED); 0 leaves it to the kernel's own readahead.
  uint64_t readahead = 8 << 20;
};

class ShardCache {
 public:
  struct Shard {
    std::string path;  // Where to open it.
    index::ShardMeta meta;
  };
  ShardCache(std::vector<Shard> shards, ShardCacheOptions options);

  // Returns the open, checked shard `id`, opening it if needed.
  // Returns IoError (logged once per shard) if the shard is missing or
  // unreadable, Corruption if it differs from what was indexed.
  Result<ShardHandle> Get(index::ShardId id);

  // Marks shard `id` bad with `reason` (e.g. a short read while mounted),
  // logging once. Later Gets fail until Recheck succeeds.
  void MarkBad(index::ShardId id, const Status& reason);

  // Tells the cache that [pos, pos + len) of shard `id` (open as `fd`) is
  // being read. Returns whether reads of the shard run sequentially: this one
  // starts at or shortly after where the last one, or the last push-ahead,
  // ended. When they do, the next options.readahead bytes are requested from
  // the kernel ahead of time, so a tree-order walk of many small files
  // streams the shard. Lock-free.
  bool NoteRead(index::ShardId id, int fd, uint64_t pos, size_t len);

  // Push-ahead of shard `id`: at most one at a time per shard. BeginPush
  // returns false if one is running; EndPush records where it stopped.
  bool BeginPush(index::ShardId id);
  void EndPush(index::ShardId id, uint64_t end);
  // Drops the cached pages of shard `id` (open as `fd`) before `end` minus
  // 2 MiB, in whole 2 MiB steps (large page-cache folios are only dropped
  // whole), from where the last call stopped. Lock-free.
  void DropBehind(index::ShardId id, int fd, uint64_t end);
  // Where the last read of shard `id` ended: a push-ahead that finds the
  // reader ahead of it skips what the reader has passed.
  uint64_t LastReadEnd(index::ShardId id) const {
    return slots_[id.value].next_pos.load(std::memory_order_relaxed);
  }

  // Opens and checks every shard now. Returns the problems, one per shard.
  std::vector<Status> CheckAll();

  size_t open_count() const;
  size_t shard_count() const { return shards_.size(); }

 private:
  struct Slot {
    ShardHandle handle;                     // Guarded by mu_.
    std::list<uint32_t>::iterator lru_pos;  // Guarded by mu_; valid if handle.
    Status bad;                             // Guarded by mu_.
    std::atomic<bool> logged{false};
    std::atomic<uint64_t> next_pos{0};    // End of the last read.
    std::atomic<uint64_t> prefetched{0};  // Readahead requested up to here.
    std::atomic<uint64_t> pushed_end{0};  // End of the last push-ahead.
    std::atomic<bool> pushing{false};
    std::atomic<uint64_t> dropped{0};  // DropBehind done up to here.
  };
  Result<ShardHandle> Open(uint32_t id);

  const std::vector<Shard> shards_;
  ShardCacheOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<Slot[]> slots_;
  std::list<uint32_t> lru_;  // Guarded by mu_; most recent first.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_SHARD_CACHE_H_
