// The mount's bounded local cache of shard chunks: on disk under
// `-o cache_dir=DIR,cache_size=SIZE`, or in memory without cache_dir.
//
// Chunk i of shard s holds bytes [i*chunk_size, min(size, (i+1)*chunk_size))
// of the shard. The cache only stores and evicts: the caller fetches, and
// says which reads are re-uses.
//
// Eviction: S3-FIFO (Yang et al., "FIFO queues are all you need for cache
// eviction", SOSP 2023).
//   A training epoch sweeps every chunk of the dataset once, in tree order or
//   shuffled, while a smaller set (metadata-heavy shards, a validation split,
//   the files a loader reopens) is read again and again. Under plain LRU each
//   chunk of the sweep becomes "most recent" and one sweep larger than the
//   cache flushes the reused set. S3-FIFO keeps three FIFOs:
//   - small (10% of capacity): every new chunk enters here. A chunk leaving it
//     moves to main if it was referenced (a Read with reference=true) while
//     there; otherwise it is evicted and its key goes to the ghost.
//   - main (the rest): chunks that proved themselves, each with a 2-bit
//     frequency. A chunk at main's tail with frequency > 0 is reinserted at
//     the head with frequency - 1 (CLOCK-like); at 0 it is evicted.
//   - ghost: keys only, of chunks evicted from small, as many as main holds
//     chunks at capacity. A miss whose key is still in the ghost was evicted
//     too early: its Insert goes straight into main.
//   Main is only evicted from while small is below its 10% share, so a sweep
//   of new chunks, each used once, passes through small and leaves main (the
//   reused set) alone. All three queues are FIFOs: a hit only sets bits, it
//   never moves a chunk, so hits are cheap under the lock.
//   Chunks found on disk at Open enter main, oldest (by mtime) at the tail,
//   frequency 0: they are kept until main must shrink, oldest first.
//
// Disk layout. DIR is the user's (cache_dir=DIR); the cache's files live in
// a subdirectory of it that shardfs makes, and nowhere else:
//   DIR/                           this user's, not writable by group or others.
//   DIR/shardfs-chunks-v2/         made 0700 by shardfs; the same rules.
//     shardfs-cache                the marker (0600): this directory is shardfs's.
//     lock                         flock'd by the one process using DIR (0600).
//     tmp-<gen>                    a chunk being written (0600); deleted at Open.
//     <idhash>-<index>-<gen>.chunk a complete chunk (0600; hex numbers).
//   What is promised:
//   - Refused at Open, with an error naming the directory and the reason:
//     DIR or the subdirectory a symbolic link, owned by another user, or
//     writable by group or others (whoever can write there could plant a
//     chunk: the XXH3 sums below catch damage, not a forger); a subdirectory
//     without the marker that is not empty. Both are opened once, O_NOFOLLOW,
//     and every later file operation is relative to the subdirectory's
//     descriptor, so renaming or relinking the paths afterwards changes
//     nothing. (Links above DIR are followed: whoever controls them can make
//     the mount fail, or lead it to a directory that is then refused.)
//   - Nothing outside the subdirectory is read, written or deleted (an old
//     flat-layout cache in DIR is ignored, left in place). Inside it, Open
//     deletes only regular files of this user with the names above that are
//     temp files or damaged chunks; anything else is left alone and logged
//     (ChunkCacheStats::other_files).
//   - Chunks are readable by this user only: a private bucket stays private.
//   <idhash> is XXH3-64 of the shard's identity seeded with chunk_size, so a
//   replaced shard or another chunk size never matches (what the identity
//   holds and why it changes with the shard's bytes: ChunkIdentity in
//   src/reader/volume.cc). <gen> makes each stored copy's name unique, so a
//   deferred delete of an evicted copy never removes a newer copy of the
//   same chunk.
//   A chunk file is a 64-byte header, then the payload:
//     0  8  magic "SHFSCHNK"
//     8  4  format version (kFormatVersion), little-endian like all fields
//    12  4  payload length
//    16  8  identity hash
//    24  8  chunk index
//    32  8  payload XXH3-64
//    40 16  zero
//    56  8  XXH3-64 of bytes [0, 56)
//   A chunk is written to a temp file and renamed into place, so a kill -9
//   mid-Insert leaves at most a temp file, never a torn chunk file. No fsync:
//   a process crash loses no written data. After a power loss a renamed file
//   may hold garbage; the header checksum (at Open) or the payload XXH3 (on
//   the first read of each chunk in a process) catches it and drops the chunk.
//
// Capacity counts payload plus on-disk overhead (header, rounded up to 4 KiB
// blocks) in disk mode, payload in memory mode. Chunks of identities not
// given to Open ("foreign": another index, another chunk size) stay on disk,
// count against capacity and are evicted before anything else.
//
// Thread safety: every method may be called from any thread concurrently.
// Bookkeeping (map, queues, ghost, stats) is guarded by mu_, held only for
// bookkeeping; chunk payload I/O and copies run outside it. A Read pins the
// chunk (a shared_ptr to its Slot); eviction only unmaps it, and the memory
// or the file goes away when the last pin is dropped (deferred delete), so a
// read of a chunk being evicted still reads it whole. Evicted but pinned
// chunks may exceed capacity briefly, by at most one chunk per reader.
#ifndef SHARDFS_SRC_READER_CHUNK_CACHE_H_
#define SHARDFS_SRC_READER_CHUNK_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "src/reader/cache_dir.h"

namespace shardfs::reader {

struct ChunkCacheOptions {
  std::string dir;                // Empty: memory only.
  uint64_t capacity = 0;          // Bytes, payload + on-disk overhead; >= one full chunk.
  uint64_t chunk_size = 4 << 20;  // Bytes; 1 .. 1 GiB.
  // How long a lock held by another process is waited for (OpenCacheDir).
  std::chrono::milliseconds lock_wait = kCacheLockWait;
};

// What a shard is: `identity` names its exact content, and must differ
// whenever the content can (the mount's: index database id, shard ordinal,
// location, size, fingerprint, and a local shard's inode and times or a
// remote one's ETag); `size` is its length in bytes, which fixes each chunk's
// length.
struct ChunkShard {
  std::string identity;
  uint64_t size = 0;
};

struct ChunkKey {
  uint32_t shard = 0;  // Index into the shards given to Open.
  uint64_t index = 0;  // Chunk number within the shard.
  bool operator==(const ChunkKey&) const = default;
};

struct ChunkCacheStats {
  uint64_t capacity = 0;
  uint64_t hits = 0;             // Reads answered.
  uint64_t misses = 0;           // Reads not answered (absent or corrupt).
  uint64_t inserts = 0;          // Chunks stored.
  uint64_t evictions = 0;        // Chunks evicted to stay within capacity.
  uint64_t resident_bytes = 0;   // Charged against capacity, foreign included.
  uint64_t resident_chunks = 0;  // Of this index's shards.
  uint64_t small_chunks = 0;     // resident_chunks = small_chunks + main_chunks.
  uint64_t main_chunks = 0;
  uint64_t ghost_keys = 0;
  uint64_t ghost_hits = 0;      // Inserts that went straight to main.
  uint64_t foreign_chunks = 0;  // On disk, of other identities.
  uint64_t foreign_bytes = 0;
  uint64_t reused_at_open = 0;                 // Chunks found intact-looking on disk at Open.
  uint64_t corrupt_dropped = 0;                // Chunks whose payload failed its check.
  uint64_t other_files = 0;                    // Files at Open shardfs did not write: left alone.
  std::vector<uint64_t> shard_resident_bytes;  // Payload bytes, per shard.
};

class ChunkCache {
 public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr size_t kHeaderSize = 64;
  // The subdirectory of DIR that holds the cache's files.
  static constexpr char kChunkDir[] = "shardfs-chunks-v2";

  // Opens the cache. Disk mode: creates DIR (0700) if its parent exists and
  // DIR/kChunkDir (0700) with its marker, refuses either if it is a symbolic
  // link, another user's, or writable by group or others (InvalidArgument
  // naming the directory and why), takes an exclusive flock on its lock file
  // (InvalidArgument "cache_dir DIR: in use by another shardfs process" if
  // held), deletes this process's kind of temp files and damaged chunk files
  // (bad header, wrong length), leaves other files alone, registers this
  // index's chunks (reused_at_open) and the foreign ones, and evicts down to
  // capacity. Returns InvalidArgument for a bad capacity or chunk size, and
  // an error naming DIR if it cannot be created, read or written.
  static Result<std::unique_ptr<ChunkCache>> Open(ChunkCacheOptions options,
                                                  std::vector<ChunkShard> shards);
  ~ChunkCache();
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  // Copies bytes [offset, offset+len) of the chunk into `buf` and returns true
  // if the chunk is resident and intact; returns false (a miss) otherwise. A
  // disk chunk's payload is checked against its XXH3 on its first read in this
  // process; a mismatch deletes it and counts corrupt_dropped. `reference`:
  // this read is a re-use (sets the policy's frequency bits); pass false for
  // the further reads of a chunk within one sequential sweep, so they count
  // as one use. A range past the chunk's end is a miss.
  bool Read(ChunkKey key, uint64_t offset, size_t len, char* buf, bool reference);

  // Disk mode: where bytes [offset, offset+len) of the chunk lie in its file,
  // if the chunk is resident and its payload has already been checked in
  // this process (by a Read). Counts a hit, like Read. False otherwise
  // (nothing counted: Read, which checks, is the way in).
  bool Locate(ChunkKey key, uint64_t offset, size_t len, bool reference,
              std::shared_ptr<const UniqueFd>* file, uint64_t* file_pos);

  // Whether the chunk is resident. Changes nothing.
  bool Contains(ChunkKey key) const;

  // Stores a complete chunk; `len` must be the chunk's length (InvalidArgument
  // otherwise, or for a key out of range). Evicts to stay within capacity. A
  // chunk already resident is left as it is. Returns IoError naming the file
  // if it cannot be written (the cache is unchanged then).
  Status Insert(ChunkKey key, const char* data, size_t len);

  // Drops everything, memory and disk (foreign chunks too). Counters other
  // than the resident ones are kept.
  void Clear();

  ChunkCacheStats stats() const;

  // The length of chunk `key`, 0 if out of range.
  uint64_t ChunkLength(ChunkKey key) const;

 private:
  enum class Queue : uint8_t { kSmall, kMain };
  struct Slot;
  struct KeyHash {
    size_t operator()(const ChunkKey& k) const noexcept {
      return static_cast<size_t>((k.index * 0x9E3779B97F4A7C15ull) ^ k.shard);
    }
  };
  struct Foreign {
    std::string name;
    uint64_t charge;
  };

  ChunkCache(ChunkCacheOptions options, std::vector<ChunkShard> shards);
  Status OpenDir();
  Status Scan();
  uint64_t Charge(uint64_t len) const;
  // A chunk file's name in the subdirectory, and its path (for messages).
  std::string ChunkName(ChunkKey key, uint64_t gen) const;
  std::string ChunkPath(ChunkKey key, uint64_t gen) const;
  // Writes the chunk file for `key`; returns its generation.
  Result<uint64_t> WriteChunk(ChunkKey key, const char* data, size_t len, uint64_t gen);
  // Reads from the open chunk file `fd` of `slot`.
  bool ReadDisk(const Slot& slot, int fd, uint64_t offset, size_t len, char* buf,
                bool verify) const;
  // The open chunk file of `slot`, opened now if it is not open; null if it
  // cannot be opened. The last kOpenChunkFiles opened stay open.
  std::shared_ptr<const UniqueFd> ChunkFile(const std::shared_ptr<Slot>& slot);

  // The policy. REQUIRES: mu_ held. Dead slots and foreign names to delete
  // are collected and dropped by the caller after unlocking.
  void AddLocked(std::shared_ptr<Slot> slot, Queue q);
  void RemoveLocked(Slot* slot, std::vector<std::shared_ptr<Slot>>* dead);
  // Evicts until `incoming` more bytes fit.
  void EvictToFitLocked(uint64_t incoming, std::vector<std::shared_ptr<Slot>>* dead,
                        std::vector<std::string>* dead_foreign);
  void EvictOneLocked(std::vector<std::shared_ptr<Slot>>* dead,
                      std::vector<std::string>* dead_foreign);
  void AddGhostLocked(ChunkKey key);
  void UnlinkAll(const std::vector<std::string>& names) const;

  const ChunkCacheOptions options_;
  const std::vector<ChunkShard> shards_;
  std::vector<uint64_t> id_hash_;  // Per shard; immutable after Open.
  uint64_t small_target_ = 0;      // Bytes.
  size_t ghost_limit_ = 0;         // Keys.
  // Disk mode: DIR/kChunkDir, its path and descriptor (every file operation
  // is relative to it), and the lock. Immutable after Open.
  std::string chunk_dir_;
  UniqueFd dir_fd_;
  UniqueFd lock_fd_;

  mutable std::mutex mu_;
  // Disk mode: slots whose chunk file is held open, oldest first (a read of
  // a chunk then costs one pread, not open + pread + close).
  static constexpr size_t kOpenChunkFiles = 64;
  std::deque<std::weak_ptr<Slot>> open_files_;                        // Guarded by mu_.
  std::unordered_map<ChunkKey, std::shared_ptr<Slot>, KeyHash> map_;  // Guarded by mu_.
  std::list<Slot*> small_;     // Guarded by mu_; head = newest.
  std::list<Slot*> main_;      // Guarded by mu_; head = newest.
  std::list<ChunkKey> ghost_;  // Guarded by mu_.
  std::unordered_map<ChunkKey, std::list<ChunkKey>::iterator, KeyHash> ghost_index_;  // mu_.
  std::list<Foreign> foreign_;  // Guarded by mu_; oldest first.
  uint64_t small_bytes_ = 0;    // Guarded by mu_.
  uint64_t main_bytes_ = 0;     // Guarded by mu_.
  uint64_t next_gen_ = 1;       // Guarded by mu_.
  ChunkCacheStats stats_;       // Guarded by mu_; resident fields derived in stats().
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CHUNK_CACHE_H_
