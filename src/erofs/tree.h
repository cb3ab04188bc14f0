// The tree of a view, for the EROFS image writer (src/erofs/image.h): one
// walk of the view's directories through the index reader (its view and rank
// partition), each entry an ErofsNode, each shard that holds a file of the
// view a device. The format's limits are checked here, against the index:
// what the image cannot hold is refused with NotSupported naming the file or
// shard, and the mount then falls back to FUSE or refuses.
#ifndef SHARDFS_SRC_EROFS_TREE_H_
#define SHARDFS_SRC_EROFS_TREE_H_

#include <functional>

#include "base/status.h"
#include "index/schema.h"
#include "src/erofs/image.h"

namespace shardfs::index {
class IndexReader;
}

namespace shardfs::erofs {

// The open, checked descriptor of a shard, for the few bytes the walk reads
// (an unaligned sparse file's blocks are composed into the image): the
// caller opens each shard once, before anything reads it.
using ShardFdFn = std::function<Result<int>(index::ShardId)>;

// The view `reader` answers for (its ranks included) as a tree: one walk of
// its directories. NotSupported naming the file or shard if the format cannot
// hold it (see above); Corruption as the reader reports it, and naming the
// directory where a damaged index lists a directory twice (a loop); what
// `shard_fd` returns if it fails.
Result<ErofsTree> ErofsTreeFromIndex(const index::IndexReader& reader, const ShardFdFn& shard_fd);

}  // namespace shardfs::erofs

#endif  // SHARDFS_SRC_EROFS_TREE_H_
