// One shard's scan for `index build` and `index add`: its members as index
// entries (with sparse extents, zip encodings, a compressed tar's seek
// points and, with --recursive, the compressed tars nested in it), and the
// members whose names or types cannot be in a tree, counted with examples.
#ifndef SHARDFS_TOOLS_BUILDER_SHARD_SCAN_H_
#define SHARDFS_TOOLS_BUILDER_SHARD_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/huge_pages.h"
#include "base/progress.h"
#include "base/status.h"
#include "index/bounded_build.h"
#include "index/schema.h"
#include "index/tree_builder.h"
#include "src/archive/ctar_scanner.h"
#include "src/archive/nested_scan.h"
#include "src/archive/tar_scanner.h"

namespace shardfs::builder {

// Rejected members a report quotes, at most.
inline constexpr size_t kRejectedExamples = 5;
// Marks the provisional shard id of a nested slice's members (below).
inline constexpr uint32_t kSliceMark = index::kSliceMember;

struct ScannedShard {
  Status status;
  archive::ShardInfo info;
  bool remote = false;
  std::string etag;  // A remote shard's, when scanned.
  HugeVector<index::MemberEntry> members;
  // Extents of the sparse members, by index in `members`, in order.
  std::vector<std::pair<size_t, std::vector<index::Extent>>> sparse;
  // Zip archives' encoded (deflated) members, by index in `members`.
  std::vector<std::pair<size_t, index::EncodedMember>> encoded;
  uint64_t rejected = 0;
  std::vector<std::string> rejected_examples;
  // A bounded build: members go here as they are scanned, not to `members`.
  index::MemberSpiller* spiller = nullptr;
  index::ShardId id;
  // A compressed tar: its codec and seek points.
  archive::CompressedScan compressed;
  // --recursive: the compressed tars inside it, each a slice shard; members
  // of slice k carry the provisional shard id kSliceMark | (k - 1) until
  // the caller gives the slices their ids.
  std::vector<archive::NestedScanner::Slice> slices;
  uint64_t nested_archives = 0, nested_members = 0;  // --recursive
};

// Scans the shard at `path` (a file, or a URL downloaded first into a
// temporary file, at most `max_remote_size` bytes) as shard `id` into *out,
// whose `spiller` the caller may have set. A compressed tar is told by its
// magic (seek points every `seek_spacing` decoded bytes), a zip by its end
// record. Failures go to out->status, naming the shard (a URL without its
// query) and the byte offset. `progress`, shared between scanning threads,
// gets the members and bytes in batches, and one unit when the scan ends.
void ScanShard(const std::string& path, index::ShardId id, bool checksum, uint64_t max_remote_size,
               uint64_t seek_spacing, const archive::NestOptions& nest, Progress* progress,
               ScannedShard* out);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_SHARD_SCAN_H_
