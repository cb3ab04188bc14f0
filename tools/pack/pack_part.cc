#include "tools/pack/pack_part.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "index/member_path.h"
#include "tools/pack/pack_plan.h"

namespace shardfs::pack {
namespace {

// Leaves (an index into some list) with their unit key, sorted by key: the
// units are the runs of equal keys.
using KeyedLeaves = std::vector<std::pair<std::string, uint32_t>>;

// Numbers the runs of equal keys of sorted `leaves`: unit[i] is leaf i's.
std::vector<uint64_t> NumberUnits(const KeyedLeaves& leaves, uint64_t* units) {
  std::vector<uint64_t> unit(leaves.size());
  uint64_t u = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (i > 0 && leaves[i].first != leaves[i - 1].first) ++u;
    unit[i] = u;
  }
  *units = leaves.empty() ? 0 : u + 1;
  return unit;
}

// Units joined into one part: each set is named by its smallest unit.
class UnitSets {
 public:
  explicit UnitSets(uint64_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }

  uint64_t Find(uint64_t u) {
    while (parent_[u] != u) {
      parent_[u] = parent_[parent_[u]];
      u = parent_[u];
    }
    return u;
  }

  void Join(uint64_t a, uint64_t b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<uint64_t> parent_;
};

void SetRange(const builder::ShardPart& part, PartCut* cut) {
  std::tie(cut->first, cut->last) = builder::ShardPartRange(cut->units, part);
}

}  // namespace

std::string PartDirName(const builder::ShardPart& part) {
  const size_t width = std::to_string(part.count - 1).size();
  return fmt::format("part-{:0{}}", part.index, width);
}

std::vector<std::string> TakeListPart(std::vector<std::string> paths,
                                      const builder::ShardPart& part, PartCut* cut) {
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  // A listed directory takes everything below it: a path below one is
  // already in that one's unit.
  const std::unordered_set<std::string_view> listed(paths.begin(), paths.end());
  KeyedLeaves leaves;
  for (uint32_t i = 0; i < paths.size(); ++i) {
    bool below = false;
    for (std::string_view up = paths[i]; !up.empty() && !below;) {
      up = index::ParentPath(up);
      below = listed.count(up) > 0;
    }
    if (!below) leaves.emplace_back(SampleKey(paths[i]), i);
  }
  std::sort(leaves.begin(), leaves.end());
  const std::vector<uint64_t> unit = NumberUnits(leaves, &cut->units);
  SetRange(part, cut);
  cut->taken = cut->last - cut->first;
  std::vector<std::string> out;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (unit[i] >= cut->first && unit[i] < cut->last) {
      out.push_back(std::move(paths[leaves[i].second]));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint32_t> SourceLeaves(const TreeScan& scan) {
  const std::vector<SourceEntry>& entries = scan.entries;
  std::unordered_map<std::string_view, uint32_t> dirs;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (entries[i].kind == SourceKind::kDir) dirs.emplace(entries[i].path, i);
  }
  std::vector<bool> has_child(entries.size(), false);
  for (const SourceEntry& e : entries) {
    if (e.path.empty()) continue;
    if (auto it = dirs.find(index::ParentPath(e.path)); it != dirs.end()) {
      has_child[it->second] = true;
    }
  }
  std::vector<uint32_t> leaves;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (entries[i].path.empty() || (entries[i].kind == SourceKind::kDir && has_child[i])) continue;
    leaves.push_back(i);
  }
  return leaves;
}

void TakeScanPart(TreeScan* scan, const builder::ShardPart& part, bool followed_symlinks,
                  PartCut* cut) {
  std::vector<SourceEntry>& entries = scan->entries;
  std::unordered_map<std::string_view, uint32_t> dirs;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (entries[i].kind == SourceKind::kDir) dirs.emplace(entries[i].path, i);
  }
  KeyedLeaves leaves;
  for (uint32_t i : SourceLeaves(*scan)) leaves.emplace_back(SampleKey(entries[i].path), i);
  std::sort(leaves.begin(), leaves.end());
  const std::vector<uint64_t> unit = NumberUnits(leaves, &cut->units);
  SetRange(part, cut);

  UnitSets sets(cut->units);
  {
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> first_unit;  // (dev, ino) -> unit
    for (size_t i = 0; i < leaves.size(); ++i) {
      const SourceEntry& e = entries[leaves[i].second];
      if (e.kind != SourceKind::kFile || !e.unreadable.empty() ||
          (e.nlink < 2 && !followed_symlinks)) {
        continue;
      }
      auto [it, fresh] = first_unit.emplace(std::make_pair(e.dev, e.ino), unit[i]);
      if (!fresh) sets.Join(it->second, unit[i]);
    }
  }
  auto in_part = [&](uint64_t u) {
    const uint64_t set = sets.Find(u);
    return set >= cut->first && set < cut->last;
  };
  cut->taken = 0;
  for (uint64_t u = 0; u < cut->units; ++u) cut->taken += in_part(u);

  std::vector<bool> keep(entries.size(), false);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!in_part(unit[i])) continue;
    const uint32_t leaf = leaves[i].second;
    keep[leaf] = true;
    for (std::string_view up = entries[leaf].path; !up.empty();) {
      up = index::ParentPath(up);
      auto it = dirs.find(up);
      if (it == dirs.end() || keep[it->second]) break;
      keep[it->second] = true;
    }
  }
  std::vector<SourceEntry> kept;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (keep[i] || entries[i].path.empty()) kept.push_back(std::move(entries[i]));
  }
  entries = std::move(kept);
}

}  // namespace shardfs::pack
