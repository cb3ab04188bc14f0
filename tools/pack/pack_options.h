// The options and the report of `shardfs pack` (tools/pack/pack.h), plain data
// that every part of the pack reads or fills.
#ifndef SHARDFS_TOOLS_PACK_PACK_OPTIONS_H_
#define SHARDFS_TOOLS_PACK_PACK_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "index/index_writer.h"
#include "index/manifest.h"
#include "tools/builder/index_build.h"  // ShardPart
#include "tools/pack/shard_compress.h"  // kDefaultGroupBytes

namespace shardfs::pack {

// What part K of N takes of the whole source (tools/pack/pack_part.h).
struct PartCut {
  uint64_t units = 0;  // Units of the whole source.
  uint64_t first = 0;  // The part's run of them: [first, last).
  uint64_t last = 0;
  uint64_t taken = 0;  // Units the part holds (hard links may move some).
};

struct PackOptions {
  std::string src;
  // Instead of `src`, an index (the view `view` of it; "" = default latest):
  // see tools/pack/pack_from_index.h. from_list, excludes, skip_*, follow_symlinks
  // do not apply.
  std::string from_index;
  std::string view;
  // How a manifest's partitions are found (index/manifest.h); empty: local
  // paths.
  index::PartitionResolver resolve_partition;
  std::string out;
  uint64_t shard_size = 1ull << 30;
  uint64_t max_files = 0;               // Members per shard; 0: no limit.
  std::string name = "train-%06d.tar";  // See tools/pack/shard_name.h.
  int jobs = 0;                         // Reader threads; 0: twice the cores, at least 4.
  std::string from_list;
  std::vector<std::string> excludes;
  bool skip_unreadable = false;
  bool skip_special = false;
  bool follow_symlinks = false;
  bool quiet = false;
  bool force = false;
  // --compress: kNone (plain tar shards), kZstd or kGzip; --compress-level
  // (-1: the codec's default) and --group-bytes. See tools/pack/shard_compress.h.
  // --shard-size counts the uncompressed tar.
  index::Codec compress = index::Codec::kNone;
  int compress_level = -1;
  uint64_t group_bytes = kDefaultGroupBytes;
  // --part K/N (count > 0): only part K of the source, into
  // out/PartDirName(part) (see "Parts" in tools/pack/pack.h and tools/pack/pack_part.h).
  builder::ShardPart part;
  // --shuffle SEED: samples in an order drawn from the seed, else in tree
  // order or, with from_list, in the list's (PlanMembers in
  // tools/pack/pack_plan.h).
  bool shuffle = false;
  uint64_t shuffle_seed = 0;
  // --list-only FILE: write the source's leaves to FILE (see ListSource)
  // instead of packing (tools/pack/pack.h).
  std::string list_only;
};

struct PackReport {
  uint64_t files = 0;  // Regular files stored with their data.
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;  // Names stored as tar hard links.
  // Names of a hard-linked file stored as a regular member again, because
  // the file's first name is in an earlier shard.
  uint64_t link_copies = 0;
  uint64_t bytes = 0;  // File content bytes written (copies included).
  uint64_t shards = 0;
  uint64_t shard_bytes = 0;
  uint64_t tar_bytes = 0;  // pack --compress: the shards' tar bytes before compression.
  std::vector<std::string> shard_paths;
  std::string index_path;
  index::WriteStats index_stats;
  // "PATH: reason" for entries left out (--skip-unreadable, --skip-special).
  std::vector<std::string> skipped;
  // "PATH: reason" for each problem that failed the pack.
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  double seconds = 0;
  PartCut part;         // --part: what the part took.
  uint64_t listed = 0;  // --list-only: paths written.
};

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_PACK_OPTIONS_H_
