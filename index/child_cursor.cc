#include "index/child_cursor.h"

namespace shardfs::index {

Result<bool> ChildCursor::Valid() {
  if (pos_ < batch_.size()) return true;
  if (done_) return false;
  batch_.clear();
  pos_ = 0;
  SHARDFS_RETURN_IF_ERROR(
      reader_->ForEachChild(dir_, last_, [&](std::string_view name, const EntryRecord& r) {
        Child& c = batch_.emplace_back();
        c.name = name;
        c.rec = r;
        c.bytes = r.sparse() ? r.extents : r.target;
        return batch_.size() < kBatch;
      }));
  if (batch_.size() < kBatch) done_ = true;
  if (batch_.empty()) return false;
  // Point the records into their own bytes only now: the batch has stopped growing.
  for (Child& c : batch_) {
    if (c.rec.sparse()) {
      c.rec.extents = c.bytes;
    } else {
      c.rec.target = c.bytes;
    }
  }
  last_ = batch_.back().name;
  return true;
}

}  // namespace shardfs::index
