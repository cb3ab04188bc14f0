#include "index/rocks_util.h"

#include <fmt/format.h>

#include <string>

namespace shardfs::index {

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.IsNotFound()) return Status::NotFound(std::string(what));
  if (s.IsCorruption()) return Status::Corruption(fmt::format("{}: {}", what, s.ToString()));
  return Status::IoError(fmt::format("{}: {}", what, s.ToString()));
}

}  // namespace shardfs::index
