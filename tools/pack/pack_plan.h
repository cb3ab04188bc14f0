// What pack writes where, decided before a byte is read: the members in
// pack order (see tools/pack/pack.h for the order and the sample rules), what is
// left out, hard-link groups, the cut into shards and the order in which
// file contents are read.
//
// Everything here is plain computation on a TreeScan; nothing touches the
// filesystem.
#ifndef SHARDFS_TOOLS_PACK_PACK_PLAN_H_
#define SHARDFS_TOOLS_PACK_PACK_PLAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/archive/tar_writer.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/source_tree.h"

namespace shardfs::pack {

inline constexpr uint32_t kNoMember = UINT32_MAX;

// One member of the shards, an index into TreeScan::entries plus where and
// how it is stored.
struct PlannedMember {
  uint32_t entry = 0;
  archive::TarType type = archive::TarType::kFile;
  uint32_t shard = 0;
  // Hard links: the member of the same shard holding the data.
  uint32_t leader = kNoMember;
  // Files that may have several names: the first member of the file, shared
  // by all its names (kNoMember for the others).
  uint32_t group = kNoMember;
  size_t read = 0;  // Regular files with data: position in the read order.
  // Starts a sample (or is a directory, which is a unit of its own); set by
  // CutShards. pack --compress cuts groups only before such members.
  bool sample_start = true;
};

// The part of a name that decides its sample: up to and including the first
// '.', the whole name when it has none. Two names agree up to their first
// '.' exactly when their groups are equal, and name = group + rest. A sample
// is the non-directory entries of one directory with one group.
std::string_view SampleGroup(std::string_view name);

// A path's sample key as pack groups samples: its directory, a '/', then
// SampleGroup of its name ("a/img1.jpg" -> "a/img1."; "a/b" -> "a/b";
// "top.txt" -> "top."). The files of one sample share it.
std::string SampleKey(std::string_view path);

// WebDataset's sample key of a member path (its base_plus_ext, the regex
// ^((?:.*/|)[^.]+)[.]([^/]*)$): the directory plus the name up to the first
// '.' of the last component, and the extension after that dot. A name with a
// leading '.' matches only through its parent ("d/x/.h" -> "d/x/", "h").
// Returns false (no sample) when the regex does not match: no '.' in the
// name, or a leading '.' at the root or below a directory whose name has a
// '.'.
bool WebDatasetKey(std::string_view path, std::string_view* key, std::string_view* ext);

// The order in which pack stores entries (see tools/pack/pack.h): true if `a`
// comes before `b`. Both are entries of one tree.
bool PackOrderLess(const SourceEntry& a, const SourceEntry& b);

// The tar member of `e` stored as `type`; `link` is a symlink's target or
// the path a hard link names.
archive::TarMember TarMemberOf(const SourceEntry& e, archive::TarType type, std::string_view link);

// The members of `scan` in pack order. Unreadable and special entries are
// left out, each with a line in report->skipped or report->errors (as
// options.skip_unreadable / skip_special say). Every name of a file with
// several names (any file with options.follow_symlinks) gets its group; the
// names after the first are kHardlink until CutShards decides.
//
// Sample order. With options.shuffle, or with a list (scan.listed not
// empty), the leaves are reordered as units: each sample whole (its files
// in pack order), and each directory with nothing below it. With shuffle,
// the units are sorted by XXH3-64 of their SampleKey seeded with
// options.shuffle_seed (ties in pack order): a permutation that depends on
// nothing but the seed and the keys, so that the same tree and seed give
// the same order on any machine, and a part of a tree (pack --part) is
// ordered as the whole would order its units. Else the units follow the
// list: by the first line naming one of their entries, or a directory
// above it (ties in pack order). A directory is stored right before the
// first unit below it, so that it still precedes everything below it.
// Without shuffle or list, pack order is kept as is.
std::vector<PlannedMember> PlanMembers(const TreeScan& scan, const PackOptions& options,
                                       PackReport* report);

// Adds one warning per kind of name that a WebDataset reader of the shards
// will not group as the tree does. `members` are in pack order.
void WarnUngroupable(const TreeScan& scan, const std::vector<PlannedMember>& members,
                     std::vector<std::string>* warnings);

// Cuts `members` into shards of whole samples, a shard ending before a
// sample that would take it past `shard_size` bytes (trailer included) or
// `max_files` members (0: no limit), and fixes each member's shard, type
// and leader: a hard link stays a link only to a name of its file in the
// same shard; the first name of the file in a later shard becomes a regular
// member with the data (a copy), so that every shard extracts alone.
// Returns the number of shards.
uint32_t CutShards(const TreeScan& scan, uint64_t shard_size, uint64_t max_files,
                   std::vector<PlannedMember>* members);

// The reads of file content, in write order.
struct ReadPlan {
  std::vector<uint32_t> entries;  // The entry of each read.
  uint64_t bytes = 0;             // Their total size.
};

// Numbers the kFile members (a hard link's copy included) in write order,
// setting their `read`.
ReadPlan PlanReads(const TreeScan& scan, std::vector<PlannedMember>* members);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_PACK_PLAN_H_
