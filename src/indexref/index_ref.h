// The one place that turns a user's INDEX argument into what
// index::IndexReader::Open takes, for every command that reads an index
// (mount, ls, stat, index info, views, verify, pack --from-index).
//
// An INDEX is a local index directory or manifest file (as given), an
// http(s):// or s3:// URL of an index bundle or manifest (fetched into the
// index cache, src/indexref/index_cache.h), or a local bundle file (a tar,
// src/indexref/bundle_unpack.h: unpacked into the same cache). A manifest's
// partitions are resolved the same way, each only when the reader opens it:
// a URL is fetched; a relative reference in a manifest fetched by URL is
// taken from the manifest's URL up to its last '/'; a local bundle is
// unpacked; a local directory is used as it is.
#ifndef SHARDFS_SRC_INDEXREF_INDEX_REF_H_
#define SHARDFS_SRC_INDEXREF_INDEX_REF_H_

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "index/index_reader.h"
#include "src/indexref/index_cache.h"
#include "src/reader/volume.h"

namespace shardfs::indexref {

struct IndexRef {
  // What IndexReader::Open opens: a local directory or manifest file.
  std::string path;
  // What messages (and a mount's fsname) name: the argument, a URL redacted.
  std::string shown;
  // True if `path` is a copy in the cache (fetched or unpacked).
  bool cached = false;
  // Keeps the copies in use from being pruned while it lives; shared with
  // the reader options' resolver.
  std::shared_ptr<IndexCache> cache;
};

// Whether `arg` names a URL (http://, https://, s3://).
bool IsIndexUrl(std::string_view arg);

// Whether `path` is a local index bundle: a regular file whose name ends in
// .tar (or .tar.gz, .tgz, .tar.zst) and that is not a manifest.
bool IsBundleFile(const std::string& path);

// Resolves `arg` (see the top) and sets ro->resolve_partition. The cache
// directory is opened only if something is fetched or unpacked. Errors name
// the argument (a URL redacted).
Result<IndexRef> ResolveIndex(const std::string& arg, const IndexCacheOptions& options,
                              index::ReaderOptions* ro);

// The partition resolver of `cache` (index/manifest.h), as ResolveIndex sets it.
index::PartitionResolver MakePartitionResolver(std::shared_ptr<IndexCache> cache);

// ResolveIndex with the cache directory, fetch options and size limit of
// `options`, setting options->reader.resolve_partition: what
// reader::Volume::Open takes next (LocationOf).
Result<IndexRef> ResolveForVolume(const std::string& arg, reader::VolumeOptions* options);

// What reader::Volume::Open opens for `ref`; holds its cache.
reader::IndexLocation LocationOf(const IndexRef& ref);

// InvalidArgument if `arg` is a URL or a bundle file: `command` writes into
// the index, and a fetched copy is not the index.
Status RefuseFetchedIndex(const std::string& arg, std::string_view command);

}  // namespace shardfs::indexref

#endif  // SHARDFS_SRC_INDEXREF_INDEX_REF_H_
