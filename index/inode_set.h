// A set of inode numbers as sorted runs: what a view version hides or
// overrides (index/schema.h, "Views"). A subtree is one run (inodes are
// numbered depth-first), so excluding a directory costs a few bytes, and a
// scattered exclusion of k files costs about 2 bytes each on disk.
//
// Encoded: varint(run count), then per run varint(start - previous run's
// end), varint(length - 1), in ascending order; runs neither touch nor
// overlap.
#ifndef SHARDFS_INDEX_INODE_SET_H_
#define SHARDFS_INDEX_INODE_SET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

class InodeSet {
 public:
  // A run [start, end).
  struct Run {
    uint64_t start = 0;
    uint64_t end = 0;
  };

  bool empty() const { return runs_.empty(); }
  // Inodes in the set.
  uint64_t size() const { return size_; }
  const std::vector<Run>& runs() const { return runs_; }
  // A binary search over the runs.
  bool Contains(uint64_t inode) const;

  void Encode(std::string* out) const;
  // Corruption if `data` is not an encoding Encode writes (trailing bytes,
  // runs that overlap, touch or wrap).
  static Result<InodeSet> Decode(std::string_view data);

  // Builds a set from inodes given in any order, duplicates allowed.
  static InodeSet FromUnsorted(std::vector<uint64_t> inodes);
  // The union of two sets.
  static InodeSet Union(const InodeSet& a, const InodeSet& b);

 private:
  // Appends [start, end), which must not begin before the last run ends;
  // merges with it when they touch.
  void Append(uint64_t start, uint64_t end);

  std::vector<Run> runs_;
  uint64_t size_ = 0;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INODE_SET_H_
