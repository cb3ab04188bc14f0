// The samples of a view's tree, as a rank split counts them
// (index/rank_partition.h): the files of one directory that share a key,
// the name up to its first '.' (WebDataset's grouping, and what `shardfs
// pack` keeps adjacent in one shard). A directory lists its names in sorted
// order, so one key's files come one after another.
#ifndef SHARDFS_INDEX_SAMPLE_WALK_H_
#define SHARDFS_INDEX_SAMPLE_WALK_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "base/status.h"
#include "index/rank_partition.h"
#include "index/schema.h"

namespace shardfs::index {

class IndexReader;

// Lists directory `dir`'s entries in name order, calling `fn` for each
// until it returns false.
using ChildLister = std::function<Status(
    InodeId dir, const std::function<bool(std::string_view, const EntryRecord&)>& fn)>;

// The sample's key part of a file name: the name up to its first '.'.
std::string_view SampleKeyOf(std::string_view name);

// Walks the tree below the root of `r` through `list` once, depth first,
// and calls `fn(shard, key)` for each sample: the shard of its first file
// (in name order), and the smallest offset of its files in that shard, with
// that file's inode. Symlinks and directories are no sample. Corruption if
// a directory lists one met before (index/walk_guard.h).
Status ForEachSample(const IndexReader& r, const ChildLister& list,
                     const std::function<void(uint32_t shard, SampleKey key)>& fn);

// The split of the samples of `r`'s tree (listed through `list`, over its
// shards 0..shards-1) into `world` runs by `seed`: SampleSplit::Make's, with
// the keys of the shards a cut falls in set. The first walk counts the
// samples of each shard and keeps their keys while they fit in `kept_keys`
// (a million: 24 MB); a larger tree is walked again for the keys of the cut
// shards only. The InvalidArgument of SampleSplit::Make; the Status of a
// walk.
Result<SampleSplit> SplitSamples(const IndexReader& r, const ChildLister& list, size_t shards,
                                 uint32_t world, uint64_t seed, size_t kept_keys = size_t{1} << 20);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_SAMPLE_WALK_H_
