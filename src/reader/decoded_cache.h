// DecodedCache: the mount's bounded, in-memory cache of decoded bytes: an
// inflated zip member, a decoded interval of a compressed tar between two
// seek points. Raw shard bytes are the chunk cache's (src/reader/chunk_cache.h);
// this cache sits above it, so a remote compressed shard is fetched once and
// decoded once per block.
//
// Blocks are variable-sized strings keyed by (shard, block), where the block
// number is the caller's (a member's compressed offset, a seek point's
// ordinal). The cache only keeps what it is given: `decode` makes a block.
//
// Eviction: S3-FIFO, as the chunk cache's (see chunk_cache.h for why), over
// bytes instead of chunks: new blocks enter a small FIFO (10% of capacity);
// one read again while there moves to main on its way out, others are dropped
// and remembered in a ghost of keys; main evicts CLOCK-like on 2-bit
// frequencies. A shuffled sweep of an epoch thus passes through small and
// leaves the reused blocks in main alone. A block larger than the whole
// capacity is returned to its caller and not kept.
//
// A block may be a prefix of what its key names (the start of a compressed
// tar's interval, decoded only as far as a read needed: stream_reader.h).
// Get's `min_size` says how much of it the caller needs: a resident block
// shorter than that is a miss, and the longer block its decode makes
// replaces it under the same key.
//
// Single flight with a bound: concurrent Gets of one absent key run `decode`
// once; the other callers wait for it at most `wait`, then decode the block
// themselves (their copy is returned, the cache keeps the first). No caller
// ever waits without a bound on another request. A decode error is returned
// to the caller that ran it and to its waiters, and never cached: the next
// Get tries again.
//
// Thread safety: every method may be called from any thread. `decode` runs
// outside the lock.
#ifndef SHARDFS_SRC_READER_DECODED_CACHE_H_
#define SHARDFS_SRC_READER_DECODED_CACHE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/status.h"

namespace shardfs::reader {

struct DecodedKey {
  uint32_t shard = 0;
  uint64_t block = 0;
  bool operator==(const DecodedKey&) const = default;
};

struct DecodedCacheStats {
  uint64_t capacity = 0;
  uint64_t hits = 0;       // Gets answered from the cache.
  uint64_t decodes = 0;    // Calls of a `decode` (each miss, each give-up).
  uint64_t joined = 0;     // Gets that waited for another caller's decode and got its block.
  uint64_t gave_up = 0;    // Waits that hit their bound and decoded themselves.
  uint64_t too_short = 0;  // Resident, joined or in-flight blocks shorter than needed.
  uint64_t errors = 0;     // Decodes that failed.
  uint64_t evictions = 0;  // Blocks dropped to stay within capacity.
  uint64_t resident_bytes = 0;
  uint64_t resident_blocks = 0;
  uint64_t decoded_bytes = 0;  // Bytes made by all decodes.
};

class DecodedCache {
 public:
  using Block = std::shared_ptr<const std::string>;
  using Decoder = std::function<Result<std::string>()>;

  // capacity_bytes 0: nothing is kept (every Get decodes, concurrent ones
  // still share one decode).
  explicit DecodedCache(uint64_t capacity_bytes);
  ~DecodedCache();
  DecodedCache(const DecodedCache&) = delete;
  DecodedCache& operator=(const DecodedCache&) = delete;

  // The block for `key`: resident, or made now by `decode` (see above).
  Result<Block> Get(DecodedKey key, const Decoder& decode, std::chrono::milliseconds wait) {
    return Get(key, 0, decode, wait);
  }
  // As above, but a block shorter than `min_size` bytes does not answer:
  // `decode` makes one (that should be at least that long), and it replaces
  // a shorter resident block. A caller does not wait for a decode started
  // for a smaller min_size, and one whose flight brought a block too short
  // anyway decodes itself, without waiting again.
  Result<Block> Get(DecodedKey key, uint64_t min_size, const Decoder& decode,
                    std::chrono::milliseconds wait);

  DecodedCacheStats stats() const;

 private:
  struct KeyHash {
    size_t operator()(const DecodedKey& k) const noexcept {
      return static_cast<size_t>((k.block * 0x9E3779B97F4A7C15ull) ^ k.shard);
    }
  };
  struct Entry;
  struct Inflight;

  void InsertLocked(DecodedKey key, Block block);
  void EvictLocked();
  void AddGhostLocked(DecodedKey key);

  const uint64_t capacity_;
  const uint64_t small_target_;
  mutable std::mutex mu_;
  std::unordered_map<DecodedKey, std::shared_ptr<Entry>, KeyHash> map_;
  std::deque<std::shared_ptr<Entry>> small_, main_;  // Heads at back, tails at front.
  uint64_t small_bytes_ = 0, main_bytes_ = 0;
  std::deque<DecodedKey> ghost_order_;
  std::unordered_set<DecodedKey, KeyHash> ghost_;
  std::unordered_map<DecodedKey, std::shared_ptr<Inflight>, KeyHash> inflight_;
  DecodedCacheStats stats_;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_DECODED_CACHE_H_
