// `shardfs index add`: appends shards to an index as a new version of the
// full tree ("default"), scanning only the new shards. The new members are
// replayed after the tree of the latest default version, by the rules a
// build follows (index/tree_builder.h: GNU tar's extraction, a later shard's
// path wins), and the result is stored as its difference from default@1.
// Views made before keep what they showed; new ones made --from the new
// default see the new files.
#ifndef SHARDFS_TOOLS_BUILDER_INDEX_ADD_H_
#define SHARDFS_TOOLS_BUILDER_INDEX_ADD_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "index/version_builder.h"
#include "index/view_store.h"
#include "tools/builder/index_build.h"

namespace shardfs::builder {

struct IndexAddOptions {
  std::string index;
  std::vector<std::string> inputs;  // Shard files, directories, globs.
  bool checksum = true;
  int jobs = 0;
  bool quiet = false;
  std::string message;
  RemoteLimits remote;        // For remote shards, as in `index build`.
  archive::NestOptions nest;  // --recursive, as in `index build`.
};

struct IndexAddReport {
  index::VersionInfo created;
  std::string from;
  index::VersionSummary summary;
  IndexBuildReport scan;
  index::ReplayReport replay;
  double scan_seconds = 0;
  double seconds = 0;
};

// InvalidArgument naming the shard if a new shard is already in the index.
Result<IndexAddReport> AddShards(const IndexAddOptions& options);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_INDEX_ADD_H_
