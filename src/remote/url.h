// Shard locations on the network: http://, https:// and s3://bucket/key.
//
// A RemoteUrl is what the index stores for a remote shard (ToString gives the
// canonical text back). The URL a request is sent to is built separately
// (S3RequestUrl), because for S3 it depends on the endpoint and region of the
// machine that reads, not of the one that indexed.
//
// Secrets. A user name or password in a URL is refused: the index would
// store it and every message print it (credentials come from the AWS
// configuration for s3://; an http(s) server takes a presigned URL). A query
// is kept, since a presigned URL needs it to fetch, but never printed:
// messages, listings and stats show Redacted().
#ifndef SHARDFS_SRC_REMOTE_URL_H_
#define SHARDFS_SRC_REMOTE_URL_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace shardfs::remote {

// Whether `s` starts with http://, https:// or s3:// (scheme case-insensitive).
// Anything else is a local path.
bool IsRemoteUrl(std::string_view s);

struct RemoteUrl {
  enum class Scheme { kHttp, kHttps, kS3 };
  Scheme scheme = Scheme::kHttp;
  // kHttp / kHttps: the whole URL as given (scheme lower-cased); it is sent
  // as is and never signed.
  std::string url;
  // kS3: the bucket and the key, raw (the key may hold '/' and any byte; it
  // is percent-encoded only when a request URL is built). The key may be
  // empty (a bucket or a listing prefix).
  std::string bucket;
  std::string key;

  bool is_s3() const { return scheme == Scheme::kS3; }
  // The canonical text: the http(s) URL, or "s3://" + bucket + "/" + key.
  // ParseRemoteUrl(x.ToString()) gives back x. Stored and fetched, never
  // printed: it may hold a presigned URL's signature.
  std::string ToString() const;
  // What messages and listings print: ToString() with an http(s) query
  // shown as "?<redacted>" (see RedactLocation in base/strings.h).
  std::string Redacted() const;
};

// Parses an http://, https:// or s3:// URL. InvalidArgument names the URL
// (redacted) and what is wrong: another scheme, no host, a user name or
// password before '@' (with the ways credentials are given instead), an
// s3:// URL without a bucket, a bucket name with characters S3 refuses
// (allowed: [A-Za-z0-9.-_]).
Result<RemoteUrl> ParseRemoteUrl(std::string_view s);

// Percent-encodes `s` per the SigV4 URI rules: unreserved characters
// A-Z a-z 0-9 - . _ ~ stay, every other byte becomes %XX (upper-case hex);
// '/' stays too when `keep_slash` (object keys in a path).
std::string UriEncode(std::string_view s, bool keep_slash);

// The request URL of an S3 object or bucket. `endpoint` empty: virtual-hosted
// https://BUCKET.s3.REGION.amazonaws.com/KEY; else path-style
// ENDPOINT/BUCKET/KEY (ENDPOINT is "http(s)://host[:port][/path]", any
// trailing '/' ignored). An empty key gives the bucket URL (".../BUCKET" or
// "https://BUCKET.s3.REGION.amazonaws.com/"). `query`, if not empty, is
// appended after '?' as given: SigV4 with libcurl 7.88 signs the query as
// sent, so it must already be sorted and encoded (see S3Query).
std::string S3RequestUrl(std::string_view endpoint, std::string_view region,
                         std::string_view bucket, std::string_view key,
                         std::string_view query = {});

// A query string as SigV4 wants it signed: parameters sorted by name (then
// value), names and values UriEncode'd (with '/' encoded), joined by '&';
// "name=" for an empty value.
std::string S3Query(std::vector<std::pair<std::string, std::string>> params);

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_URL_H_
