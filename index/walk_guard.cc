#include "index/walk_guard.h"

#include <fmt/format.h>

#include <string>

#include "index/index_reader.h"

namespace shardfs::index {

Status WalkGuard::Meet(const IndexReader& r, InodeId dir, std::string_view name, InodeId child) {
  if (met_.insert(child.value).second) return Status::Ok();
  std::string path;
  if (!r.PathOf(dir, &path).ok()) path = fmt::format("inode {}", dir.value);
  return Status::Corruption(fmt::format(
      "index {}: directory '/{}' lists '{}', directory inode {}, which is already in the tree "
      "(a loop)",
      r.path(), path, name, child.value));
}

}  // namespace shardfs::index
