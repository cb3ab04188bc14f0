// Push-ahead: what the mount does for a reader of the files of a shard
// beyond answering its READs. Everything here is policy on plain C++ types;
// the FUSE edge gives it a Store callback (FUSE_NOTIFY_STORE) and calls
// NoteRead/AfterReply around each READ with the PushHint that
// Filesystem::Read gave (src/reader/filesystem.h), so unit tests drive it
// without a mount.
//
// Per shard it keeps where the last read ended, and from that:
//  - shard readahead: a reader whose reads run sequentially through a shard
//    gets the next `shard_readahead` bytes requested from the disk ahead of
//    it (posix_fadvise WILLNEED);
//  - drop-behind: behind such a reader the shard's own cached pages are
//    dropped in 2 MiB steps, since the kernel keeps the files' copy; after a
//    whole-file read by any other reader, the pages of that file alone;
//  - push-ahead: when a read finishes a file, the files that follow it in
//    the shard (`sequential_bytes` for a sequential reader, `random_bytes`
//    after a whole-file read that is not part of a walk) are stored into the
//    kernel's page cache, so the program opens and reads them without a
//    round trip to the daemon.
//
// Why a push can never hang a reader. Storing a page makes the kernel take
// that page's lock, and a reader that has started reading a file holds the
// locks of the pages it waits for until the daemon answers its READ. A store
// made on a request worker can therefore wait for a READ that is queued
// behind that very worker; with every worker storing, nobody answers and
// the mount hangs for good. So:
//  1. Request workers never store and never wait for a pusher. AfterReply
//     only offers a job to a bounded queue: when the queue is full the
//     oldest waiting job is dropped for it (pushers take the newest first),
//     and it is dropped when the shard already has a sequential push queued
//     or running.
//  2. Stores run on pusher threads of their own (`threads`). A pusher may
//     wait for a page lock, but such a lock belongs to a READ that the
//     workers, which never wait for pushers, answer: the wait ends with it.
//  3. A file that has had a READ is never stored (its pages are in the
//     kernel, or being filled), nor one already pushed; the check is made
//     again right before each store. Until the kernel forgets the inode
//     (FORGET, Forgotten): its pages went with it, and a later epoch's
//     reader gets the file pushed again instead of a READ. A job that waited longer than
//     PushOptions::max_job_age is dropped: its reader has moved on.
//  4. Stop() ends the pushers while the workers still serve, so shutdown
//     cannot leave a pusher waiting on a READ nobody will answer (see
//     ServeFuse).
//
// Thread safety: NoteRead, AfterReply, Plan, RunJob, ReadPlannedFile and
// stats may be called from any thread. Per-shard state is atomics; the queue
// is guarded by mu_.
#ifndef SHARDFS_SRC_MOUNT_PUSH_AHEAD_H_
#define SHARDFS_SRC_MOUNT_PUSH_AHEAD_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "index/schema.h"
#include "src/mount/push_budget.h"
#include "src/reader/filesystem.h"

namespace shardfs::mount {

using reader::FileRange;
using reader::Filesystem;
using reader::InodeBits;
using reader::InodeId;
using reader::PushHint;
using reader::ShardHandle;

struct PushOptions {
  uint64_t sequential_bytes = 4 << 20;  // -o push_ahead; 0: off.
  uint64_t random_bytes = 0;            // -o push_random; 0: off.
  uint64_t shard_readahead = 8 << 20;   // -o shard_readahead; 0: the kernel's own.
  bool drop_behind = true;              // -o drop_behind.
  unsigned threads = 8;                 // -o push_threads: pusher threads.
  size_t queue_capacity = 64;           // Jobs waiting; more are dropped.
  // A job that waited longer than this is dropped: its reader has moved on.
  // Tests that are not about staleness lengthen it, so a loaded machine's
  // scheduling delay does not drop the job they watch.
  std::chrono::milliseconds max_job_age{250};
  // Store a local shard's files from its descriptor (PushBytes::fd), so
  // libfuse splices them, rather than from a copy in the daemon. Files that
  // a check must see first (verify=always, or first and not yet checked)
  // are still read and checked, and stored from those very bytes.
  bool store_from_fd = false;
  // push_random=auto: random_bytes is the largest window, and the window
  // follows the memory available (src/mount/push_budget.h).
  bool random_follows_memory = false;
  // With random_follows_memory: the available memory's reader; null, the
  // machine's. Tests inject one.
  PushBudget::MemAvailable mem_available = nullptr;
};

// What NoteRead made of a READ, handed on to AfterReply.
struct ReadNote {
  // The range ends the file, and reads of this shard have been running
  // sequentially (a reader walking the shard).
  bool sequential_to_eof = false;
};

// A file planned for pushing into the kernel's page cache ahead of a reader.
struct PlannedFile {
  InodeId inode;
  uint64_t position = 0;  // Byte offset of its data in the shard.
  uint64_t size = 0;
  uint64_t xxh3 = 0;
  bool has_checksum = false;
};

// What a Store stores: `data` if it is set, else `size` bytes of descriptor
// `fd` from byte `pos` (which libfuse can splice into the kernel).
struct PushBytes {
  const char* data = nullptr;
  int fd = -1;
  uint64_t pos = 0;
  size_t size = 0;
};

// Counters, for tests and the unmount's log line.
struct PushStats {
  uint64_t jobs_queued = 0;
  uint64_t jobs_dropped_busy = 0;   // A sequential push of the shard was pending.
  uint64_t jobs_dropped_full = 0;   // The queue was full.
  uint64_t jobs_dropped_stale = 0;  // Waited longer than max_job_age.
  uint64_t jobs_run = 0;
  uint64_t files_pushed = 0;
  uint64_t files_pushed_fd = 0;  // Of files_pushed, stored from the shard's descriptor.
  uint64_t bytes_pushed = 0;
  uint64_t files_skipped_read = 0;  // A READ had reached them.
  // A random job's files whose chunks were not here (storage read in
  // chunks): never fetched on a guess.
  uint64_t files_skipped_cold = 0;
  uint64_t store_errors = 0;
  // Pushed files that had a READ after all, or that the kernel forgot
  // before any READ: their pages went (most likely) before their reader came.
  uint64_t files_wasted = 0;
};

class PushAhead {
 public:
  // Stores `bytes` as the content of `inode` from offset 0 in the kernel's
  // page cache. Returns 0, or a negative errno (-ENOENT: the kernel does
  // not know the inode), which ends the push. A Store that waits before it
  // tries again asks `still_wanted` first and returns -ECANCELED if not:
  // the file is then skipped, and the push goes on.
  using Store = std::function<int(InodeId inode, const PushBytes& bytes,
                                  const std::function<bool()>& still_wanted)>;

  struct Job {
    InodeId inode;      // The file whose read finished.
    ShardHandle shard;  // Keeps the shard open until the job is done.
    index::ShardId shard_id;
    bool sequential = false;
    std::chrono::steady_clock::time_point queued;
  };

  // Files larger than this are never pushed.
  static constexpr uint64_t kMaxFile = 1 << 20;

  // `fs` must outlive this object. `store` is only called by pushers and
  // RunJob.
  PushAhead(Filesystem* fs, PushOptions options, Store store);
  ~PushAhead();  // Stop().
  PushAhead(const PushAhead&) = delete;
  PushAhead& operator=(const PushAhead&) = delete;

  // Starts the pusher threads (none when both push windows are 0).
  void Start();
  // Ends the pushers: a store in progress finishes first, queued jobs are
  // dropped. REQUIRES: READs are still answered while it runs.
  void Stop();

  // Request path, on a worker, before the reply to a READ of file `inode`
  // (`hint`: what Filesystem::Read said of it; nothing is done unless
  // hint.active): notes the read and starts shard readahead for a
  // sequential reader. Never blocks.
  ReadNote NoteRead(InodeId inode, const PushHint& hint);
  // Request path, after the reply (`delivered`: the reply reached the
  // kernel), with what NoteRead made of it: drop-behind, then offers a push
  // job. Never blocks.
  void AfterReply(InodeId inode, const PushHint& hint, ReadNote note, bool delivered);

  // The regular files that follow `inode` in inode order and lie back to
  // back after it in the same shard (at most a small gap of tar headers),
  // up to `max_bytes` of data, each at most kMaxFile; directories and empty
  // files between them are stepped over. Files that had a READ or were
  // pushed are left out but count against the budget; with
  // `stop_at_pushed` the plan ends before the first file already pushed.
  // Empty when the shard's files are not in inode order.
  Status Plan(InodeId inode, uint64_t max_bytes, bool stop_at_pushed,
              std::vector<PlannedFile>* files) const;
  // Runs `job` on the calling thread (the pushers' body; tests call it).
  void RunJob(const Job& job, char* buf);
  // RunJob's plan: the files after job.inode within the window, once the
  // shard is known unchanged since its check; the kernel is asked for the
  // random window's bytes of local shard descriptor `fd` (-1: none).
  Status PlanJob(const Job& job, int fd, std::vector<PlannedFile>* files);

  // Reads planned file `f` whole from `shard` into `buf` (f.size bytes),
  // checked by Filesystem::VerifyBytes (verify=first|always). Returns
  // Corruption on a mismatch (nothing is marked: a read of the file will
  // report it), IoError if the shard is short. With `at` (only when no
  // check is due), a file lying whole in a checked chunk file on disk is
  // located there (*at) instead of copied.
  Status ReadPlannedFile(const PlannedFile& f, const ShardHandle& shard, char* buf,
                         FileRange* at = nullptr);

  // The kernel forgot `inode` (FUSE FORGET: it evicted the inode, and its
  // pages with it): the file may be pushed again. A pushed file that had no
  // READ counts as wasted: its pages went with the inode, unless its reader
  // came and found them first, which the daemon cannot see (so under inode
  // pressure the count errs towards fewer pushes). Never blocks.
  void Forgotten(InodeId inode);

  bool WasRead(InodeId inode) const { return read_.Test(inode); }
  bool WasPushed(InodeId inode) const { return pushed_.Test(inode); }
  PushStats stats() const;
  // One line in the log (at unmount): what the pushes did, if anything.
  void LogSummary() const;
  const PushOptions& options() const { return options_; }
  // The window of a push after a random whole-file read now: random_bytes,
  // or with random_follows_memory what PushBudget allows (the memory, and
  // how many pushed files came back as READs).
  uint64_t RandomWindow();
  // With random_follows_memory: the budget (null otherwise).
  PushBudget* budget() const { return budget_.get(); }

 private:
  struct ShardState {
    std::atomic<uint64_t> next_pos{0};       // End of the last read.
    std::atomic<uint64_t> readahead_end{0};  // Shard readahead requested up to here.
    std::atomic<uint64_t> pushed_end{0};     // End of the last push.
    std::atomic<bool> busy{false};           // A sequential push queued or running.
    std::atomic<uint64_t> dropped{0};        // Drop-behind done up to here.
  };
  struct Counters;

  bool Sequential(ShardState& s, uint64_t pos, size_t len) const;
  // Asks the kernel to read the shard `shard_readahead` bytes past a
  // sequential reader (fadvise WILLNEED).
  void ShardReadahead(ShardState& s, uint64_t shard_size, int fd, uint64_t pos, size_t len);
  void DropBehind(ShardState& s, int fd, uint64_t end);
  // Drops [from, to) widened to whole pages; the range lies behind the
  // shard's drop line (`to` <= ShardState::dropped, a multiple of the page).
  void DropBehindLine(int fd, uint64_t from, uint64_t to);
  // After a whole file went to a reader that is not sequential: the kernel
  // now holds the file's copy, so the shard's copy of it is dropped. A
  // shuffled epoch then keeps one copy of each file in memory instead of two,
  // and what the kernel read ahead in the shard survives until it is used.
  void DropRead(int fd, uint64_t pos, size_t len);
  void Offer(Job job);
  void Run();
  // A pushed file lost its pages before its reader came.
  void NoteWasted();

  Filesystem* const fs_;
  const PushOptions options_;
  const std::unique_ptr<ShardState[]> shards_;
  const size_t shard_count_;
  InodeBits read_;    // A READ reached the file.
  InodeBits pushed_;  // Stored into the kernel's page cache.
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<PushBudget> budget_;  // With random_follows_memory.

  const Store store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // Guarded by mu_.
  bool stop_ = false;      // Guarded by mu_.
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;  // Only touched by Start and Stop.
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_PUSH_AHEAD_H_
