// `shardfs view export --format index`: one view (and one rank's share of
// it) as a self-contained index of its own, so that a node of a job fetches
// and opens the 1/N of the tree it reads instead of the whole index.
//
// The export walks the view as a mount of it would show it (the reader's
// view and rank partition: index/index_reader.h), and writes every entry as
// a member of a new index (index/index_writer.h), in tree order: each
// directory with its mode, owner and mtime, each file where its bytes are
// (shard, offset, size, checksum, sparse extents), each symlink, and each
// further name of a hard-linked file or symlink as a hard link. Link counts
// are the new tree's: a file whose other names are in another rank's share
// has one name here. The shard table holds only the shards the share's files
// are in, in the order of the source index, each with the meta the source
// indexed (size, mtime, fingerprint, a remote shard's URL and ETag), so the
// exported index checks shards as the source does. Versions and views of
// the source are not carried: the export is default@1 of the new index.
#ifndef SHARDFS_TOOLS_BUILDER_RANK_EXPORT_H_
#define SHARDFS_TOOLS_BUILDER_RANK_EXPORT_H_

#include <string>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/index_writer.h"

namespace shardfs::builder {

struct RankExportStats {
  uint64_t entries = 0;  // Names written (the root included).
  uint64_t shards = 0;
  index::WriteStats written;
};

// Exports what `reader` answers for (its view, its rank partition) as an
// index at `out` (index/index_writer.h's publishing and --force rules).
Result<RankExportStats> ExportIndex(const index::IndexReader& reader, const std::string& out,
                                    const index::WriteOptions& options);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_RANK_EXPORT_H_
