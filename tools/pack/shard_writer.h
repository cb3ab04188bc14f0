// Writing the planned members into shards: one shard at a time as NAME.tmp
// (archive::TarWriter), fsynced and renamed to NAME once complete, each
// member's exact data offset and XXH3-64 fed to index::IndexWriter. File
// content comes from a SourcePrefetch, in read order.
//
// An unreadable file is left out (skip_unreadable) or fails the pack; after
// such a failure the writer writes nothing more and only goes on opening the
// remaining files, so that every unreadable one is listed. A file that
// changed while it was read fails the pack at once. A failed write removes
// every shard this run wrote, and nothing else.
//
// Test hook: with SHARDFS_TEST_FAIL_AFTER_SHARDS=N in the environment, the
// write fails (IoError) right after the Nth shard is complete, as a full
// disk would. Only the integration tests set it.
//
// Thread safety: call from one thread (the prefetch's writer).
#ifndef SHARDFS_TOOLS_PACK_SHARD_WRITER_H_
#define SHARDFS_TOOLS_PACK_SHARD_WRITER_H_

#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "index/index_writer.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/shard_compress.h"
#include "tools/pack/shard_name.h"
#include "tools/pack/source_prefetch.h"
#include "tools/pack/source_tree.h"

namespace shardfs::pack {

// What to write, and where.
struct ShardPlan {
  const TreeScan* scan = nullptr;
  // In pack order, cut into shards (CutShards) with their reads numbered
  // (PlanReads) as `prefetch` reads them.
  const std::vector<PlannedMember>* members = nullptr;
  ShardNamePattern pattern;
  std::string out_dir;  // Exists; shards are named out_dir + "/" + pattern.Format(n).
  bool skip_unreadable = false;
  // An index source (pack --from-index): the shards its entries' bytes are
  // streamed from, each big file's stored bytes checked against the index's
  // checksum. Null for a loose tree.
  const StoredShards* stored = nullptr;
  // pack --compress: each shard's tar is written to an unnamed temporary
  // file, then compressed into NAME.tmp (tools/pack/shard_compress.h). codec
  // kNone: plain tar shards.
  GroupCompression compress;
};

// Writes every member of `plan`, adding each shard and member to `index`
// and counting them in `report` (files, dirs, ..., shard_paths, skipped,
// errors). Returns InvalidArgument if entries cannot be packed (listed in
// report->errors), Corruption if a file changed while it was packed,
// IoError if writing fails; on failure no shard of this run is left.
// REQUIRES: `prefetch` is started.
Status WriteShards(const ShardPlan& plan, SourcePrefetch* prefetch, Progress* progress,
                   index::IndexWriter* index, PackReport* report);

// The pack has failed already: opens every file of `plan` that would be
// read, writing nothing, and adds each that cannot be opened to
// report->errors. Returns InvalidArgument if there are errors, else Ok.
// REQUIRES: `prefetch` is started.
Status CheckSources(const ShardPlan& plan, SourcePrefetch* prefetch, Progress* progress,
                    PackReport* report);

// Removes the shards of report->shard_paths (what this run wrote) and
// clears the list.
void RemoveShards(PackReport* report);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_SHARD_WRITER_H_
