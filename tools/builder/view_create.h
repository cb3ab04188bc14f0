// `shardfs view create`: a new version of a named view, made from a source
// version by include and exclude rules and a rename map, stored as its
// difference from default@1 (index/version_builder.h).
//
// The rules, in order:
//   1. includes: if any include is given (--include GLOB, --include-list),
//      keep only what an include names, with everything below it;
//   2. excludes (--exclude GLOB, --exclude-list) remove what they name, with
//      everything below it; an exclude wins over an include;
//   3. a directory left empty by 1 and 2 goes too (ImageFolder refuses an
//      empty class folder); one already empty in the source stays unless
//      named, or, with includes, unless an include names it;
//   4. renames (--rename-map, lines OLD<TAB>NEW): OLD names the tree after
//      1-3 (never a path of an earlier rename), NEW must not exist, missing
//      parents of NEW are made.
// A glob without '/' matches one name at any depth (.gitignore style); one
// with '/' matches the whole path from the root, '*' not crossing '/'. List
// lines are paths from the root ("./" or "/" in front is dropped, blank
// lines skipped); a listed path missing from the source is an error naming
// FILE:LINE unless ignore_missing.
#ifndef SHARDFS_TOOLS_BUILDER_VIEW_CREATE_H_
#define SHARDFS_TOOLS_BUILDER_VIEW_CREATE_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/version_builder.h"
#include "index/view_store.h"

namespace shardfs::builder {

struct ViewCreateOptions {
  std::string index;
  std::string name;
  std::string from;  // A view spec; "" is the latest default.
  std::vector<std::string> include_globs;
  std::vector<std::string> exclude_globs;
  std::string include_list;
  std::string exclude_list;
  std::string rename_map;
  bool ignore_missing = false;
  std::string message;
};

struct ViewCreateReport {
  index::VersionInfo created;
  std::string from;  // The source's label.
  index::VersionSummary summary;
  uint64_t index_bytes_added = 0;
  double seconds = 0;
};

// On a manifest (index/manifest.h, "Views"): the view's rules applied in
// every partition, then the union of those versions added to the manifest
// as NAME@N. Listed paths are checked against the union first (unless
// ignore_missing), so a partition that lacks one is no error. A rename map
// is refused there: a rename may move a path from one partition's tree into
// another's, which per-partition versions cannot say. A failure after some
// partitions have their version leaves the manifest as it was (those
// versions are unused).
Result<ViewCreateReport> CreateView(const ViewCreateOptions& options);

// NotFound naming FILE:LINE for the first path `file` lists that `source`
// does not have.
Status CheckListedPaths(const index::IndexReader& source, const std::string& file);

// A path as a list or map line spells it, made a path from the root:
// "./a/b", "/a/b/" -> "a/b". InvalidArgument for "..".
Result<std::string> ListPath(std::string_view line);

// Whether `glob` names the entry `name` at `path` (the rules above).
bool GlobMatches(const std::string& glob, const std::string& path, std::string_view name);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_VIEW_CREATE_H_
