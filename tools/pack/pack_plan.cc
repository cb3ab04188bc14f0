#include "tools/pack/pack_plan.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "index/member_path.h"
#include "tools/pack/verify.h"

namespace shardfs::pack {
namespace {

// Samples: consecutive non-directory members of one directory whose names
// agree up to the first '.'.
bool SameSample(std::string_view a, std::string_view b) {
  return index::ParentPath(a) == index::ParentPath(b) &&
         SampleGroup(index::BaseName(a)) == SampleGroup(index::BaseName(b));
}

// Up to this many examples in a naming warning.
constexpr size_t kExamples = 3;

struct NameProblem {
  uint64_t count = 0;
  std::vector<std::string> examples;

  void Add(std::string example) {
    if (count++ < kExamples) examples.push_back(std::move(example));
  }
  void Report(std::string_view what, std::vector<std::string>* warnings) const {
    if (count == 0) return;
    warnings->push_back(fmt::format("{} {} (e.g. {}{})", count, what, fmt::join(examples, ", "),
                                    count > kExamples ? ", ..." : ""));
  }
};

// Members [i, j) of a shard, placed as a unit (one sample, or one
// directory): their bytes in that shard and, on commit, their shard, type
// and link leader.
class ShardCutter {
 public:
  ShardCutter(const TreeScan& scan, std::vector<PlannedMember>* members)
      : scan_(scan), members_(*members), holder_(members->size(), kNoMember) {}

  uint64_t Place(size_t i, size_t j, uint32_t shard, bool commit) {
    sample_holders_.clear();
    uint64_t bytes = 0;
    for (size_t k = i; k < j; ++k) {
      PlannedMember& pm = members_[k];
      const SourceEntry& e = scan_.entries[pm.entry];
      archive::TarType type = pm.type;
      uint32_t leader = kNoMember;
      if (pm.group != kNoMember) {
        uint32_t h = holder_[pm.group];
        for (const auto& [g, m] : sample_holders_) {
          if (g == pm.group) h = m;
        }
        bool here = h != kNoMember && (h >= i ? true : members_[h].shard == shard);
        if (here && k != pm.group) {
          type = archive::TarType::kHardlink;
          leader = h;
        } else {
          type = archive::TarType::kFile;
          sample_holders_.emplace_back(pm.group, static_cast<uint32_t>(k));
        }
      }
      std::string_view link = type == archive::TarType::kHardlink
                                  ? std::string_view(scan_.entries[members_[leader].entry].path)
                                  : std::string_view(e.link_target);
      bytes += archive::TarMemberBytes(TarMemberOf(e, type, link));
      if (commit) {
        pm.shard = shard;
        pm.type = type;
        pm.leader = leader;
      }
    }
    if (commit) {
      for (const auto& [g, m] : sample_holders_) holder_[g] = m;
    }
    return bytes;
  }

 private:
  const TreeScan& scan_;
  std::vector<PlannedMember>& members_;
  std::vector<uint32_t> holder_;  // group -> member with data in its shard.
  std::vector<std::pair<uint32_t, uint32_t>> sample_holders_;  // group -> member, in a sample.
};

// Whether `path` lies below the directory `dir` ("" is the root).
bool IsBelow(std::string_view path, std::string_view dir) {
  if (dir.empty()) return !path.empty();
  return path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/';
}

// A run [first, last) of positions in pack order that is placed whole when
// samples are reordered: one sample, or a directory with nothing below it.
struct LeafUnit {
  size_t first = 0;
  size_t last = 0;
  uint64_t rank = 0;  // Lower first.
};

// The leaf units of `order` (entries in pack order, where a directory's
// descendants directly follow it), in that order, ranks unset.
std::vector<LeafUnit> LeafUnits(const TreeScan& scan, const std::vector<uint32_t>& order) {
  std::vector<LeafUnit> units;
  for (size_t i = 0; i < order.size();) {
    const SourceEntry& e = scan.entries[order[i]];
    size_t j = i + 1;
    if (e.kind == SourceKind::kDir) {
      if (j < order.size() && IsBelow(scan.entries[order[j]].path, e.path)) {
        i = j;  // Stored as an ancestor of its first unit.
        continue;
      }
    } else {
      while (j < order.size() && scan.entries[order[j]].kind != SourceKind::kDir &&
             SameSample(e.path, scan.entries[order[j]].path)) {
        ++j;
      }
    }
    units.push_back({i, j, 0});
    i = j;
  }
  return units;
}

// Ranks each unit by the first line of `listed` that names one of its
// entries or a directory above it (entries named by no line last).
void RankByList(const TreeScan& scan, const std::vector<uint32_t>& order,
                const std::vector<std::string>& listed, std::vector<LeafUnit>* units) {
  std::unordered_map<std::string_view, uint64_t> line_of;
  for (size_t i = 0; i < listed.size(); ++i) line_of.emplace(listed[i], i);
  for (LeafUnit& u : *units) {
    u.rank = UINT64_MAX;
    for (size_t k = u.first; k < u.last; ++k) {
      std::string_view p = scan.entries[order[k]].path;
      for (;;) {
        if (auto it = line_of.find(p); it != line_of.end()) {
          u.rank = std::min(u.rank, it->second);
          break;
        }
        if (p.empty()) break;
        p = index::ParentPath(p);
      }
    }
  }
}

// `order` (pack order) with its leaf units sorted by rank (stable: ties in
// pack order), each directory placed right before the first unit below it.
std::vector<uint32_t> PlaceUnits(const TreeScan& scan, const std::vector<uint32_t>& order,
                                 std::vector<LeafUnit> units) {
  std::stable_sort(units.begin(), units.end(),
                   [](const LeafUnit& a, const LeafUnit& b) { return a.rank < b.rank; });
  std::unordered_map<std::string_view, size_t> dir_at;  // Directory path -> position.
  for (size_t i = 0; i < order.size(); ++i) {
    const SourceEntry& e = scan.entries[order[i]];
    if (e.kind == SourceKind::kDir) dir_at.emplace(e.path, i);
  }
  std::vector<bool> placed(order.size(), false);
  std::vector<uint32_t> out;
  out.reserve(order.size());
  std::vector<size_t> above;
  for (const LeafUnit& u : units) {
    above.clear();
    for (std::string_view p = scan.entries[order[u.first]].path; !p.empty();) {
      p = index::ParentPath(p);
      auto it = dir_at.find(p);
      if (it == dir_at.end()) continue;
      if (placed[it->second]) break;  // And so is everything above it.
      above.push_back(it->second);
    }
    for (auto it = above.rbegin(); it != above.rend(); ++it) {
      placed[*it] = true;
      out.push_back(order[*it]);
    }
    for (size_t k = u.first; k < u.last; ++k) {
      placed[k] = true;
      out.push_back(order[k]);
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    if (!placed[i]) out.push_back(order[i]);  // None: every entry is a unit or above one.
  }
  return out;
}

// The entries of `scan` that can be packed, in pack order; the others get a
// line in report->skipped or report->errors.
std::vector<uint32_t> PackableInOrder(const TreeScan& scan, const PackOptions& options,
                                      PackReport* report) {
  std::vector<uint32_t> order(scan.entries.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return PackOrderLess(scan.entries[a], scan.entries[b]);
  });
  std::vector<uint32_t> kept;
  kept.reserve(order.size());
  for (uint32_t i : order) {
    const SourceEntry& e = scan.entries[i];
    if (!e.unreadable.empty()) {
      std::string line = fmt::format("{}: {}", ShownPath(e.path), e.unreadable);
      (options.skip_unreadable ? report->skipped : report->errors).push_back(std::move(line));
      continue;
    }
    if (e.kind == SourceKind::kSpecial) {
      if (options.skip_special) {
        report->skipped.push_back(fmt::format("{}: {}", ShownPath(e.path), e.special));
      } else {
        report->errors.push_back(
            fmt::format("{}: {} cannot be packed (use --skip-special to leave it out)",
                        ShownPath(e.path), e.special));
      }
      continue;
    }
    kept.push_back(i);
  }
  return kept;
}

// The sample order of PlanMembers (see tools/pack/pack_plan.h) applied to
// `order`, in pack order.
std::vector<uint32_t> OrderSamples(const TreeScan& scan, const PackOptions& options,
                                   std::vector<uint32_t> order) {
  if (!options.shuffle && scan.listed.empty()) return order;
  std::vector<LeafUnit> units = LeafUnits(scan, order);
  if (options.shuffle) {
    for (LeafUnit& u : units) {
      const std::string key = SampleKey(scan.entries[order[u.first]].path);
      u.rank = XXH3_64bits_withSeed(key.data(), key.size(), options.shuffle_seed);
    }
  } else {
    RankByList(scan, order, scan.listed, &units);
  }
  return PlaceUnits(scan, order, std::move(units));
}

}  // namespace

std::string SampleKey(std::string_view path) {
  const std::string_view parent = index::ParentPath(path);
  const std::string_view group = SampleGroup(index::BaseName(path));
  if (parent.empty()) return std::string(group);
  return fmt::format("{}/{}", parent, group);
}

std::string_view SampleGroup(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot + 1);
}

archive::TarMember TarMemberOf(const SourceEntry& e, archive::TarType type, std::string_view link) {
  archive::TarMember m;
  m.path = e.path;
  m.type = type;
  m.mode = e.mode & 07777;
  m.uid = e.uid;
  m.gid = e.gid;
  m.mtime_ns = e.mtime_ns;
  m.size = type == archive::TarType::kFile ? e.size : 0;
  m.link_target = link;
  return m;
}

bool WebDatasetKey(std::string_view path, std::string_view* key, std::string_view* ext) {
  size_t slash = path.rfind('/');
  size_t name_at = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', name_at);
  if (dot == std::string_view::npos) return false;
  if (dot > name_at) {
    *key = path.substr(0, dot);
    *ext = path.substr(dot + 1);
    return true;
  }
  // A leading '.': the regex's [^.]+ must then end with the '/' before it,
  // so it takes the parent's name, which must exist and have no '.'.
  if (name_at == 0) return false;
  size_t parent_at = path.rfind('/', name_at - 2);
  parent_at = parent_at == std::string_view::npos ? 0 : parent_at + 1;
  std::string_view parent = path.substr(parent_at, name_at - 1 - parent_at);
  if (parent.empty() || parent.find('.') != std::string_view::npos) return false;
  *key = path.substr(0, name_at);
  *ext = path.substr(name_at + 1);
  return true;
}

bool PackOrderLess(const SourceEntry& a, const SourceEntry& b) {
  std::string_view ra = a.path, rb = b.path;
  for (;;) {
    if (ra.empty()) return !rb.empty();  // `a` is an ancestor of `b`.
    if (rb.empty()) return false;
    size_t sa = ra.find('/'), sb = rb.find('/');
    std::string_view ca = ra.substr(0, sa), cb = rb.substr(0, sb);
    if (ca == cb) {
      ra = sa == std::string_view::npos ? std::string_view() : ra.substr(sa + 1);
      rb = sb == std::string_view::npos ? std::string_view() : rb.substr(sb + 1);
      continue;
    }
    // Siblings: by sample group, then files before directories, then the
    // rest of the name.
    std::string_view ga = SampleGroup(ca), gb = SampleGroup(cb);
    if (ga != gb) return ga < gb;
    bool dir_a = sa != std::string_view::npos || a.kind == SourceKind::kDir;
    bool dir_b = sb != std::string_view::npos || b.kind == SourceKind::kDir;
    if (dir_a != dir_b) return dir_b;
    return ca.substr(ga.size()) < cb.substr(gb.size());
  }
}

std::vector<PlannedMember> PlanMembers(const TreeScan& scan, const PackOptions& options,
                                       PackReport* report) {
  // Ordered before the names of a file are grouped: its first name stored
  // is the one with the data.
  const std::vector<uint32_t> order =
      OrderSamples(scan, options, PackableInOrder(scan, options, report));
  std::vector<PlannedMember> members;
  members.reserve(order.size());
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, uint32_t>>
      groups;  // dev -> ino -> member
  for (uint32_t i : order) {
    const SourceEntry& e = scan.entries[i];
    PlannedMember pm;
    pm.entry = i;
    switch (e.kind) {
      case SourceKind::kDir:
        pm.type = archive::TarType::kDir;
        break;
      case SourceKind::kSymlink:
        pm.type = archive::TarType::kSymlink;
        break;
      default: {
        pm.type = archive::TarType::kFile;
        // A file reached through a followed symlink may be one already seen.
        if (e.nlink > 1 || options.follow_symlinks) {
          auto [it, fresh] = groups[e.dev].emplace(e.ino, static_cast<uint32_t>(members.size()));
          pm.group = it->second;
          if (!fresh) pm.type = archive::TarType::kHardlink;  // Until the shards are cut.
        }
      }
    }
    members.push_back(pm);
  }
  return members;
}

uint32_t CutShards(const TreeScan& scan, uint64_t shard_size, uint64_t max_files,
                   std::vector<PlannedMember>* members) {
  const std::vector<PlannedMember>& m = *members;
  ShardCutter cutter(scan, members);
  uint32_t shard = 0;
  uint64_t shard_bytes = 0, shard_count = 0;
  for (size_t i = 0; i < m.size();) {
    size_t j = i + 1;
    if (m[i].type != archive::TarType::kDir) {
      const std::string& first = scan.entries[m[i].entry].path;
      while (j < m.size() && m[j].type != archive::TarType::kDir &&
             SameSample(first, scan.entries[m[j].entry].path)) {
        (*members)[j].sample_start = false;
        ++j;
      }
    }
    uint64_t bytes = cutter.Place(i, j, shard, false);
    uint64_t count = j - i;
    if (shard_count > 0 && (shard_bytes + bytes + archive::kTarTrailer > shard_size ||
                            (max_files > 0 && shard_count + count > max_files))) {
      ++shard;
      shard_bytes = shard_count = 0;
    }
    shard_bytes += cutter.Place(i, j, shard, true);
    shard_count += count;
    i = j;
  }
  return shard + 1;
}

void WarnUngroupable(const TreeScan& scan, const std::vector<PlannedMember>& members,
                     std::vector<std::string>* warnings) {
  NameProblem no_dot, hidden, repeated;
  std::string_view sample_key;
  std::vector<std::string> exts;  // Lowercased, of the current key.
  bool sample_repeats = false;
  for (const PlannedMember& pm : members) {
    if (pm.type != archive::TarType::kFile && pm.type != archive::TarType::kHardlink) continue;
    const std::string& path = scan.entries[pm.entry].path;
    std::string_view name = index::BaseName(path);
    if (name.front() == '.') {
      hidden.Add(EscapePath(path));
    } else if (name.find('.') == std::string_view::npos) {
      no_dot.Add(EscapePath(path));
    }
    std::string_view key, ext;
    if (!WebDatasetKey(path, &key, &ext)) continue;
    if (key != sample_key) {
      sample_key = key;
      exts.clear();
      sample_repeats = false;
    }
    // WebDataset lowercases extensions before it looks for repeats.
    std::string lower(ext);
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    if (std::find(exts.begin(), exts.end(), lower) != exts.end()) {
      if (!sample_repeats) repeated.Add(EscapePath(path));
      sample_repeats = true;
    } else {
      exts.push_back(std::move(lower));
    }
  }
  no_dot.Report("file(s) have no '.' in their name: WebDataset finds no sample key and skips them",
                warnings);
  hidden.Report(
      "file(s) have a name starting with '.': their sample key is empty (WebDataset makes "
      "all of a directory's such files one sample, or skips them)",
      warnings);
  repeated.Report(
      "sample(s) have two files whose extensions differ only in case: WebDataset lowercases "
      "extensions and sees a repeated one",
      warnings);
}

ReadPlan PlanReads(const TreeScan& scan, std::vector<PlannedMember>* members) {
  ReadPlan plan;
  for (PlannedMember& pm : *members) {
    if (pm.type != archive::TarType::kFile) continue;
    pm.read = plan.entries.size();
    plan.entries.push_back(pm.entry);
    plan.bytes += scan.entries[pm.entry].size;
  }
  return plan;
}

}  // namespace shardfs::pack
