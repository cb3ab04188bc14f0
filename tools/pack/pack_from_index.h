// `shardfs pack --from-index IDX [--view SPEC]`: an index (one view of it)
// as pack's source, so that a view that has stabilised can be written out as
// shards of its own ("rematerialised").
//
// The source is a second kind of TreeScan: its entries are the view's tree,
// walked with ForEachChild from the root (paths as the view names them;
// mode, owner, mtime, symlink targets and inode numbers as the index records
// them, so hard links are the names of one inode), and each file carries
// where its bytes lie in the source shards (StoredData: the record's shard,
// offset and size, or a sparse record's extents). The rest of pack (order,
// samples, shard cuts, hard links, prefetch, writer, output directory,
// publishing) is the same code as for a loose tree.
//
// Trust. Every source shard a file of the view uses is opened and checked
// against the index (size and fingerprint) before anything is written, and
// every file's stored bytes against the index's XXH3-64 as they are copied
// (where the index has checksums): a shard that changed since indexing fails
// the pack, naming the shard, and no wrong byte is published. After the
// index is published, the packed tree is compared with the source view
// (VerifyPacked); a difference removes the new index and shards.
//
// Compressed tar shards (a source or a packed index of .tar.gz/.tar.zst):
// each is decoded once, as a whole, into an unnamed temporary file in
// $TMPDIR (src/codec/decoded_shard.h), and files are read from there.
#ifndef SHARDFS_TOOLS_PACK_PACK_FROM_INDEX_H_
#define SHARDFS_TOOLS_PACK_PACK_FROM_INDEX_H_

#include <memory>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "tools/pack/source_tree.h"

namespace shardfs::pack {

struct IndexSource {
  std::unique_ptr<index::IndexReader> reader;
  std::string index_real;  // The index directory's real path.
  TreeScan scan;           // entries[0] is the root; every file has `stored`.
  StoredShards shards;     // fds borrowed from `shard_fds`.
  std::vector<UniqueFd> shard_fds;
};

// Opens the index at `index_path` for `view` ("" = default latest), lists
// its tree and opens and checks the shards its files use. Returns the
// reader's errors (NotFound for a missing index or view, Corruption for a
// damaged record, naming the path), or Corruption naming the shard if a
// shard is missing, not a regular file, or its size or fingerprint differ
// from the index's. `resolve` finds a manifest's partitions
// (index/manifest.h; empty: local paths).
Result<std::unique_ptr<IndexSource>> OpenIndexSource(const std::string& index_path,
                                                     const std::string& view,
                                                     const index::PartitionResolver& resolve = {});

// Compares the packed index at `packed_index` with `source`, entry by entry
// (paths, types, mode, owner, mtime, sizes, symlink targets, which names
// share a file) and every file's bytes (new shards against source shards,
// and the new index's checksums against the new shards). Adds one line per
// difference to `differences`. Returns a non-ok Status only if the packed
// index cannot be opened.
Status VerifyPacked(const IndexSource& source, const std::string& packed_index, int jobs,
                    std::vector<std::string>* differences);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_PACK_FROM_INDEX_H_
