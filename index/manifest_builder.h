// Working out the union of a manifest's partitions (index/manifest.h, "The
// union"): one walk over the directories that several partitions hold, with
// a merge of their entries by name. Directories that one partition holds
// alone are not entered, so the cost is that of the union's shared part.
#ifndef SHARDFS_INDEX_MANIFEST_BUILDER_H_
#define SHARDFS_INDEX_MANIFEST_BUILDER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/manifest.h"

namespace shardfs::index {

// The union of `parts`, each opened (without a rank partition) at the
// version the tree is for, in manifest order; `names` name them in messages.
// InvalidArgument naming the path and both partitions where the union would
// depend on member order (a directory with entries over a file or symlink),
// and where a dropped file has other names (hard links).
// The tree's name, version, time, source and message are left to the caller.
Result<ManifestTree> BuildUnionTree(const std::vector<const IndexReader*>& parts,
                                    const std::vector<std::string>& names);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_MANIFEST_BUILDER_H_
