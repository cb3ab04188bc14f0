// Turning a path as an archive spells it into a path inside the tree.
#ifndef SHARDFS_INDEX_MEMBER_PATH_H_
#define SHARDFS_INDEX_MEMBER_PATH_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::index {

// Normalises an archive member's path to the form the index stores:
// components joined by single '/', no leading or trailing '/', no "." and no
// empty components; "" is the root. Leading "/" is dropped (an absolute path
// is made relative, as GNU tar extracts it). Every other byte is kept as is:
// spaces, newlines, non-UTF-8.
// Returns InvalidArgument if a component is "..", since nothing may resolve
// outside the tree, or longer than kMaxNameLength bytes.
Result<std::string> NormalizeMemberPath(std::string_view raw);

// Orders paths depth-first: a directory comes right before its descendants
// ("a" < "a/b" < "a.b"), siblings in bytewise name order. This is the order
// in which inodes are numbered.
bool TreeOrderLess(std::string_view a, std::string_view b);

// "a/b/c" -> "a/b"; "a" -> "".
std::string_view ParentPath(std::string_view path);
// "a/b/c" -> "c"; "a" -> "a".
std::string_view BaseName(std::string_view path);

// The non-empty components of a '/'-separated path, in order: "a//b/" ->
// {"a", "b"}. They point into `path`.
std::vector<std::string_view> PathComponents(std::string_view path);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_MEMBER_PATH_H_
