#include "index/sample_walk.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "index/index_reader.h"
#include "index/walk_guard.h"

namespace shardfs::index {

std::string_view SampleKeyOf(std::string_view name) { return name.substr(0, name.find('.')); }

namespace {

// The sample being gathered from a directory's files.
struct OpenSample {
  bool open = false;
  std::string key;
  uint32_t shard = 0;
  SampleKey first;
};

}  // namespace

Status ForEachSample(const IndexReader& r, const ChildLister& list,
                     const std::function<void(uint32_t shard, SampleKey key)>& fn) {
  std::vector<InodeId> stack{kRootInode};
  WalkGuard dirs;
  OpenSample sample;
  while (!stack.empty()) {
    const InodeId dir = stack.back();
    stack.pop_back();
    const size_t subdirs = stack.size();
    Status failed;
    Status s = list(dir, [&](std::string_view name, const EntryRecord& rec) {
      if (rec.type == EntryType::kDir) {
        failed = dirs.Meet(r, dir, name, rec.inode);
        stack.push_back(rec.inode);
        return failed.ok();
      }
      if (rec.type != EntryType::kFile) return true;
      const std::string_view key = SampleKeyOf(name);
      if (sample.open && key == sample.key) {
        if (rec.shard == ShardId{sample.shard} && rec.offset < sample.first.offset) {
          sample.first = SampleKey{rec.offset, rec.inode.value};
        }
        return true;
      }
      if (sample.open) fn(sample.shard, sample.first);
      sample.open = true;
      sample.key.assign(key);
      sample.shard = rec.shard.value;
      sample.first = SampleKey{rec.offset, rec.inode.value};
      return true;
    });
    SHARDFS_RETURN_IF_ERROR(s);
    SHARDFS_RETURN_IF_ERROR(failed);
    // A sample never spans directories.
    if (sample.open) fn(sample.shard, sample.first);
    sample.open = false;
    // Depth first, in name order.
    std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(subdirs), stack.end());
  }
  return Status::Ok();
}

Result<SampleSplit> SplitSamples(const IndexReader& r, const ChildLister& list, size_t shards,
                                 uint32_t world, uint64_t seed, size_t kept_keys) {
  std::vector<uint64_t> counts(shards, 0);
  std::vector<std::pair<uint32_t, SampleKey>> kept;
  bool all_kept = true;
  SHARDFS_RETURN_IF_ERROR(ForEachSample(r, list, [&](uint32_t shard, SampleKey key) {
    if (shard >= shards) return;  // Not a shard of the version.
    ++counts[shard];
    if (!all_kept) return;
    if (kept.size() == kept_keys) {
      all_kept = false;
      kept = {};
      return;
    }
    kept.emplace_back(shard, key);
  }));
  SHARDFS_ASSIGN_OR_RETURN(SampleSplit split, SampleSplit::Make(r.path(), counts, world, seed));
  std::vector<std::vector<SampleKey>> keys(shards);
  auto keep = [&](uint32_t shard, SampleKey key) {
    if (shard < shards && split.NeedsKeys(shard)) keys[shard].push_back(key);
  };
  if (all_kept) {
    for (const auto& [shard, key] : kept) keep(shard, key);
  } else {
    SHARDFS_RETURN_IF_ERROR(ForEachSample(r, list, keep));
  }
  for (uint32_t i = 0; i < shards; ++i) {
    if (split.NeedsKeys(i)) split.SetKeys(i, std::move(keys[i]));
  }
  return split;
}

}  // namespace shardfs::index
