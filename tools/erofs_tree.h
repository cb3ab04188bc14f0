// The tree of a view, for the EROFS image writer (tools/erofs_image.h): one
// walk of the view's directories through the index reader (its view and rank
// partition), each entry an ErofsNode, each shard that holds a file of the
// view a device. The format's limits are checked here, against the index:
// what the image cannot hold is refused with NotSupported naming the file or
// shard, and the mount then falls back to FUSE or refuses
// (src/kernel_mount.h).
#ifndef SHARDFS_TOOLS_EROFS_TREE_H_
#define SHARDFS_TOOLS_EROFS_TREE_H_

#include "base/status.h"
#include "tools/erofs_image.h"

namespace shardfs::index {
class IndexReader;
}

namespace shardfs::tools {

// The view `reader` answers for (its ranks included) as a tree: one walk of
// its directories. NotSupported naming the file or shard if the format cannot
// hold it (see above); Corruption as the reader reports it, and naming the
// directory where a damaged index lists a directory twice (a loop).
Result<ErofsTree> ErofsTreeFromIndex(const index::IndexReader& reader);

}  // namespace shardfs::tools

#endif  // SHARDFS_TOOLS_EROFS_TREE_H_
