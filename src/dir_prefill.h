// Dentry prefill: lists directories through the mount, in the background, so
// the kernel holds every entry of a directory once a program starts looking
// names up in it one by one.
//
// Every LOOKUP that reaches the daemon is a miss of the kernel's dentry
// cache and costs a round trip. A program that opens files from a list (a
// training loader with a manifest, `rsync --files-from`, an lstat walk)
// looks up each name of a directory in turn. On the second miss in a
// directory, a background thread opens that directory through the mount and
// reads it to the end: the kernel turns the readdirplus replies into
// dentries and inodes with the mount's entry/attr timeouts, and the lookups
// that follow are answered by the kernel itself. Such a program usually goes
// on to the next directories in name order, so the sibling directories that
// follow are listed after it: kFirstSiblings at first, twice as many each time
// another child of the same parent needs a listing on misses (the program
// outran the listing), up to kMaxSiblings. When the kernel has dropped a listed
// directory's entries (memory pressure), misses come back and it is listed
// again, after 4x as many misses each time, so a directory too big for the
// kernel's cache is not listed over and over.
//
// Only directories on the mount's own device (st_dev of its root, taken from
// the prefill thread once the mount serves) are listed.
//
// While a listing runs it holds the directory open, so an unmount in that
// moment fails with EBUSY, as it would with any open file on the mount.
//
// The decisions are PrefillPolicy's (plain C++, unit-tested); DirPrefill runs
// them on its thread and does the listing.
//
// Thread safety: DirPrefill::NoteMiss may be called from any thread.
#ifndef SHARDFS_SRC_DIR_PREFILL_H_
#define SHARDFS_SRC_DIR_PREFILL_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "index/index_reader.h"

namespace shardfs::mount {

// The decisions of DirPrefill, with no thread, no index and no mount, so
// unit tests drive it: which directories to list, when, and how many
// siblings after a listed one. Directories are inode numbers.
//
// Thread safety: none; DirPrefill guards it with its mutex.
class PrefillPolicy {
 public:
  static constexpr uint32_t kMissesBeforeListing = 2;
  static constexpr uint32_t kFirstSiblings = 2;
  static constexpr uint32_t kMaxSiblings = 64;

  struct Job {
    uint64_t dir = 0;
    std::string path;      // From the root; empty until known.
    bool sibling = false;  // Listed after a sibling, ahead of use: lists no siblings itself.
  };

  // A lookup in `dir` missed the kernel's cache. Queues `dir` on the
  // kMissesBeforeListing-th miss, after 4x as many misses for each listing
  // before. Returns true if it queued it.
  bool NoteMiss(uint64_t dir);
  // Queues `job` unless its directory is queued already, or `job` is a
  // sibling listing and the directory was listed before. Returns true if it
  // queued it.
  bool Queue(Job job);
  // Takes the next job, oldest first; false if none.
  bool Next(Job* job);
  // The listing of `dir` taken by Next ended: it may be queued again.
  void Done(uint64_t dir);
  // How many of the directories after a listed child of `parent` to list:
  // kFirstSiblings, then twice as many each call, up to kMaxSiblings.
  uint32_t TakeSiblingCount(uint64_t parent);

  bool empty() const { return queue_.empty(); }

 private:
  struct DirState {
    uint32_t misses = 0;    // Since the last listing.
    uint32_t listings = 0;  // Queued so far.
    bool queued = false;    // Queued or being listed.
    uint32_t siblings = kFirstSiblings;  // Children to list ahead, as a parent.
  };
  std::unordered_map<uint64_t, DirState> dirs_;
  std::deque<Job> queue_;
};

class DirPrefill {
 public:
  // Lists directories of `reader` under `mountpoint` (an absolute path).
  DirPrefill(const index::IndexReader* reader, std::string mountpoint);
  // Stops the thread; a listing in progress ends first (or fails once the
  // FUSE connection is gone).
  ~DirPrefill();
  DirPrefill(const DirPrefill&) = delete;
  DirPrefill& operator=(const DirPrefill&) = delete;

  // A lookup in directory `dir` reached the daemon.
  void NoteMiss(index::InodeId dir);

 private:
  using Job = PrefillPolicy::Job;
  void Run();
  // Lists `job.dir`, filling in `job.path` if empty; false if it failed.
  bool List(Job& job);
  // Sets mount_dev_ from the mountpoint, if it is this mount's root.
  bool FindMountDevice();
  // Queues the directories that follow `job.dir` among its siblings.
  void QueueSiblings(const Job& job);

  const index::IndexReader* const reader_;
  const std::string mountpoint_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PrefillPolicy policy_;  // Guarded by mu_.
  bool stop_ = false;     // Guarded by mu_.
  std::optional<dev_t> mount_dev_;  // Only touched by the prefill thread.
  std::thread thread_;
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_DIR_PREFILL_H_
