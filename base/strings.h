// Small string helpers shared by every layer.
#ifndef SHARDFS_BASE_STRINGS_H_
#define SHARDFS_BASE_STRINGS_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace shardfs {

// "dir/name", or "name" when dir is empty (the root of a relative tree).
std::string JoinPath(std::string_view dir, std::string_view name);

// Length of the well-formed UTF-8 sequence starting at s[i] (1 to 4), or 0
// when it is not one: overlong forms, surrogates and code points past
// U+10FFFF are not well-formed.
size_t Utf8SequenceLength(std::string_view s, size_t i);

// Whether all of `s` is well-formed UTF-8.
bool IsUtf8(std::string_view s);

}  // namespace shardfs

#endif  // SHARDFS_BASE_STRINGS_H_
