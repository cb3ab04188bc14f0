// The children of one directory of an index in name order, read in batches,
// so that a merge over several indexes holds a batch per index however large
// the directory is.
#ifndef SHARDFS_INDEX_CHILD_CURSOR_H_
#define SHARDFS_INDEX_CHILD_CURSOR_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"

namespace shardfs::index {

class ChildCursor {
 public:
  // The children of `dir` in `reader` after `start_after` ("" = from the first).
  ChildCursor(const IndexReader* reader, uint32_t partition, InodeId dir,
              std::string_view start_after = "")
      : reader_(reader), partition_(partition), dir_(dir), last_(start_after) {}

  uint32_t partition() const { return partition_; }
  // Loads the next batch when needed; false at the end.
  Result<bool> Valid();
  const std::string& name() const { return batch_[pos_].name; }
  // Valid until Next; its target and extents point into the cursor.
  const EntryRecord& record() const { return batch_[pos_].rec; }
  void Next() { ++pos_; }

 private:
  struct Child {
    std::string name;
    EntryRecord rec;
    std::string bytes;  // The symlink target or the sparse extents.
  };
  static constexpr size_t kBatch = 512;

  const IndexReader* reader_;
  uint32_t partition_;
  InodeId dir_;
  std::vector<Child> batch_;
  size_t pos_ = 0;
  std::string last_;
  bool done_ = false;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_CHILD_CURSOR_H_
