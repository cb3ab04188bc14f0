// `shardfs view diff`: what changed between two views (or versions) of one
// index, matched by inode.
//
// Both views are walked once from the root (ForEachChild, one prefix scan per
// directory); nothing is read per entry beyond the walk. The two entry lists
// are then sorted by inode and merged, so a diff of two 1,000,000-entry views
// costs two walks and two sorts, whatever the number of differences.
//
// Matching. Paths name files and symlinks as they are; directories end in
// '/' (the root is left out). For each inode:
//   - only in B: each of its paths is `added`; only in A: `removed`;
//   - in both: paths it has in both views are unchanged; its paths only in A
//     and its paths only in B, each bytewise sorted, are paired in order as
//     `renamed` (old -> new); the unpaired rest (a hard link gained or lost)
//     are `added` / `removed`.
// A path present in both views under different inodes (`index add` replaced
// it, or a directory replaced a file) is `replaced`, and is then not listed
// as added or removed; a rename from or to it is still listed.
#ifndef SHARDFS_TOOLS_BUILDER_VIEW_DIFF_H_
#define SHARDFS_TOOLS_BUILDER_VIEW_DIFF_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"

namespace shardfs::builder {

// One path of one entry of a view: directories end in '/'.
struct ViewEntry {
  uint64_t inode = 0;
  std::string path;
  friend bool operator==(const ViewEntry&, const ViewEntry&) = default;
};

// The paths of a view, stored in one buffer: a walk of a million entries
// makes no allocation per entry.
class ViewEntries {
 public:
  ViewEntries() = default;
  ViewEntries(const std::vector<ViewEntry>& entries) {  // NOLINT: implicit for tests.
    for (const auto& e : entries) Add(e.inode, e.path);
  }
  ViewEntries(std::initializer_list<ViewEntry> entries) {
    for (const auto& e : entries) Add(e.inode, e.path);
  }
  // Paths average well under 48 bytes; reserving once spares the buffer's
  // regrowth copies (a third of a large diff's time).
  void Reserve(size_t entries) {
    refs_.reserve(entries);
    bytes_.reserve(entries * 48);
  }
  void Add(uint64_t inode, std::string_view path) {
    refs_.push_back({inode, bytes_.size(), path.size()});
    bytes_.append(path);
  }
  // Adds `dir_prefix` + `name` (+ '/' when `is_dir`).
  void Add(uint64_t inode, std::string_view dir_prefix, std::string_view name, bool is_dir) {
    size_t start = bytes_.size();
    bytes_.append(dir_prefix).append(name);
    if (is_dir) bytes_.push_back('/');
    refs_.push_back({inode, start, bytes_.size() - start});
  }
  size_t size() const { return refs_.size(); }
  uint64_t inode(size_t k) const { return refs_[k].inode; }
  std::string_view path(size_t k) const { return {bytes_.data() + refs_[k].start, refs_[k].size}; }

 private:
  struct Ref {
    uint64_t inode;
    size_t start;
    size_t size;
  };
  std::vector<Ref> refs_;
  std::string bytes_;
};

struct ViewRename {
  std::string from;
  std::string to;
  friend bool operator==(const ViewRename&, const ViewRename&) = default;
};

struct ViewDiff {
  std::string a;  // "NAME@N" of each side.
  std::string b;
  // Each bytewise sorted by path (renames by `from`, then `to`).
  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<ViewRename> renamed;
  std::vector<std::string> replaced;
  bool empty() const {
    return added.empty() && removed.empty() && renamed.empty() && replaced.empty();
  }
};

// Every path of the view `reader` answers for except the root: one entry per
// directory entry (a hard link's inode appears once per path), in no
// particular order. Errors carry the index path as context.
Result<ViewEntries> WalkView(const index::IndexReader& reader);

// Calls fn(dir_prefix, name, record) for every entry below the root of the
// reader's view, where dir_prefix is the parent's path with a trailing '/'
// ("" at the root); an error from fn stops the walk.
Status WalkTree(
    const index::IndexReader& reader,
    const std::function<Status(std::string_view, std::string_view, const index::EntryRecord&)>& fn);

// The diff of two entry lists as above, in any order. Leaves ViewDiff::a and
// ::b empty.
ViewDiff DiffEntries(const ViewEntries& a, const ViewEntries& b);

// Opens `spec_a` and `spec_b` of the index at `index_path` and diffs them.
// NotFound naming the index and the view when a spec does not resolve; other
// errors name the index and the view being read. `resolve` finds a
// manifest's partitions (index/manifest.h; empty: local paths).
Result<ViewDiff> DiffViews(const std::string& index_path, const std::string& spec_a,
                           const std::string& spec_b, const index::PartitionResolver& resolve = {});

// The text form: one line per change, sorted by the (first) path it names,
//   + PATH           added
//   - PATH           removed
//   R OLD -> NEW     renamed
//   M PATH           replaced
// then "A -> B: N added, N removed, N renamed, N replaced".
std::string FormatDiffText(const ViewDiff& diff);

// The version "NAME@N" a reader answers for.
std::string ViewNameOf(const index::IndexReader& reader);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_VIEW_DIFF_H_
