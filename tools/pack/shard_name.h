// Shard names: the printf-like pattern of `pack --name` ("train-%06d.tar"),
// formatting shard numbers and recognising names the pattern could produce.
#ifndef SHARDFS_TOOLS_PACK_SHARD_NAME_H_
#define SHARDFS_TOOLS_PACK_SHARD_NAME_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs::pack {

// A printf-like shard name with exactly one integer conversion
// ("train-%06d.tar"; "%%" is a literal '%').
struct ShardNamePattern {
  std::string prefix;
  std::string suffix;
  int width = 0;
  bool zero_pad = false;

  std::string Format(uint64_t n) const;
  // True if Format could have produced `name` (or `name` minus ".tmp" when
  // `or_tmp`).
  bool Matches(std::string_view name, bool or_tmp) const;
};

// Returns InvalidArgument if `text` has no or several conversions, a
// conversion other than d/u/i, a field width over 40, or a '/'.
Result<ShardNamePattern> ParseShardName(std::string_view text);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_SHARD_NAME_H_
