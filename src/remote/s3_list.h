// Listing an S3 prefix (ListObjectsV2), for `index build s3://bucket/prefix/`.
#ifndef SHARDFS_SRC_REMOTE_S3_LIST_H_
#define SHARDFS_SRC_REMOTE_S3_LIST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "src/remote/http_client.h"

namespace shardfs::remote {

struct ListedObject {
  std::string key;  // Raw (XML entities decoded).
  uint64_t size = 0;
  std::string etag;  // As listed, quotes included.
};

// One page of a ListObjectsV2 answer.
struct ListPage {
  std::vector<ListedObject> objects;
  bool is_truncated = false;
  std::string next_continuation_token;  // Set when is_truncated.
};

// Parses a ListBucketResult document. InvalidArgument names what is missing
// (a <Contents> without <Key> or with a bad <Size>, a truncated page without
// <NextContinuationToken>, no <ListBucketResult> at all).
Result<ListPage> ParseListObjectsV2(std::string_view xml);

// Decodes &amp; &lt; &gt; &quot; &apos; &#NN; &#xHH; (code points as
// UTF-8). InvalidArgument on an unknown or unterminated entity.
Result<std::string> DecodeXmlText(std::string_view text);

// The listing pages ListS3 reads by default: S3 gives up to 1000 keys a
// page, so 10 million objects.
inline constexpr uint64_t kDefaultMaxListPages = 10'000;

// Every object under `prefix` in `bucket` (all pages, following
// continuation tokens), in key order, through `client` (so with its retries,
// signing and stats). The query is sorted and encoded before signing.
// A listing that does not end is an IoError naming s3://BUCKET/PREFIX: a
// continuation token the server already sent (its pages would loop), or
// more than `max_pages` pages (REQUIRES: max_pages >= 1).
Result<std::vector<ListedObject>> ListS3(HttpClient& client, std::string_view bucket,
                                         std::string_view prefix,
                                         uint64_t max_pages = kDefaultMaxListPages);

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_S3_LIST_H_
