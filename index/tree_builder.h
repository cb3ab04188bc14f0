// The tree an index describes, worked out in memory from archive members:
// no RocksDB, no FUSE, no files. index_writer.h states the rules (GNU tar 1.34
// extraction); this unit applies them in four steps, each callable alone:
//
//   members (archive order)
//     -> ReplayMembers   names and objects as tar would leave them, hard links
//                        resolved when met, refusals and replacements noted
//     -> SortLiveNames   the live names in tree order (member_path.h)
//     -> LinkNodes       one node per name; a later name of an object is a
//                        hard link to the first
//     -> AssignInodes    dense inodes in tree order (root = 1), link counts,
//                        mtimes of implied directories, the counts
//
// BuildTree runs all four. The result points into the members' paths, which
// must outlive it.
#ifndef SHARDFS_INDEX_TREE_BUILDER_H_
#define SHARDFS_INDEX_TREE_BUILDER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/huge_pages.h"
#include "index/schema.h"

namespace shardfs::index {

// One archive member, already normalised (NormalizeMemberPath).
struct MemberEntry {
  std::string path;
  EntryType type = EntryType::kFile;
  // A hard link: `link_target` is the normalised path of the file it names
  // and the data fields are ignored.
  bool is_hardlink = false;
  uint32_t mode = 0;  // Permission bits; the type bits are derived from type.
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  ShardId shard;
  uint64_t offset = 0;
  bool has_checksum = false;
  uint64_t xxh3 = 0;
  std::string link_target;     // Symlink target (raw bytes) or hard link target.
  uint64_t header_offset = 0;  // Byte offset of the member's first header; for messages.
};

// The member index of an implied directory (no member describes it).
inline constexpr int64_t kImplied = -1;
// How many example paths a report keeps.
inline constexpr size_t kReportExamples = 5;

// A member the replay refused, as tar extraction would refuse it.
struct Refusal {
  uint32_t member = 0;  // Index in the member list.
  std::string reason;   // "'a' is not a directory", ...
};

// What the replay did besides building the tree.
struct ReplayReport {
  std::vector<Refusal> refusals;  // In archive order.
  // Entries replaced (or directories re-described) by a later member.
  uint64_t replaced = 0;
  std::vector<std::string> replaced_examples;  // The first few distinct paths.
  // The member that replaced each of replaced_examples first.
  std::vector<uint32_t> replaced_example_members;
};

// While members are replayed: what a name refers to, a directory or a file or
// symlink with all its hard links (one inode).
struct TreeObject {
  int64_t member = kImplied;  // The member describing it; directories: the last one.
  EntryType type = EntryType::kDir;
};

// A path of the tree while members are replayed. A name that a later member
// replaces is marked dead, never reused.
struct TreeName {
  std::string_view path;  // Into a member's path.
  uint32_t object = 0;
  uint32_t parent = 0;  // The name of its directory.
  bool alive = true;
  bool has_children = false;  // Directories: something was created below it.
};

// Step 1's result. names[0] and objects[0] are the root.
struct ReplayedTree {
  HugeVector<TreeObject> objects;
  HugeVector<TreeName> names;
  size_t live_names = 0;
  ReplayReport report;
};

// One entry of the final tree, in tree order; nodes[0] is the root.
struct TreeNode {
  std::string_view path;
  int64_t member = kImplied;
  EntryType type = EntryType::kDir;
  bool hardlink = false;  // Another name of link_node's inode; no inode of its own.
  uint64_t inode = 0;
  int64_t mtime_ns = INT64_MIN;  // Set by AssignInodes.
  uint32_t nlink = 0;            // Set by AssignInodes; 0 for hard link nodes.
  size_t link_node = 0;          // Hard links: the node of the inode they name.
  size_t parent_node = 0;        // The root: itself.
};

struct TreeCounts {
  uint64_t files = 0;
  uint64_t dirs = 0;  // Including the root and implied ones.
  uint64_t implied_dirs = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;  // Names beyond the first of an inode.
  uint64_t bytes = 0;      // Content bytes of regular files, each inode once.
  uint64_t max_inode = 0;  // files + dirs + symlinks.
};

struct Tree {
  HugeVector<TreeNode> nodes;
  TreeCounts counts;
  ReplayReport report;
};

// Step 1: replays `members` in order against the tree as the members before
// each left it (index_writer.h's rules).
ReplayedTree ReplayMembers(std::span<const MemberEntry> members);

// Step 2: the indexes of the live names of `replayed`, in tree order. Input
// already in tree order costs one comparison per name; large unsorted input
// is sorted on two threads.
std::vector<uint32_t> SortLiveNames(const ReplayedTree& replayed);

// Step 3: one node per name of `order` (SortLiveNames), parents resolved; the
// first name of an object in tree order carries its inode, the later ones are
// hard links to that node. Inodes, link counts and mtimes are left unset.
HugeVector<TreeNode> LinkNodes(const ReplayedTree& replayed, const std::vector<uint32_t>& order);

// Step 4: numbers the inodes of `nodes` densely in order from kRootInode,
// counts links (a directory: 2 + subdirectories; a file or symlink: its
// names), sets mtimes (a member's own; an implied directory: its newest
// child's, 0 without children) and returns the counts.
// REQUIRES: `nodes` from LinkNodes over these `members`.
TreeCounts AssignInodes(std::span<const MemberEntry> members, HugeVector<TreeNode>* nodes);

// Steps 1 to 4.
Tree BuildTree(std::span<const MemberEntry> members);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_TREE_BUILDER_H_
