// Pack's output directory before a pack: what an earlier pack (finished or
// interrupted) may have left there, refused without --force and removed
// with it. A pack replaces no file it did not write itself unless forced.
#ifndef SHARDFS_TOOLS_OUTPUT_DIR_H_
#define SHARDFS_TOOLS_OUTPUT_DIR_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "tools/shard_name.h"

namespace shardfs::tools {

// Without --force: AlreadyExists naming the first file in `out_dir` that
// has a shard's name or a shard's NAME.tmp name (whoever wrote it), shown as
// `out_shown` + its name. Adds a warning per index.tmp-* directory (an
// interrupted index publish) to `warnings` if not null. A missing `out_dir`
// holds nothing.
Status RefuseLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                       const std::string& out_shown, std::vector<std::string>* warnings);

// --force: removes `index_path` and every file RefuseLeftovers would refuse
// or warn about. Returns IoError naming the first path that will not go.
Status CleanOutput(const std::string& out_dir, const ShardNamePattern& pattern,
                   const std::string& index_path);

}  // namespace shardfs::tools

#endif  // SHARDFS_TOOLS_OUTPUT_DIR_H_
