// A partitioned index: a manifest file naming several indexes (partitions),
// each built on its own shards (`index build --part K/N`), read as one tree.
// Later partitions win on equal paths, as later shards do.
#ifndef SHARDFS_INDEX_MANIFEST_H_
#define SHARDFS_INDEX_MANIFEST_H_

#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs::index {

// A manifest file begins with this line; nothing else does (an index is a
// directory, a shard a tar).
inline constexpr std::string_view kManifestMagic = "shardfs-manifest 1\n";

// True if `path` is a regular file (not a symlink to one is fine) that begins
// with kManifestMagic. Never blocks on a FIFO.
bool IsManifestFile(const std::string& path);

// Maps a partition reference, as the manifest records it, to a local index
// directory. `base` is the manifest's own location (its directory, or the
// URL it was fetched from, up to and including the last '/'); a relative
// reference is taken from there. The default (an empty function) accepts
// local references only: absolute paths, or relative ones joined to `base`.
using PartitionResolver =
    std::function<Result<std::string>(const std::string& base, const std::string& ref)>;

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_MANIFEST_H_
