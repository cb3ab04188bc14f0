// `shardfs index build`: scan tar shards in parallel and publish an index.
#ifndef SHARDFS_TOOLS_BUILDER_INDEX_BUILD_H_
#define SHARDFS_TOOLS_BUILDER_INDEX_BUILD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/index_writer.h"
#include "index/tree_emitter.h"
#include "src/archive/nested_scan.h"
#include "tools/builder/remote_shards.h"

namespace shardfs::builder {

// One part of a partitioned build (`index build --part K/N`): part `index`
// (0-based) of `count` contiguous, near-equal runs of the expanded shard
// list. count == 0: no partition, every shard.
struct ShardPart {
  uint64_t index = 0;
  uint64_t count = 0;
};

inline constexpr uint64_t kMaxShardParts = uint64_t{1} << 32;

// Parses "K/N" (decimal K and N, 0 <= K < N <= kMaxShardParts). InvalidArgument naming the
// text and what is wrong otherwise; an empty K ("/4", what an unset task
// index variable leaves) says so.
Status ParseShardPart(std::string_view text, ShardPart* part);

// The range [first, last) of the n shards that `part` takes: [floor(K*n/N),
// floor((K+1)*n/N)). Parts 0..N-1 are disjoint, in order, cover all n, and
// differ in size by at most one; with N > n some are empty.
// REQUIRES: part.index < part.count <= kMaxShardParts.
std::pair<uint64_t, uint64_t> ShardPartRange(uint64_t n, const ShardPart& part);

struct IndexBuildOptions {
  std::vector<std::string> inputs;  // Shard files, directories of *.tar, globs.
  std::string from_list;            // A file with one shard path or URL per line.
  std::string url_prefix;           // Prefixed to the list's lines that are not URLs.
  std::string out;
  bool checksum = true;
  int jobs = 0;  // 0: one per core.
  bool force = false;
  bool quiet = false;
  RemoteLimits remote;  // S3 listing pages, bytes of a remote shard.
  ShardPart part;       // Only this part of the expanded inputs (BuildIndex).
  // About the most memory the build takes (0: index::DefaultBuildMemory()).
  // When the shards may hold more members than fit in it, members are
  // spilled to disk and the tree built in chunks (index/bounded_build.h).
  uint64_t memory = 0;
  // Decoded bytes between the seek points of a gzip-compressed tar
  // (src/archive/ctar_scanner.h); 0: kDefaultSeekSpacing.
  uint64_t seek_spacing = 0;
  // --recursive: nested tars shown as directories (src/archive/nested_scan.h).
  archive::NestOptions nest;
};

struct IndexBuildReport {
  index::WriteStats stats;
  uint64_t shards = 0;         // Scanned: the part's, with options.part.
  uint64_t listed_shards = 0;  // The expanded inputs, before any part is taken.
  uint64_t members = 0;
  uint64_t shard_bytes = 0;
  bool bounded = false;   // Built by index::BoundedIndexWriter,
  uint64_t chunks = 0;    // in this many chunks.
  uint64_t rejected = 0;  // Members whose names or types cannot be in a tree.
  std::vector<std::string> rejected_examples;
  uint64_t nested_archives = 0;  // With --recursive: tars shown as directories,
  uint64_t nested_members = 0;   // and the members inside them (also in `members`).
  double seconds = 0;
};

// Expands inputs to shard paths, in the order given: a directory contributes
// its *.tar files in name order, a pattern with * ? or [ its glob(3) matches
// in name order, a URL itself, an "s3://BUCKET/PREFIX/" its *.tar objects in
// key order (tools/builder/remote_shards.h; `limits` bound the listing). With
// `url_prefix`, the lines of `from_list` that are not URLs are names under
// it. Returns InvalidArgument naming an input that matches nothing.
Result<std::vector<std::string>> ExpandShardInputs(const std::vector<std::string>& inputs,
                                                   const std::string& from_list,
                                                   const std::string& url_prefix = "",
                                                   const RemoteLimits& limits = {});

// Scans every shard (options.jobs at a time) and publishes the index at
// options.out: with options.force over a shardfs index or an empty
// directory only (index::CheckOutputPath), never over one that holds an
// input (a shard, an input directory, the --from-list file): refused, as
// InvalidArgument naming both, before any scan. The index is the same, byte for byte in every key
// and value, whatever the number of jobs. A shard that fails to scan fails the build, naming the
// shard and byte offset; nothing is published then. A shard that is not a regular file (a FIFO, a
// device, ...) fails it before any scan, as InvalidArgument naming the shard and what it is;
// opening one never blocks.
// With options.part, only that part of the expanded list is scanned (shard ids
// from 0), and the index's meta records it (kMetaPartition,
// kMetaPartitionShards); an empty part publishes an empty tree, so that a job
// array of N tasks gives N indexes whatever the shard count.
Result<IndexBuildReport> BuildIndex(const IndexBuildOptions& options);

// The members of options.inputs scanned as BuildIndex scans them, shard ids
// from `first_id` on, for `index add` (options.out is not used).
struct ScannedShards {
  std::vector<index::ShardMeta> shards;  // Paths as given.
  HugeVector<index::MemberEntry> members;
  index::SparseExtents extents;  // By member index.
  IndexBuildReport report;       // Members, rejections, shard bytes.
  // 'Z' keys of the compressed shards among them (index/schema.h).
  std::vector<std::pair<std::string, std::string>> seek_keys;
};
Result<ScannedShards> ScanNewShards(const IndexBuildOptions& options, uint32_t first_id);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_INDEX_BUILD_H_
