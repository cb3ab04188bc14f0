// `shardfs index manifest`: one tree from several indexes (partitions), each
// built on its own shards, e.g. by `index build --part K/N` in a job array.
// See index/manifest.h for the union's rules and the file.
#ifndef SHARDFS_TOOLS_BUILDER_INDEX_MANIFEST_H_
#define SHARDFS_TOOLS_BUILDER_INDEX_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
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

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_INDEX_MANIFEST_H_
