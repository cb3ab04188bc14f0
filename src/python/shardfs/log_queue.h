// The core's messages (base/log.h) on their way to Python's logging module,
// and the core's errors on their way to shardfs' exception classes.
//
// Why a queue. The core logs from any thread: a caller's thread with the GIL
// released, a fetcher thread, RocksDB's; often holding one of its own locks.
// Calling Python there would have to take the GIL, and a thread holding the
// GIL may be waiting for that very lock (a read that waits for a fetch):
// deadlock. So the sink only appends the message to a bounded queue under a
// mutex that is never held while taking the GIL or calling anything else,
// and never calls Python. The messages are handed to Python in the calling
// thread, with the GIL held, when an extension call returns (DrainOnReturn,
// a pybind11 call guard of every method) and at exit
// (shardfs._errors._drain, registered with atexit); messages of background
// threads wait there for the next call. Python's side
// (shardfs/_errors.py, _emit) makes them records of the "shardfs" logger.
#ifndef SHARDFS_SRC_PYTHON_SHARDFS_LOG_QUEUE_H_
#define SHARDFS_SRC_PYTHON_SHARDFS_LOG_QUEUE_H_

#include <pybind11/pybind11.h>

#include <string>

#include "base/status.h"

namespace shardfs::python {

// Sends the core's messages to the queue from now on, and makes the queue's
// mutex safe across fork() (a child starts with an empty queue: what was
// queued is the parent's to log). Call once, at module initialisation.
void InstallLogQueue();

// Hands every queued message to shardfs._errors._emit. REQUIRES: the GIL.
// Never throws; keeps any Python error already set as it was.
void DrainLog() noexcept;

// A pybind11 call guard: drains the queue when the call returns or throws.
struct DrainOnReturn {
  DrainOnReturn() = default;
  DrainOnReturn(const DrainOnReturn&) = delete;
  DrainOnReturn& operator=(const DrainOnReturn&) = delete;
  ~DrainOnReturn() { DrainLog(); }
};

// Sets the Python error for `status` about `filename` in index `index`:
// shardfs._errors._from_status makes it (shardfs.CorruptShardError for
// Corruption, shardfs.FetchError for a remote read that gave up, a
// subclass of the built-in class of the errno otherwise); a plain OSError of
// that errno if the package cannot be imported. REQUIRES: the GIL.
void SetStatusError(const Status& status, const std::string& filename, const std::string& index);

}  // namespace shardfs::python

#endif  // SHARDFS_SRC_PYTHON_SHARDFS_LOG_QUEUE_H_
