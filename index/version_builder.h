// A new version of a view, edited in memory from a source version and
// stored as its difference from default@1 (index/schema.h, "Views and
// versions"). The index builder decides what to remove and move (`view
// create`) or add (`index add`); this unit keeps the tree consistent and
// works out the keys.
//
// The whole source tree is loaded, one node per name, children of a
// directory contiguous and in name order. Edits mark nodes removed or moved
// and add nodes; Finish compares every inode with the source and default@1:
// an inode whose names or record changed is hidden in default@1 and written
// to the overlay with all its names, the rest cost nothing.
#ifndef SHARDFS_INDEX_VERSION_BUILDER_H_
#define SHARDFS_INDEX_VERSION_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "index/view_store.h"

namespace shardfs::index {

using NodeId = uint32_t;
inline constexpr NodeId kRootNode = 0;

// What a version holds, and how it differs from its source.
struct VersionSummary {
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  uint64_t max_inode = 0;
  // Inodes of the source that are gone, new inodes, names moved.
  uint64_t removed = 0;
  uint64_t added = 0;
  uint64_t moved = 0;
};

struct BuiltVersion {
  VersionTable table;
  VersionSummary summary;
};

class VersionBuilder {
 public:
  // Loads every entry of the version `source` answers for (no rank).
  static Result<std::unique_ptr<VersionBuilder>> Load(const IndexReader& source);

  size_t node_count() const { return nodes_.size(); }
  std::string_view name(NodeId n) const;
  EntryType type(NodeId n) const { return nodes_[n].type; }
  uint64_t inode(NodeId n) const { return nodes_[n].inode; }
  // The source record of `n` (its target and extents point into the builder).
  EntryRecord record(NodeId n) const;
  bool alive(NodeId n) const { return nodes_[n].alive; }
  // The source children of directory `n` in name order (removed ones too;
  // not the ones moved in).
  std::vector<NodeId> children(NodeId n) const;
  // The live child `name` of directory `dir` in the current tree, moved-in
  // ones included; kNoNode if none.
  static constexpr NodeId kNoNode = UINT32_MAX;
  NodeId Child(NodeId dir, std::string_view name) const;
  // Resolves a '/'-separated path in the current tree; kNoNode if missing.
  NodeId Find(std::string_view path) const;

  // Removes `n` and everything below it.
  void Remove(NodeId n);
  // Moves `n` (with its subtree) to `new_path`, making missing directories.
  // InvalidArgument if new_path exists, is inside `n`, or passes a file.
  Status Move(NodeId n, std::string_view new_path);
  // Adds a directory or returns the existing one at `path` (its parents
  // made as needed). NotADirectory if a non-directory is in the way.
  Result<NodeId> MakeDirs(std::string_view path);
  // Adds (or, `replace`, replaces) the entry `name` of `dir` with `record`
  // under a new inode; returns the node. A hard link: `link_to`'s inode.
  Result<NodeId> AddEntry(NodeId dir, std::string_view name, const EntryRecord& record,
                          NodeId link_to = kNoNode);
  // Re-describes directory `n` (mode, owner, mtime) as `record` does.
  void Redescribe(NodeId n, const EntryRecord& record);

  // The keys of the new version and its counts.
  Result<BuiltVersion> Finish(uint32_t shard_count) const;

 private:
  // What Finish needs to know of every live node before emitting any.
  struct Census;
  void TakeCensus(Census* c) const;
  struct Node {
    uint64_t inode = 0;
    NodeId parent = 0;
    NodeId child_begin = 0;
    uint32_t child_count = 0;
    uint32_t name_len = 0;
    uint64_t name_off = 0;
    uint64_t rec_off = 0;
    uint32_t rec_len = 0;
    EntryType type = EntryType::kFile;
    bool from_base = true;  // Shown through a default@1 name in the source.
    bool alive = true;
    bool changed = false;  // Record re-described (or new).
    bool moved = false;    // Under another parent or name than in the source.
  };

  VersionBuilder(const IndexReader& source) : source_(source) {}
  Status LoadAll();
  NodeId NewNode(uint64_t inode, NodeId parent, std::string_view name, EntryType type,
                 std::string_view record, bool from_base);
  // Attaches `n` under `dir` as `name` (a moved or added node).
  void Attach(NodeId dir, NodeId n, std::string_view name);

  const IndexReader& source_;
  std::vector<Node> nodes_;
  std::string arena_;  // Names and encoded records.
  // Children that are not in a directory's source range, moved or added, by
  // name.
  std::unordered_map<NodeId, std::unordered_map<std::string, NodeId>> extra_children_;
  uint64_t base_max_ = 0;
  uint64_t next_inode_ = 0;
  NodeId loaded_ = 0;  // Nodes below this came from the source.
  const InodeSet* source_hidden_ = nullptr;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_VERSION_BUILDER_H_
