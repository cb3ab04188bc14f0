// HttpClient: byte ranges, HEAD and whole-object streams over HTTP(S) and S3,
// with retries inside a time budget and checks that a replaced object never
// yields wrong bytes.
//
// Fault model. Transient faults (5xx, 429, connection refused or reset,
// timeouts, stalls, short bodies, TLS handshakes cut off) are retried with
// full-jitter exponential backoff, honouring Retry-After, until
// FetchOptions::retry_budget is spent; then the call fails with one IoError
// naming the URL, the attempts, the time spent and the last error. Answers
// that cannot change by asking again are not retried: 404 (NotFound),
// 401/403 (IoError "access denied"), certificate failures, and anything that
// shows the object is not the one indexed (Corruption "... the object changed
// on the server since it was indexed"). Bytes are copied to the caller only
// from a response proven to be the requested range of the expected object.
//
// What proves it. If-Match is only a request: some servers and caches ignore
// it. So every response that carries bytes (200 and 206) is judged by what it
// says itself: its size (Content-Range total or Content-Length), and its
// ETag, compared strongly with the indexed one (equal, and neither weak:
// W/"..." never matches). Where the index holds no ETag, its Last-Modified
// is compared the same way. A response without the validator the index
// holds cannot be told from a replaced object: it is counted
// (RequestStats::unverified) and refused as Corruption, unless
// FetchOptions::trust_responses_without_etag. Redirects are followed (http(s)
// URLs only) to https from https, to http or https from http, never to
// another scheme; a refused redirect is an IoError naming its target.
#ifndef SHARDFS_SRC_REMOTE_HTTP_CLIENT_H_
#define SHARDFS_SRC_REMOTE_HTTP_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "src/remote/aws_config.h"
#include "src/remote/fetch_options.h"
#include "src/remote/request_stats.h"
#include "src/remote/url.h"

namespace shardfs::remote {

// The transfer machinery behind one client (src/remote/http_transfer.h).
struct HttpTransfer;

// One per thread: NOT thread-safe. It owns one libcurl handle, so
// connections to a server are kept alive and reused between calls. Several
// clients may share one RequestStats (which is thread-safe). S3 requests are
// signed with SigV4 when config.sign; http(s) URLs never are.
class HttpClient {
 public:
  // `stats` may be null; else it must outlive the client.
  HttpClient(FetchOptions options, AwsConfig config, RequestStats* stats);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Reads bytes [pos, pos+len) of the object into buf (REQUIRES: len > 0,
  // pos + len <= object.size), with "Range: bytes=pos-(pos+len-1)" and
  // "If-Match: etag" when object.etag is not empty. Accepts a 206 whose
  // Content-Range is exactly that range with total object.size, or a 200
  // when the range is the whole object and the body is exactly object.size
  // long; either only with the object's validator (see the top). Returns
  // Corruption, not retried, on 412, 416, a total other than object.size, a
  // 200 of another length, another or a weak ETag, another Last-Modified, or
  // no validator; NotFound on 404; IoError on a 200 for a part (a server
  // without ranges), on 401/403 ("access denied") and when the budget is
  // spent. A fault mid-body resumes from the first byte not yet received.
  // On error, buf holds unspecified bytes.
  Status GetRange(const RemoteUrl& url, uint64_t pos, uint64_t len, const ExpectedObject& object,
                  char* buf);

  // Size (Content-Length), ETag and Last-Modified of the object, with the
  // same retry rules. IoError when a 200 has no Content-Length.
  Result<ObjectInfo> Head(const RemoteUrl& url);

  // A HEAD judged like GetRange's responses: Ok if the object is still
  // `object` (its Content-Length and validator); Corruption if not.
  Status Check(const RemoteUrl& url, const ExpectedObject& object);

  // The whole object, passed to `sink` in order and each byte once. A fault
  // mid-body resumes with "Range: bytes=N-" from the first byte not yet
  // delivered and "If-Match" on the ETag of the first response; the resumed
  // response must carry that ETag (or, if the first had none, its
  // Last-Modified) and total: a change mid-stream is Corruption.
  Result<ObjectInfo> GetStream(const RemoteUrl& url, const Sink& sink);

  // A HEAD with "If-None-Match: etag" (REQUIRES: etag not empty): whether
  // the object is still the one with that ETag. 304: *not_modified = true
  // (the info holds what the server sent, often only the ETag). 200: false,
  // with its size, ETag and Last-Modified as Head's. Other answers as Head.
  Result<ObjectInfo> Revalidate(const RemoteUrl& url, std::string_view etag, bool* not_modified);

  // GET of a small body (at most max_bytes, else IoError): for S3 listings.
  // `query` is appended to the request URL as given (see S3Query). 2xx only.
  Status GetText(const RemoteUrl& url, std::string_view query, std::string* body,
                 size_t max_bytes = 64 << 20);

  const FetchOptions& options() const { return options_; }
  const AwsConfig& aws_config() const { return config_; }

 private:
  FetchOptions options_;
  AwsConfig config_;
  std::unique_ptr<HttpTransfer> impl_;
};

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_HTTP_CLIENT_H_
