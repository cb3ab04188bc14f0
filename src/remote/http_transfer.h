// What one HttpClient call is made of, shared by its two halves:
// http_client.cc asks and judges (the Exchange kinds: a range, a HEAD, a
// stream, a small text), http_transfer.cc moves the bytes (HttpTransfer:
// one libcurl easy handle, attempts, retries in the budget, header parsing).
// Internal to remote/: nothing outside this folder includes it.
#ifndef SHARDFS_SRC_REMOTE_HTTP_TRANSFER_H_
#define SHARDFS_SRC_REMOTE_HTTP_TRANSFER_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "base/status.h"
#include "src/remote/aws_config.h"
#include "src/remote/curl_api.h"
#include "src/remote/fetch_options.h"
#include "src/remote/request_stats.h"
#include "src/remote/retry.h"
#include "src/remote/url.h"

namespace shardfs::remote {

struct ResponseHead {
  long status = 0;
  std::string reason;
  int64_t content_length = -1;
  bool has_range = false;
  uint64_t range_first = 0;
  uint64_t range_last = 0;
  int64_t range_total = -1;  // -1 for "*".
  std::string etag;
  std::string last_modified;
  std::string location;
  std::optional<Millis> retry_after;
};

// How one attempt ended. An ok status with retry == false is success.
struct Verdict {
  Status status;
  bool retry = false;
  ErrorKind kind = ErrorKind::kOther;
  std::optional<Millis> retry_after;
  bool cancelled = false;
  // The response lacked the validator the index holds (counted).
  bool unverified = false;

  static Verdict Ok() { return {}; }
  static Verdict Fail(Status s, ErrorKind kind) {
    return {std::move(s), false, kind, {}, false, false};
  }
  static Verdict Retry(std::string why, ErrorKind kind,
                       std::optional<Millis> after = std::nullopt) {
    return {Status::IoError(std::move(why)), true, kind, after, false, false};
  }
};

struct Request {
  std::string range;          // "first-last" or "first-"; empty: no Range.
  std::string if_match;       // Empty: no If-Match.
  std::string if_none_match;  // Empty: no If-None-Match.
};

// An HTTP date (Retry-After, Last-Modified) as seconds since the epoch; -1
// when it does not parse. Only called on a response, so libcurl is loaded.
time_t ParseHttpDate(const std::string& text);

// "HTTP 404 Not Found", or "HTTP 404" without a reason phrase.
std::string StatusText(const ResponseHead& h);

// What an attempt asks for and how its response is judged. One Exchange
// lives across the attempts of a call, so a retry can resume.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void Prepare(Request* req) = 0;
  // Called once per attempt, before the first body byte (or at the end when
  // there is no body). An ok verdict sends the body to OnBody.
  virtual Verdict Judge(const ResponseHead& h) = 0;
  // A non-ok Status ends the call (not retried).
  virtual Status OnBody(const char* data, size_t len) = 0;
  // The transfer completed: is the body whole?
  virtual Verdict Finish(const ResponseHead& h) = 0;
};

// The transfer machinery of one HttpClient (its impl_): NOT thread-safe,
// like the client.
struct HttpTransfer {
  HttpTransfer(const FetchOptions& o, const AwsConfig& c, RequestStats* s)
      : options(o),
        config(c),
        stats(s),
        backoff(o.initial_backoff, o.max_backoff, std::random_device{}()) {
    curl = Curl(&curl_missing);
    if (curl != nullptr) {
      easy = curl->easy_init();
      multi = curl->multi_init();
    }
  }
  ~HttpTransfer() {
    if (multi != nullptr) curl->multi_cleanup(multi);
    if (easy != nullptr) curl->easy_cleanup(easy);
  }

  bool Cancelled() const {
    return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed);
  }

  Status Run(const RemoteUrl& url, std::string_view query, bool head_only, Exchange& ex);
  Verdict Attempt(const RemoteUrl& url, const std::string& request_url, const Request& req,
                  bool head_only, Exchange& ex, Clock::time_point deadline);
  // Why a transfer ended before libcurl finished it.
  enum class Cut { kNone, kCancel, kStall };
  // Sets the easy handle's options for one attempt; returns the header list
  // the caller frees after the transfer.
  curl_slist* SetUpTransfer(const RemoteUrl& url, const std::string& request_url,
                            const Request& req, bool head_only, Clock::time_point deadline);
  // Runs the transfer until libcurl is done (*rc its result, if it gave one),
  // a cancel, or a stall.
  Cut Perform(std::optional<CURLcode>* rc);
  // The attempt's verdict from how it ended, with the server's error body.
  Verdict Conclude(const RemoteUrl& url, Exchange& ex, Cut cut, std::optional<CURLcode> rc);

  static size_t OnHeader(char* data, size_t size, size_t n, void* self);
  static size_t OnWrite(char* data, size_t size, size_t n, void* self);

  const FetchOptions& options;
  const AwsConfig& config;
  RequestStats* stats;
  Backoff backoff;
  const CurlApi* curl = nullptr;
  std::string curl_missing;  // Why `curl` is null.
  CURL* easy = nullptr;
  CURLM* multi = nullptr;

  // The attempt under way; touched only by this thread's callbacks.
  Exchange* exchange = nullptr;
  ResponseHead head;
  bool judged = false;
  Verdict verdict;
  std::string error_body;
  size_t error_body_read = 0;
  Status body_status;
  Clock::time_point stall_deadline;
  char curl_error[CURL_ERROR_SIZE] = {};
};

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_HTTP_TRANSFER_H_
