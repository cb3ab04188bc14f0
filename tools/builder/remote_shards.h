// Remote shards for `index build` and `index add`: http://, https:// and
// s3:// URLs, an S3 prefix listed, and each shard read once as a stream.
#ifndef SHARDFS_TOOLS_BUILDER_REMOTE_SHARDS_H_
#define SHARDFS_TOOLS_BUILDER_REMOTE_SHARDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "src/remote/http_client.h"
#include "src/remote/s3_list.h"

namespace shardfs::builder {

// Whether `input` names remote shards (a URL).
bool IsRemoteInput(const std::string& input);

// What reading remote inputs may cost at most, so that a misbehaving server
// fails a build instead of running it forever or filling the disk.
struct RemoteLimits {
  // Pages of one S3 listing (--max-list-pages; remote::ListS3).
  uint64_t max_list_pages = remote::kDefaultMaxListPages;
  // Bytes of one remote shard (--max-shard-size): a body without a
  // Content-Length that never ends stops here.
  uint64_t max_shard_size = uint64_t{64} << 30;
};

// Adds the shard URLs `input` names to `out`: the URL itself, or for
// "s3://BUCKET/PREFIX/" (ending in '/') every object under the prefix whose
// key ends in ".tar", in key order. InvalidArgument for a listing that finds
// none, and for an http(s) URL ending in '/' (HTTP has no listing: give a
// list file, see --url-prefix); IoError for a listing past
// limits.max_list_pages pages or one whose continuation tokens repeat.
Status ExpandRemoteInput(const std::string& input, const RemoteLimits& limits,
                         std::vector<std::string>* out);

// Streams the object at `url` once into an unnamed temporary file (O_TMPFILE
// in $TMPDIR, else /var/tmp: it vanishes with the descriptor, on an error
// and on a crash too) and returns the descriptor, with the object's size,
// ETag and Last-Modified in *info. An object longer than max_size bytes is
// an IoError naming the limit, once max_size bytes have been read. Errors
// name the URL, redacted (base/strings.h: RedactLocation).
Result<UniqueFd> DownloadShard(const std::string& url, uint64_t max_size, remote::ObjectInfo* info);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_REMOTE_SHARDS_H_
