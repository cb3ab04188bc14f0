// `shardfs index manifest`: one tree from several indexes (partitions), each
// built on its own shards, e.g. by `index build --part K/N` in a job array.
// See index/manifest.h for the union's rules and the file.
#ifndef SHARDFS_BUILDER_INDEX_MANIFEST_H_
#define SHARDFS_BUILDER_INDEX_MANIFEST_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "builder/view_create.h"
#include "index/manifest.h"

namespace shardfs::builder {

struct ManifestOptions {
  std::vector<std::string> parts;  // Index directories, in order: later ones win.
  std::string out;
  bool force = false;  // Replace a manifest at `out` (never anything else).
};

struct ManifestReport {
  index::ManifestTree tree;  // default@1 of the union.
  uint64_t shards = 0;
  uint64_t manifest_bytes = 0;
  uint64_t partition_bytes = 0;  // The partitions' index bytes.
  std::vector<std::string> warnings;
  double seconds = 0;
};

// Opens every partition, works out their union and writes the manifest to
// options.out atomically. InvalidArgument naming the partition for: a part
// that is not an index (a manifest included), a shard in two partitions, two
// partitions with one "K/N" part, and where the union would depend on member
// order (index/manifest_builder.h). Partitions are recorded relative to the
// manifest's directory, so the two move together. Nothing is written on failure.
Result<ManifestReport> MakeManifest(const ManifestOptions& options);

// `view create` on the manifest at options.index: the view's rules applied
// in every partition (index/manifest.h, "Views"), then the union of those
// versions added to the manifest as NAME@N. Listed paths are checked
// against the union first (unless ignore_missing), so a partition that lacks
// one is no error. A rename map is refused: a rename may move a path from one
// partition's tree into another's, which per-partition versions cannot say.
// A failure after some partitions have their version leaves the manifest as
// it was (those versions are unused).
Result<ViewCreateReport> CreateManifestView(const ViewCreateOptions& options);

}  // namespace shardfs::builder

#endif  // SHARDFS_BUILDER_INDEX_MANIFEST_H_
