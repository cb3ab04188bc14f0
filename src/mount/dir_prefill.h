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
// directory's entries (memory pressure, or `drop_caches` between epochs),
// misses come back and it is listed again once the misses reach a sixteenth
// of the entries its last listing gave (at least kMissesBeforeListing): a new
// epoch over a tree whose dentries were dropped is served by listings again,
// and a directory too big for the kernel's cache, listed over and over, costs
// at most 16 listed entries per lookup that missed (an entry of a listing
// costs the daemon and the kernel a small part of a lookup's round trip). (A listing whose entry
// count is unknown is followed after 4x as many misses each time.)
//
// The listings run in a child process (src/mount/prefill_lister.h says why). Only
// directories on the mount's own device (st_dev of its root, taken by that
// process when it starts) are listed.
//
// While a listing runs it holds the directory open, so an unmount in that
// moment fails with EBUSY, as it would with any open file on the mount.
//
// The decisions are PrefillPolicy's (plain C++, unit-tested); DirPrefill runs
// them on its thread and does the listing.
//
// Thread safety: DirPrefill::NoteMiss may be called from any thread.
#ifndef SHARDFS_SRC_MOUNT_DIR_PREFILL_H_
#define SHARDFS_SRC_MOUNT_DIR_PREFILL_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "index/index_reader.h"
#include "src/mount/prefill_lister.h"
#include "src/reader/filesystem.h"

namespace shardfs::mount {

using reader::InodeBits;

// Names-only listings. In a READDIRPLUS reply an entry may carry
// node id 0: the kernel then makes no inode and no dentry for it, and the
// entry costs what a plain readdir's does. A walker that wants only names and
// types (find -type f, os.scandir) is served fastest so; one that stats what
// it lists (ls -l, du, find -size) would pay a LOOKUP per entry. The daemon
// cannot tell the two apart before the first stat comes, so it lists files
// names-only until one comes:
// - A LOOKUP of a file of directory D reaching the daemon means a program
//   wants files' attributes there: every later reply of a listing of D
//   carries them (also the rest of a listing under way, from its next reply),
//   and so do later listings of D's subdirectories, of its sibling
//   directories and of all their subdirectories (a walker goes on to them).
//   The entries D listed names-only before cost one LOOKUP each until
//   DirPrefill, told at once (DirPrefill::ListNow), has listed D again with
//   attributes.
// - Directories' entries always carry attributes: they are few, and every
//   walker descends into them.
// - A lookup of a file in the root directory switches the root's listings
//   alone, so that one stat at the top does not turn every listing of the
//   mount back into full ones.
//
// Thread safety: every method may be called from any thread (atomic bits).
class AttrPolicy {
 public:
  // For directories up to `max_inode`; above it listings carry attributes.
  explicit AttrPolicy(uint64_t max_inode);

  // A LOOKUP found a file (not a directory) in `dir`, whose parent is
  // `dir_parent`.
  void NoteFileLookup(index::InodeId dir, index::InodeId dir_parent);
  // Whether a listing of `dir` should now carry files' attributes; false
  // means names only. `parent` is the parent of `dir`.
  bool WantAttrs(index::InodeId dir, index::InodeId parent);
  // Whether NoteFileLookup already saw a file lookup in `dir` (its caller
  // then needs no parent).
  bool Marked(index::InodeId dir) const { return looked_up_.Test(dir); }
  // A listing of `dir` went out names-only; whether one did.
  void NoteNamesOnly(index::InodeId dir) { names_only_.Set(dir); }
  bool ListedNamesOnly(index::InodeId dir) const { return names_only_.Test(dir); }

 private:
  const uint64_t max_inode_;
  InodeBits looked_up_;   // A file of the directory was looked up.
  InodeBits subtree_;     // Listings of its child directories (and below) carry attributes.
  InodeBits names_only_;  // A listing of it went out names-only.
};

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
  // Past the entry limit, the misses in one directory that show a program
  // going through its files (a walk, an epoch), not sampling the dataset.
  static constexpr uint32_t kMissesPastLimit = 256;
  // A directory listed before is listed again after entries / this misses.
  static constexpr uint32_t kEntriesPerMiss = 16;

  struct Job {
    uint64_t dir = 0;
    std::string path;      // From the root; empty until known.
    bool sibling = false;  // Listed after a sibling, ahead of use: lists no siblings itself.
    // Queued past the entry limit on kMissesPastLimit misses, or a sibling
    // after such a directory: listed all the same, since the program's own
    // lookups would make as many inodes.
    bool past_limit = false;
  };

  // A lookup in `dir` missed the kernel's cache. Queues `dir` on the
  // kMissesBeforeListing-th miss (kMissesPastLimit-th once past the limit);
  // once listed, after as many misses as its last listing's entries /
  // kEntriesPerMiss, if more (entries unknown: 4x as many misses for each
  // listing before). Returns true if it queued it.
  bool NoteMiss(uint64_t dir);
  // Queues `dir` now, whatever its misses (see DirPrefill::ListNow); not
  // once past the limit.
  bool ListNow(uint64_t dir) { return !past_limit_ && Queue({dir, "", false}); }
  // The entry limit was reached: from now on only directories a program is
  // going through are listed (DirPrefill lists their siblings ahead).
  void SetPastLimit() { past_limit_ = true; }
  bool past_limit() const { return past_limit_; }
  // Whether `dir` is queued or being listed.
  bool Busy(uint64_t dir) const;
  // Queues `job` unless its directory is queued already, or `job` is a
  // sibling listing and the directory was listed before. Returns true if it
  // queued it.
  bool Queue(Job job);
  // Takes the next job, oldest first; false if none.
  bool Next(Job* job);
  // The listing of `dir` taken by Next ended, with `entries` listed (0: it
  // failed or was not made): it may be queued again.
  void Done(uint64_t dir, uint64_t entries = 0);
  // How many of the directories after a listed child of `parent` to list:
  // kFirstSiblings, then twice as many each call, up to kMaxSiblings.
  uint32_t TakeSiblingCount(uint64_t parent);

  bool empty() const { return queue_.empty(); }

 private:
  struct DirState {
    uint32_t misses = 0;                 // Since the last listing.
    uint32_t listings = 0;               // Queued so far.
    uint64_t entries = 0;                // Listed by the last listing that ran.
    bool queued = false;                 // Queued or being listed.
    uint32_t siblings = kFirstSiblings;  // Children to list ahead, as a parent.
  };
  std::unordered_map<uint64_t, DirState> dirs_;
  std::deque<Job> queue_;
  bool past_limit_ = false;
};

// The entries the prefill lists over a mount's life by default: the kernel
// keeps ~1.1 KB (inode and dentry) for each, so one sixteenth of the
// machine's memory, and at least a million. A mount of 10M files sampled at
// random would otherwise have the kernel build every inode of the dataset at
// once (11 GB), and keep the mount busy (unmount: EBUSY) while it does.
// Past the limit a directory is still listed once a program has missed
// kMissesPastLimit names in it, and its next siblings ahead as before: the
// program is going through the tree, and its lookups would build the same
// inodes one round trip at a time (an lstat walk of 10M files ran at 25k to
// 48k files/s so, against 186k/s at 1M, all of which the prefill lists).
uint64_t DefaultPrefillEntries();

class DirPrefill {
 public:
  // Lists directories of `reader` under `mountpoint` (an absolute path),
  // `max_entries` entries in all; then no more.
  DirPrefill(const index::IndexReader* reader, std::string mountpoint, uint64_t max_entries);
  // Stops the thread; a listing in progress ends first (or fails once the
  // FUSE connection is gone).
  ~DirPrefill();
  DirPrefill(const DirPrefill&) = delete;
  DirPrefill& operator=(const DirPrefill&) = delete;

  // A lookup in directory `dir` reached the daemon.
  void NoteMiss(index::InodeId dir);
  // Lists `dir` now: the kernel was given its files' names only and a
  // program has started to stat or open them (see AttrPolicy).
  void ListNow(index::InodeId dir);
  // Waits up to `timeout_ms` while `dir` is queued or being listed; returns
  // true if it was and its listing has ended. For the pushers: the kernel
  // refuses to store pages for a file it has no inode for.
  bool WaitListed(index::InodeId dir, int timeout_ms);
  // Whether `tid` (a request's sender) is the thread that lists: its
  // listings must reach the daemon (not the kernel's readdir cache) and carry
  // attributes, or they would fill no dentry.
  bool IsListingThread(pid_t tid) const { return tid != 0 && tid == lister_.pid(); }

 private:
  using Job = PrefillPolicy::Job;
  void Run();
  // Lists `job.dir`, filling in `job.path` if empty; false if it failed.
  bool List(Job& job, uint64_t* listed);
  // Queues the directories that follow `job.dir` among its siblings.
  void QueueSiblings(const Job& job);

  const index::IndexReader* const reader_;
  const uint64_t max_entries_;
  uint64_t listed_entries_ = 0;  // Only touched by the prefill thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;  // A listing ended.
  PrefillPolicy policy_;             // Guarded by mu_.
  bool stop_ = false;                // Guarded by mu_.
  PrefillLister lister_;             // Only used by the prefill thread.
  std::thread thread_;
};

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_DIR_PREFILL_H_
