// The directories a walk of an index's tree has met. Every walk that lists
// directories by the inodes their parents name (the kernel image, `ls -R`,
// verify) keeps one: a damaged index whose directory lists an ancestor, or
// any directory met before, then ends the walk with Corruption instead of
// looping for ever with its memory growing.
#ifndef SHARDFS_INDEX_WALK_GUARD_H_
#define SHARDFS_INDEX_WALK_GUARD_H_

#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::index {

class IndexReader;

class WalkGuard {
 public:
  // A walk from directory `start`.
  explicit WalkGuard(InodeId start = kRootInode) : met_{start.value} {}

  // Ok the first time directory `child` is met, listed as `name` in
  // directory `dir`; Corruption naming the index, the directory's path, the
  // name and the inode after that.
  Status Meet(const IndexReader& r, InodeId dir, std::string_view name, InodeId child);

 private:
  std::unordered_set<uint64_t> met_;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_WALK_GUARD_H_
