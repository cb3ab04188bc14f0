// Sorting more key/value records than memory holds: sorted runs spilled to
// files, then one k-way merge. Keys compare bytewise (as RocksDB's), equal
// keys in the order they were added by one writer.
//
//   RunWriter   buffers records up to a byte budget, then sorts them and
//               writes them as one run file in a given directory
//   MergeRuns   reads run files (several writers' at once) in key order
//
// A run file is a sequence of records: varint key length, varint value
// length, key, value. Run files are the caller's to remove (they live in a
// build's temporary directory, removed whole).
#ifndef SHARDFS_INDEX_EXTERNAL_SORT_H_
#define SHARDFS_INDEX_EXTERNAL_SORT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// Not thread-safe: one per thread. Run files are named `dir`/`prefix`-N,
// N from `counter` (shared by the writers of one directory).
class RunWriter {
 public:
  RunWriter(std::string dir, std::string prefix, size_t budget_bytes,
            std::atomic<uint64_t>* counter);

  // Adds a record; spills a run when the buffer passes its budget. IoError
  // naming the run file if writing it fails.
  Status Add(std::string_view key, std::string_view value);
  // Spills what is buffered (nothing if empty).
  Status Flush();

  // The run files written so far, in order.
  const std::vector<std::string>& runs() const { return runs_; }
  uint64_t records() const { return records_; }

 private:
  std::string dir_;
  std::string prefix_;
  size_t budget_;
  std::atomic<uint64_t>* counter_;
  // Where a record and its key are in arena_, and the key's first bytes
  // (big-endian, zero-padded), which decide most comparisons alone.
  struct Slot {
    uint64_t prefix;
    uint32_t start;
    uint32_t key_len;
    uint32_t key_off;  // From start.
    uint32_t len;      // The whole record's.
  };
  std::string arena_;  // Records back to back, as in a run file.
  std::vector<Slot> starts_;
  std::vector<std::string> runs_;
  uint64_t records_ = 0;
};

// Calls `fn` with every record of `runs`, ascending by key; equal keys in
// the order of `runs`, then of their files. When there are more runs than
// `max_fan_in`, groups of them are first merged into new run files in `dir`
// (named `prefix`-merge-N). Stops at and returns the first error of `fn`,
// or IoError naming a run file that cannot be read or is truncated.
// `buffer_bytes` is the read buffer of each open run.
using RecordFn = std::function<Status(std::string_view key, std::string_view value)>;
Status MergeRuns(std::vector<std::string> runs, const RecordFn& fn, size_t buffer_bytes,
                 const std::string& dir, const std::string& prefix, size_t max_fan_in = 64);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_EXTERNAL_SORT_H_
