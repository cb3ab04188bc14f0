// Pack's source prefetch: reader threads open and read source files ahead
// of the one thread that writes the shards, so that the writer rarely waits
// for the disk. ("prefetch" is pack reading its source ahead; the mount's
// page-cache pushes and shard readahead are other things.)
//
// Files are read in write order, claimed by the readers in small batches,
// into a ring of slots, within limits on the bytes, the files and the open
// big files held ahead of the writer. A small file (up to kWholeFileMax
// bytes) is read whole and hashed; a big one is only opened and checked,
// and the writer streams it. The writer takes slots strictly in order.
//
// Thread safety: Wait and Release are called by the one writer thread;
// Start, Stop and CheckOnly by the owner. Locks are taken per batch, and to
// sleep or wake a sleeper; a slot's readiness and the writer's progress are
// atomics.
#ifndef SHARDFS_TOOLS_PACK_SOURCE_PREFETCH_H_
#define SHARDFS_TOOLS_PACK_SOURCE_PREFETCH_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/storage.h"
#include "tools/pack/source_tree.h"

namespace shardfs::pack {

// Files up to this size are read whole by a reader; larger ones are opened
// by a reader and streamed by the writer.
inline constexpr uint64_t kWholeFileMax = 1 << 20;

// How a loose tree is read: how many reader threads (files in flight), and
// whether small files are read with O_DIRECT (SourcePrefetch::ReadDirect).
struct SourceReading {
  int jobs = 4;
  bool direct = false;
};

// The reading of a tree on `storage` (null: not known) with `--jobs` `jobs`
// (0: the default) on `cores` cores. Local: twice the cores, at least 4.
// Network storage: at least kNetworkJobs, since each file waits on round
// trips; on a FUSE client small files are also read directly (see
// ReadDirect). An explicit `jobs` is kept.
inline constexpr int kNetworkJobs = 32;
SourceReading ChooseSourceReading(int jobs, unsigned cores, const StorageInfo* storage);

enum class ReadResult : uint8_t { kOk, kUnreadable, kChanged };

// What the readers may hold ahead of the writer. The read the writer waits
// for is always claimed, whatever the limits.
struct PrefetchLimits {
  uint64_t bytes = 256ull << 20;  // A big file counts 1 MiB (one chunk).
  size_t files = 1 << 15;         // Also the size of the slot ring.
  size_t big_files = 32;          // Open fds of big files.
};

class SourcePrefetch {
 public:
  // One read. Set (release) `ready` once the rest is filled in; the rest
  // belongs to the reader until then and to the writer until Release.
  struct Slot {
    std::atomic<bool> ready{false};
    ReadResult result = ReadResult::kOk;
    std::string reason;            // Not kOk: why, e.g. "open: Permission denied".
    std::unique_ptr<char[]> data;  // Small files: the content.
    int fd = -1;                   // Big files: open and checked (stored: the shard).
    bool sparse = false;           // Big files: fewer blocks than bytes (stored: has holes).
    uint64_t xxh3 = 0;             // Small files: of the content.
    uint64_t cost = 0;             // What it counts against limits.bytes.
    bool big = false;
  };

  // `order` is the entry of each read, in write order; files are opened
  // below `root_fd` (OpenBeneath) and must match what the scan saw.
  SourcePrefetch(const std::vector<SourceEntry>& entries, std::vector<uint32_t> order, int root_fd,
                 PrefetchLimits limits = {});
  // An index source (pack --from-index): every entry is stored, read from
  // `shards`. A small file's stored bytes are checked against the index's
  // checksum (kChanged if they differ or the shard ends early); a big one
  // gets a dup of its shard's fd, for the writer to stream.
  SourcePrefetch(const std::vector<SourceEntry>& entries, std::vector<uint32_t> order,
                 const StoredShards* shards, PrefetchLimits limits = {});
  ~SourcePrefetch();
  SourcePrefetch(const SourcePrefetch&) = delete;
  SourcePrefetch& operator=(const SourcePrefetch&) = delete;

  // Starts `threads` readers.
  void Start(int threads);
  // Stops and joins the readers; reads not yet claimed are never made.
  void Stop();

  // Small files of a loose tree are read with O_DIRECT: one read request of
  // the file's size, past the page cache. On a FUSE client, page-cache reads
  // go out as readahead, which the kernel cuts to single pages once a dozen
  // are in flight (its congestion threshold): many files in flight then cost
  // a request per page. Where O_DIRECT is refused (EINVAL), the readers fall
  // back to plain reads for good. Call before Start.
  void ReadDirect() { direct_.store(true); }

  // Readers only open (and close) the files from now on: the pack has failed
  // and goes on only to list every unreadable file.
  void CheckOnly() { check_only_.store(true); }

  // Waits until read `k` is loaded. REQUIRES: k is the writer's next read.
  Slot& Wait(size_t k);
  // The writer is done with read `k`; its slot may be reused.
  void Release(size_t k);

  // Reads claimed by the readers so far (loaded or being loaded).
  size_t claimed() const;

 private:
  static constexpr size_t kBatch = 16;
  static constexpr uint64_t kBatchBytes = 1 << 20;
  static constexpr size_t kNobody = SIZE_MAX;

  uint64_t Cost(size_t k) const;
  bool CanClaim(size_t k) const;  // REQUIRES: mu_ held.
  void Reader();
  void Load(const SourceEntry& e, Slot* s) const;
  void LoadStored(const SourceEntry& e, Slot* s) const;

  const std::vector<SourceEntry>& entries_;
  const std::vector<uint32_t> order_;
  const int root_fd_;
  const StoredShards* const shards_ = nullptr;
  const PrefetchLimits limits_;
  std::vector<Slot> ring_;
  std::vector<std::thread> threads_;
  std::atomic<bool> check_only_{false};
  mutable std::atomic<bool> direct_{false};  // Cleared by a reader on EINVAL.
  mutable FuseDevices fuse_devices_;

  std::atomic<size_t> write_k_{0};        // The writer's next read.
  std::atomic<uint64_t> bytes_ahead_{0};  // Cost of the claimed, unreleased reads.
  std::atomic<size_t> big_ahead_{0};
  std::atomic<int> readers_waiting_{0};
  std::atomic<size_t> writer_waits_for_{kNobody};

  mutable std::mutex mu_;
  std::condition_variable readers_cv_;
  std::condition_variable writer_cv_;
  bool stop_ = false;  // Guarded by mu_.
  size_t next_ = 0;    // Next read to claim. Guarded by mu_.
};

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_SOURCE_PREFETCH_H_
