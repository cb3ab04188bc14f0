// The extension's handle on an open volume (src/reader/volume.h), safe
// across fork(), and the errors of its calls on their way to Python.
//
// Fork safety. A process that forks after opening (PyTorch's DataLoader
// workers) must not use the parent's volume in the child: its RocksDB
// database, its shard descriptors' locks and its fetcher threads belong to
// the parent. Each handle remembers the fork generation it was opened in
// (counted by a pthread_atfork child handler); the first call in a child
// process opens the index again from the resolved reference and
// leaves the parent's volume alone (leaked on purpose: destroying it could
// wait on locks that threads the child does not have were holding). No lock
// of ours is held across fork(): pthread_atfork takes every handle's mutex
// before the fork and releases it on both sides.
#ifndef SHARDFS_SRC_PYTHON_SHARDFS_HANDLE_H_
#define SHARDFS_SRC_PYTHON_SHARDFS_HANDLE_H_

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "base/status.h"
#include "src/indexref/index_ref.h"
#include "src/reader/volume.h"

namespace shardfs::python {

// A non-ok Status on its way to Python as an OSError (SetStatusError).
struct StatusError {
  Status status;
  std::string filename;
  std::string index;  // The index the call was about (its argument), for the message.
};

// The index argument of the Handle this thread last called (Get, or the
// constructor): every call gets its volume before anything can fail.
extern thread_local std::string current_index;

// Throws StatusError for `s` about `filename` in current_index.
[[noreturn]] void Throw(const Status& s, std::string filename);

inline void Check(const Status& s, const std::string& filename) {
  if (!s.ok()) Throw(s, filename);
}

template <typename T>
T Check(Result<T> r, const std::string& filename) {
  if (!r.ok()) Throw(r.status(), filename);
  return std::move(r).value();
}

class Handle;

// How many fork()s this process descends from since the module was loaded
// (pthread_atfork's child handler counts them): a volume opened at another
// count belongs to an ancestor. Cheaper than getpid(), a system call, on
// every call.
extern std::atomic<uint64_t> fork_generation;
// Set once this process opened an index (its RocksDB has static state).
extern std::atomic<bool> opened_any;
// An exit handler: what exit(status) would do after it, but for the static
// destructors (see UnlockAllInChild).
void ExitAtOnce(int status, void*);
// Every open handle, so that fork() waits until none is being swapped.
extern std::mutex registry_mu;
extern std::set<Handle*>* registry;  // Guarded by registry_mu; never freed.
// Held around every open and every close of a volume's RocksDB database
// (handle.cc says why). Lock order: registry_mu, a handle's mu_, then db_mu.
extern std::mutex db_mu;
// Opens a volume under db_mu; the volume is closed under it too, by
// whichever holder lets go last.
Result<std::shared_ptr<reader::Volume>> OpenVolume(const reader::IndexLocation& where,
                                                   reader::VolumeOptions options);

class Handle {
 public:
  Handle(const std::string& arg, reader::VolumeOptions options) : arg_(arg) {
    current_index = arg;
    Result<indexref::IndexRef> ref = indexref::ResolveForVolume(arg, &options);
    if (!ref.ok()) Throw(ref.status(), arg);
    auto v = OpenVolume(indexref::LocationOf(ref.value()), options);
    if (!v.ok()) Throw(v.status(), arg);
    ref_ = std::move(ref).value();
    options_ = std::move(options);
    volume_ = std::move(v).value();
    // A forked child opens the very version this process opened ("NAME@N"),
    // not whatever `index add` or `view create` made meanwhile.
    const index::IndexReader& r = volume_->fs().reader();
    if (r.manifest() == nullptr) options_.reader.view = r.version().label();
    opened_any.store(true, std::memory_order_relaxed);
    generation_ = fork_generation.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> l(registry_mu);
    registry->insert(this);
  }

  ~Handle() {
    {
      std::lock_guard<std::mutex> l(registry_mu);
      registry->erase(this);
    }
    if (generation_ != fork_generation.load(std::memory_order_relaxed)) {
      Leak(std::move(volume_));
    }
  }

  // The volume of this process: opened again after a fork. ValueError after
  // close().
  std::shared_ptr<reader::Volume> Get() {
    current_index = arg_;
    std::unique_lock<std::mutex> l(mu_);
    if (closed_)
      throw pybind11::value_error("I/O operation on a closed shardfs.Index (" + arg_ + ")");
    uint64_t generation = fork_generation.load(std::memory_order_relaxed);
    if (generation == generation_) return volume_;
    // A child after fork(): the parent's volume is not ours to use or free.
    Leak(std::move(volume_));
    // The disk chunk cache is the parent's directory, shared: the child
    // finds the chunks its parent and siblings stored, and they its own.
    reader::VolumeOptions o = options_;
    o.announce = false;  // The parent logged how the storage is read.
    auto v = OpenVolume(indexref::LocationOf(ref_), std::move(o));
    if (!v.ok()) Throw(v.status(), arg_);
    volume_ = std::move(v).value();
    generation_ = generation;
    return volume_;
  }

  void Close() {
    std::shared_ptr<reader::Volume> old;
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      if (generation_ == fork_generation.load(std::memory_order_relaxed)) {
        old = std::move(volume_);
      } else {
        Leak(std::move(volume_));
      }
    }
    // Freed here, or by the last call still reading from it.
  }

  bool closed() {
    std::lock_guard<std::mutex> l(mu_);
    return closed_;
  }
  const std::string& arg() const { return arg_; }

  static void LockAll() {
    registry_mu.lock();
    for (Handle* h : *registry) h->mu_.lock();
    db_mu.lock();
  }
  static void UnlockAll() {
    db_mu.unlock();
    for (Handle* h : *registry) h->mu_.unlock();
    registry_mu.unlock();
  }
  // In the child: a new process, whose handles open their volumes again.
  static void UnlockAllInChild() {
    fork_generation.fetch_add(1, std::memory_order_relaxed);
    UnlockAll();
    // RocksDB's static timer, copied from a parent whose timer thread was
    // waiting on its condition variable, would block the child's exit() for
    // ever in that variable's destructor (glibc waits for the waiters the
    // copy still counts). A child of a process that opened an index ends,
    // once Python has finalised, without running the static destructors:
    // an exit handler registered now runs before theirs.
    if (opened_any.load(std::memory_order_relaxed)) ::on_exit(&ExitAtOnce, nullptr);
  }

 private:
  static void Leak(std::shared_ptr<reader::Volume> v) {
    if (v) new std::shared_ptr<reader::Volume>(std::move(v));
  }

  const std::string arg_;
  indexref::IndexRef ref_;
  reader::VolumeOptions options_;
  std::mutex mu_;
  std::shared_ptr<reader::Volume> volume_;  // Guarded by mu_.
  uint64_t generation_ = 0;  // fork_generation when volume_ was opened. Guarded by mu_.
  bool closed_ = false;      // Guarded by mu_.
};

}  // namespace shardfs::python

#endif  // SHARDFS_SRC_PYTHON_SHARDFS_HANDLE_H_
