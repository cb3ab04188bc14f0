// Remote shards for `index build` and `index add`: http://, https:// and
// s3:// URLs, an S3 prefix listed, and each shard read once as a stream.
#ifndef SHARDFS_TOOLS_REMOTE_SHARDS_H_
#define SHARDFS_TOOLS_REMOTE_SHARDS_H_

#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "remote/http_client.h"

namespace shardfs::tools {

// Whether `input` names remote shards (a URL).
bool IsRemoteInput(const std::string& input);

// Adds the shard URLs `input` names to `out`: the URL itself, or for
// "s3://BUCKET/PREFIX/" (ending in '/') every object under the prefix whose
// key ends in ".tar", in key order. InvalidArgument for a listing that finds
// none, and for an http(s) URL ending in '/' (HTTP has no listing: give a
// list file, see --url-prefix).
Status ExpandRemoteInput(const std::string& input, std::vector<std::string>* out);

// Streams the object at `url` once into an unnamed temporary file (O_TMPFILE
// in $TMPDIR, else /var/tmp: it vanishes with the descriptor, also on a
// crash) and returns the descriptor, with the object's size, ETag and
// Last-Modified in *info. Errors name the URL, redacted (base/strings.h:
// RedactLocation).
Result<UniqueFd> DownloadShard(const std::string& url, remote::ObjectInfo* info);

}  // namespace shardfs::tools

#endif  // SHARDFS_TOOLS_REMOTE_SHARDS_H_
