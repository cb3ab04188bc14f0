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

// A shard location (a local path or a URL) as every message and listing
// prints it, without what may be a secret: in an http(s):// URL the query
// (a presigned URL's signature) becomes "?<redacted>"; in an http(s):// or
// s3:// URL a user name or password before '@' in the host part becomes
// "<redacted>@". Anything else, an S3 key included (it may hold '?'), is
// returned as is. The index keeps what a fetch needs; only printing redacts.
std::string RedactLocation(std::string_view location);

}  // namespace shardfs

#endif  // SHARDFS_BASE_STRINGS_H_
