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
//   DIR/shardfs-chunks-v3/         made 0700 by shardfs; the same rules.
//     shardfs-cache                the marker (0600): this directory is shardfs's.
//     lock                         flock'd (never waited for) by the one process
//                                  trimming the directory (0600).
//     tmp-<pid>-<start>-<seq>      a chunk being written by process <pid> that
//                                  started at <start> (0600).
//     <idhash>-<index>.claim       process <pid> is fetching this chunk (0600;
//                                  it holds "<pid> <start>").
//     <idhash>-<index>.chunk       a complete chunk (0600; hex numbers).
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
//     flat-layout cache in DIR, and the older subdirectories such as
//     shardfs-chunks-v2, are ignored, left in place). Inside it, only
//     regular files of this user with the names above are deleted: chunks
//     (evicted or damaged), and temp and claim files whose writer is
//     provably gone (ProcessGone in src/reader/cache_dir.h: never a live
//     process's); anything else is left alone and logged
//     (ChunkCacheStats::other_files).
//   - Chunks are readable by this user only: a private bucket stays private.
//
// One directory for the node and user. Every process of the user on the node
// (the mount daemon, each rank, each DataLoader worker, forked or spawned)
// opens the same subdirectory at once; there is no per-process lock.
//   - Found by name: a chunk's name is the same in every process, so a miss
//     here first opens the name (Read, Claim): a chunk another process stored
//     is used as it is ("adopted": its header is checked now, its payload on
//     its first read in this process, as for a chunk found at Open).
//   - Published whole: a chunk is written to a temp file of its writer and
//     renamed over its name, so no process ever opens a partial chunk, and a
//     reader holding the old file keeps reading it.
//   - Fetched once per node: before a fetch the fetcher claims the chunk
//     (Claim: an O_EXCL claim file). A process that finds another's claim
//     polls for the chunk for at most claim_wait, then fetches it itself; a
//     claim whose holder is gone is deleted at once. No lock is held across
//     a fetch, and no wait is unbounded.
//   - One bound for the directory: besides this process's policy (below,
//     which deletes what it evicts), a process that has stored capacity/16
//     bytes since it last looked trims the directory: under a non-blocking
//     flock of `lock` (whoever does not get it skips), it sums the chunk
//     files' charges and, above capacity, deletes the least recently used
//     (by mtime: set when written, and by each process's first read of the
//     chunk) down to 15/16 of capacity. The directory may thus pass capacity
//     briefly, by at most capacity/16 per process storing chunks. Processes
//     with different capacities each hold the directory to their own. A
//     chunk another process deleted is a miss here (its open fails), or, if
//     this process has it open, is read on from the open file.
//   - Damage: a chunk whose header or payload fails its check is a miss and
//     is deleted (if its name still holds that file), so the next fetch
//     replaces it; it is never served.
//   <idhash> is XXH3-64 of the shard's identity seeded with chunk_size, so a
//   replaced shard or another chunk size never matches (what the identity
//   holds and why it changes with the shard's bytes: ChunkIdentity in
//   src/reader/volume.cc). A slot remembers its file's inode, and a
//   deferred delete of an evicted chunk removes the name only while it
//   still holds that file, never a newer copy stored under it.
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
// The policy below is this process's: it decides which of the chunks this
// process stored, found at Open or adopted it keeps (deleting the others);
// the directory's bound above covers what all processes stored.
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

#include <atomic>
#include <chrono>
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
#include "src/reader/chunk_file.h"

namespace shardfs::reader {

struct ChunkCacheOptions {
  std::string dir;                // Empty: memory only.
  uint64_t capacity = 0;          // Bytes, payload + on-disk overhead; >= one full chunk.
  uint64_t chunk_size = 4 << 20;  // Bytes; 1 .. 1 GiB.
  // How long Claim waits for another process's fetch of a chunk at most.
  std::chrono::milliseconds claim_wait = kClaimWait;
  static constexpr std::chrono::milliseconds kClaimWait{10000};
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
  uint64_t adopted = 0;                        // Chunks found by name, stored by another process.
  uint64_t claim_waits = 0;                    // Claims that waited for another process's fetch.
  uint64_t trimmed = 0;                        // Chunk files deleted by trims of the directory.
  uint64_t corrupt_dropped = 0;                // Chunks whose payload failed its check.
  uint64_t other_files = 0;                    // Files at Open shardfs did not write: left alone.
  std::vector<uint64_t> shard_resident_bytes;  // Payload bytes, per shard.
};

class ChunkCache {
 public:
  static constexpr uint32_t kFormatVersion = kChunkFormatVersion;
  static constexpr size_t kHeaderSize = kChunkHeaderSize;
  // The subdirectory of DIR that holds the cache's files.
  static constexpr char kChunkDir[] = "shardfs-chunks-v3";

  // Opens the cache. Disk mode: creates DIR (0700) if its parent exists and
  // DIR/kChunkDir (0700) with its marker, refuses either if it is a symbolic
  // link, another user's, or writable by group or others (InvalidArgument
  // naming the directory and why), deletes the temp and claim files of
  // processes that are gone and damaged chunk files (bad header, wrong
  // length), leaves other files alone, registers this index's chunks
  // (reused_at_open) and the foreign ones, evicts down to capacity and trims
  // the directory. Other processes may use the directory meanwhile. Returns InvalidArgument for a
  // bad capacity or chunk size, and an error naming DIR if it cannot be created, read or written.
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

  // Whether the chunk is resident in this process's view (what it stored,
  // found at Open or adopted). Changes nothing; looks at no file.
  bool Contains(ChunkKey key) const;

  // Before fetching a chunk: kStored if it is resident (another process
  // stored it: adopted), kMine if this process now holds its claim (call
  // EndClaim after the Insert, or after the fetch failed), kUnclaimed if
  // another process's claim was waited for claim_wait without the chunk
  // appearing, or `cancel` was set, or the claim cannot be made (fetch it
  // anyway). Memory mode: kMine at once. Waits at most claim_wait.
  enum class Claimed { kStored, kMine, kUnclaimed };
  Claimed Claim(ChunkKey key, const std::atomic<bool>* cancel = nullptr);
  void EndClaim(ChunkKey key);
  std::chrono::milliseconds claim_wait() const { return options_.claim_wait; }

  // Stores a complete chunk; `len` must be the chunk's length (InvalidArgument
  // otherwise, or for a key out of range). Evicts to stay within capacity,
  // and trims the directory now and then (above). A chunk already resident
  // is left as it is; one another process stored is replaced (same bytes). Returns IoError naming
  // the file if it cannot be written (the cache is unchanged then).
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
  struct Trimmed {  // A chunk file a trim deleted.
    uint64_t id_hash;
    uint64_t index;
    uint64_t ino;
  };

  ChunkCache(ChunkCacheOptions options, std::vector<ChunkShard> shards);
  Status OpenDir();
  Status Scan();
  uint64_t Charge(uint64_t len) const;
  // A chunk file's name in the subdirectory, and its path (for messages).
  std::string ChunkName(ChunkKey key) const;
  std::string ChunkPath(ChunkKey key) const;
  // Writes the chunk file for `key`; returns its inode.
  Result<uint64_t> WriteChunk(ChunkKey key, const char* data, size_t len);
  // Deletes `name` if it still is the file with inode `ino`.
  void UnlinkIfSame(const std::string& name, uint64_t ino) const;
  // The resident slot of `key`, adopting the chunk file of that name if
  // another process stored it (disk mode); null if there is none.
  std::shared_ptr<Slot> Lookup(ChunkKey key);
  bool Adopt(ChunkKey key);
  // Holds the directory to capacity (see the top); skipped if another
  // process or thread is at it.
  void TrimDir();
  void ForgetTrimmed(const std::vector<Trimmed>& gone);
  // Reads from the open chunk file `fd` of `slot`.
  bool ReadDisk(const Slot& slot, int fd, uint64_t offset, size_t len, char* buf,
                bool verify) const;
  // The open chunk file of `slot`, opened now if it is not open; null if it
  // cannot be opened. The last kOpenChunkFiles opened stay open.
  std::shared_ptr<const UniqueFd> ChunkFile(const std::shared_ptr<Slot>& slot);

  // The policy. REQUIRES: mu_ held. Dead slots and foreign names to delete
  // are collected and dropped by the caller after unlocking.
  void AddLocked(std::shared_ptr<Slot> slot, Queue q);
  // A new slot in, by the ghost's verdict, after room was made for it.
  void AdmitLocked(std::shared_ptr<Slot> slot, std::vector<std::shared_ptr<Slot>>* dead,
                   std::vector<std::string>* dead_foreign);
  // Keeps `file` open for `slot` (the last kOpenChunkFiles opened stay open).
  void KeepOpenLocked(const std::shared_ptr<Slot>& slot, std::shared_ptr<const UniqueFd> file);
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
  std::vector<uint64_t> id_hash_;                    // Per shard; immutable after Open.
  std::unordered_map<uint64_t, uint32_t> shard_of_;  // id_hash_ -> shard; immutable.
  uint64_t small_target_ = 0;                        // Bytes.
  size_t ghost_limit_ = 0;                           // Keys.
  // Disk mode: DIR/kChunkDir, its path and descriptor (every file operation
  // is relative to it), and the trim lock's file. Immutable after Open.
  std::string chunk_dir_;
  UniqueFd dir_fd_;
  UniqueFd lock_fd_;
  std::atomic<bool> trimming_{false};  // A thread of this process is trimming.

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
  uint64_t since_trim_ = 0;     // Guarded by mu_: bytes stored since the last trim.
  ChunkCacheStats stats_;       // Guarded by mu_; resident fields derived in stats().
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CHUNK_CACHE_H_
