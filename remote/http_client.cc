#include "remote/http_client.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/parse.h"
#include "remote/curl_api.h"
#include "remote/retry.h"

namespace shardfs::remote {
namespace {

// An HTTP date (Retry-After, Last-Modified) as seconds since the epoch; -1
// when it does not parse. Only called on a response, so libcurl is loaded.
time_t ParseHttpDate(const std::string& text) {
  const CurlApi* curl = Curl(nullptr);
  return curl != nullptr ? curl->getdate(text.c_str(), nullptr) : -1;
}

// How often a running transfer looks at the cancel flag and the stall clock.
constexpr Millis kPollInterval{20};
// Error bodies (S3's XML) are read this far to name the error, then dropped.
constexpr size_t kErrorBodyKept = 2048;
constexpr size_t kErrorBodyRead = 64 << 10;

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
  std::string range;     // "first-last" or "first-"; empty: no Range.
  std::string if_match;  // Empty: no If-Match.
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "bytes FIRST-LAST/TOTAL" or "bytes FIRST-LAST/*".
bool ParseContentRange(std::string_view v, ResponseHead* h) {
  if (v.substr(0, 6) != "bytes ") return false;
  v.remove_prefix(6);
  const size_t dash = v.find('-');
  const size_t slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return false;
  }
  const std::optional<uint64_t> first = ParseDecimal(Trim(v.substr(0, dash)));
  const std::optional<uint64_t> last = ParseDecimal(Trim(v.substr(dash + 1, slash - dash - 1)));
  if (!first || !last || *last < *first) return false;
  h->range_first = *first;
  h->range_last = *last;
  std::string_view total = Trim(v.substr(slash + 1));
  if (total == "*") {
    h->range_total = -1;
  } else if (const std::optional<uint64_t> t = ParseDecimal(total); t && *t <= INT64_MAX) {
    h->range_total = static_cast<int64_t>(*t);
  } else {
    return false;
  }
  h->has_range = true;
  return true;
}

void ParseHeaderLine(std::string_view line, ResponseHead* h) {
  line = Trim(line);
  if (line.substr(0, 5) == "HTTP/") {
    // A new response (after a redirect or a 100): forget the previous one.
    *h = ResponseHead();
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return;
    std::string_view rest = line.substr(sp + 1);
    if (std::optional<uint64_t> code = ParseDecimal(rest.substr(0, 3))) {
      h->status = static_cast<long>(*code);
    }
    h->reason = std::string(Trim(rest.substr(std::min<size_t>(3, rest.size()))));
    return;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  std::string name(Trim(line.substr(0, colon)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string_view value = Trim(line.substr(colon + 1));
  if (name == "content-length") {
    const std::optional<uint64_t> n = ParseDecimal(value);
    if (n && *n <= INT64_MAX) h->content_length = static_cast<int64_t>(*n);
  } else if (name == "content-range") {
    if (!ParseContentRange(value, h)) h->has_range = false;
  } else if (name == "etag") {
    h->etag = std::string(value);
  } else if (name == "last-modified") {
    h->last_modified = std::string(value);
  } else if (name == "location") {
    h->location = std::string(value);
  } else if (name == "retry-after") {
    if (const std::optional<uint64_t> n = ParseDecimal(value)) {
      h->retry_after = Millis(std::min<uint64_t>(*n, 86400) * 1000);
    } else {
      const time_t t = ParseHttpDate(std::string(value));
      if (t >= 0) h->retry_after = Millis(std::max<int64_t>(0, t - std::time(nullptr)) * 1000);
    }
  }
}

// The first <Code> and <Message> of an S3 error body, else its start.
std::string DescribeErrorBody(std::string_view body) {
  auto tag = [&](std::string_view name) -> std::string_view {
    const std::string open = fmt::format("<{}>", name);
    const std::string close = fmt::format("</{}>", name);
    const size_t a = body.find(open);
    if (a == std::string_view::npos) return {};
    const size_t b = body.find(close, a);
    if (b == std::string_view::npos) return {};
    return body.substr(a + open.size(), b - a - open.size());
  };
  const std::string_view code = tag("Code");
  if (!code.empty()) {
    const std::string_view msg = tag("Message");
    return msg.empty() ? std::string(code) : fmt::format("{}: {}", code, msg);
  }
  std::string out;
  for (char c : body.substr(0, 200)) {
    out.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : ' ');
  }
  return std::string(Trim(out));
}

std::string StatusText(const ResponseHead& h) {
  return h.reason.empty() ? fmt::format("HTTP {}", h.status)
                          : fmt::format("HTTP {} {}", h.status, h.reason);
}

constexpr std::string_view kChanged = "the object changed on the server since it was indexed";

// The answers every kind of request treats alike: everything but success.
Verdict CommonVerdict(const ResponseHead& h, std::string_view what) {
  const std::string status = StatusText(h);
  switch (h.status) {
    case 404:
      return Verdict::Fail(Status::NotFound(fmt::format("{}: not found ({})", what, status)),
                           ErrorKind::kNotFound);
    case 401:
    case 403:
      return Verdict::Fail(Status::IoError(fmt::format("{}: access denied ({})", what, status)),
                           ErrorKind::kDenied);
    case 412:
    case 416:
      return Verdict::Fail(
          Status::Corruption(fmt::format("{}: {}: {} (the ETag or size no longer matches)",
                                         what, status, kChanged)),
          ErrorKind::kPrecondition);
    case 429:
      return Verdict::Retry(status, ErrorKind::kThrottle, h.retry_after);
    default:
      break;
  }
  if (h.status >= 500 && h.status <= 599) {
    return Verdict::Retry(status, ErrorKind::kServer, h.retry_after);
  }
  if (h.status == 0) {
    return Verdict::Fail(Status::IoError(fmt::format("{}: no HTTP status line", what)),
                         ErrorKind::kBadResponse);
  }
  return Verdict::Fail(Status::IoError(fmt::format("{}: unexpected {}", what, status)),
                       ErrorKind::kBadResponse);
}

// Last-Modified in nanoseconds since the epoch; 0 when absent or unreadable.
int64_t MtimeNs(const ResponseHead& h) {
  if (h.last_modified.empty()) return 0;
  const time_t t = ParseHttpDate(h.last_modified);
  return t < 0 ? 0 : static_cast<int64_t>(t) * 1'000'000'000;
}

// Strong comparison (RFC 9110, 8.8.3.2): both strong, and the same.
bool StrongMatch(std::string_view a, std::string_view b) {
  return !a.empty() && !a.starts_with("W/") && a == b;
}

// Whether a response that carries bytes comes from `object`, by the
// validator the index holds: the ETag, else Last-Modified. (Its size is
// judged by the caller against what it asked for.) `changed` says what a
// mismatch means to the caller.
Verdict JudgeValidator(const ResponseHead& h, const ExpectedObject& object, bool trust_missing,
                       std::string_view where, std::string_view changed) {
  auto differs = [&](std::string what) {
    return Verdict::Fail(Status::Corruption(fmt::format("{}: {}: {}", where, changed, what)),
                         ErrorKind::kPrecondition);
  };
  const int64_t mtime_ns = MtimeNs(h);
  auto mtime_differs = [&] {
    return differs(fmt::format("Last-Modified {} ({} s since the epoch), {} s when indexed",
                               h.last_modified, mtime_ns / 1'000'000'000,
                               object.mtime_ns / 1'000'000'000));
  };
  const bool by_etag = !object.etag.empty();
  if (!by_etag && object.mtime_ns == 0) return Verdict::Ok();  // Only the size to go by.
  const bool missing = by_etag ? h.etag.empty() : h.last_modified.empty();
  if (missing) {
    // A differing Last-Modified still proves a change.
    if (object.mtime_ns != 0 && !h.last_modified.empty() && mtime_ns != object.mtime_ns) {
      return mtime_differs();
    }
    Verdict v = Verdict::Ok();
    if (!trust_missing) {
      v = Verdict::Fail(
          Status::Corruption(fmt::format(
              "{}: the response has no {}, and the index holds {}: it cannot be told from a "
              "replaced object (-o trust_responses_without_etag would accept it)",
              where, by_etag ? "ETag" : "Last-Modified",
              by_etag ? std::string(object.etag) : "one")),
          ErrorKind::kBadResponse);
    }
    v.unverified = true;
    return v;
  }
  if (by_etag) {
    if (StrongMatch(h.etag, object.etag)) return Verdict::Ok();
    const bool weak = h.etag.starts_with("W/") || object.etag.starts_with("W/");
    return differs(fmt::format("ETag {}, {} when indexed{}", h.etag, object.etag,
                               weak ? " (a weak ETag never proves the same bytes)" : ""));
  }
  if (mtime_ns == object.mtime_ns) return Verdict::Ok();
  return mtime_differs();
}

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

class RangeExchange final : public Exchange {
 public:
  RangeExchange(std::string what, uint64_t pos, uint64_t len, const ExpectedObject& object,
                bool trust_missing, char* buf)
      : what_(std::move(what)),
        pos_(pos),
        len_(len),
        object_(object),
        size_(object.size),
        trust_missing_(trust_missing),
        buf_(buf) {}

  void Prepare(Request* req) override {
    req->range = fmt::format("{}-{}", pos_ + got_, pos_ + len_ - 1);
    req->if_match = std::string(object_.etag);
  }

  Verdict Judge(const ResponseHead& h) override {
    whole_ = false;
    if (h.status == 206) {
      if (!h.has_range) {
        return Verdict::Fail(Status::IoError(fmt::format(
                                 "{}: HTTP 206 without a valid Content-Range", Where())),
                             ErrorKind::kBadResponse);
      }
      if (h.range_total != static_cast<int64_t>(size_)) {
        return Verdict::Fail(
            Status::Corruption(fmt::format(
                "{}: {}: it is {} bytes long now, {} when indexed", Where(), kChanged,
                h.range_total < 0 ? std::string("of unknown size")
                                  : std::to_string(h.range_total),
                size_)),
            ErrorKind::kPrecondition);
      }
      if (h.range_first != pos_ + got_ || h.range_last != pos_ + len_ - 1) {
        return Verdict::Fail(Status::IoError(fmt::format(
                                 "{}: the server sent bytes {}-{} instead", Where(),
                                 h.range_first, h.range_last)),
                             ErrorKind::kBadResponse);
      }
      return JudgeValidator(h, object_, trust_missing_, Where(), kChanged);
    }
    if (h.status == 200) {
      if (h.content_length >= 0 && h.content_length != static_cast<int64_t>(size_)) {
        return Verdict::Fail(
            Status::Corruption(fmt::format("{}: {}: HTTP 200 with {} bytes, {} when indexed",
                                           Where(), kChanged, h.content_length, size_)),
            ErrorKind::kPrecondition);
      }
      if (pos_ + got_ != 0 || len_ != size_) {
        return Verdict::Fail(
            Status::IoError(fmt::format(
                "{}: the server answered HTTP 200 with the whole object: it does not serve "
                "byte ranges",
                Where())),
            ErrorKind::kBadResponse);
      }
      Verdict v = JudgeValidator(h, object_, trust_missing_, Where(), kChanged);
      whole_ = v.status.ok();
      return v;
    }
    return CommonVerdict(h, Where());
  }

  Status OnBody(const char* data, size_t n) override {
    if (n > len_ - got_) {
      if (whole_) {
        return Status::Corruption(fmt::format(
            "{}: {}: HTTP 200 with more than the {} bytes indexed", Where(), kChanged, size_));
      }
      return Status::IoError(fmt::format("{}: more bytes than the range", Where()));
    }
    std::memcpy(buf_ + got_, data, n);
    got_ += n;
    return Status::Ok();
  }

  Verdict Finish(const ResponseHead&) override {
    if (got_ == len_) return Verdict::Ok();
    // A body that ends early without a transport error (no Content-Length):
    // the connection dropped, or a 200's object is shorter; asking again
    // tells which.
    return Verdict::Retry(fmt::format("short body: {} of {} bytes", got_, len_),
                          ErrorKind::kReset);
  }

 private:
  std::string Where() const { return fmt::format("{}: bytes {}-{}", what_, pos_, pos_ + len_ - 1); }

  std::string what_;
  uint64_t pos_;
  uint64_t len_;
  ExpectedObject object_;
  uint64_t size_;
  bool trust_missing_;
  char* buf_;
  uint64_t got_ = 0;
  bool whole_ = false;
};

class HeadExchange final : public Exchange {
 public:
  // With `expect`, the answer must show that object (Check).
  HeadExchange(std::string what, const ExpectedObject* expect = nullptr, bool trust_missing = false)
      : what_(std::move(what)), expect_(expect), trust_missing_(trust_missing) {}
  void Prepare(Request*) override {}
  Verdict Judge(const ResponseHead& h) override {
    if (h.status != 200) return CommonVerdict(h, what_);
    if (h.content_length < 0) {
      return Verdict::Fail(
          Status::IoError(fmt::format("{}: HEAD answered without a Content-Length", what_)),
          ErrorKind::kBadResponse);
    }
    info.size = static_cast<uint64_t>(h.content_length);
    info.etag = h.etag;
    info.mtime_ns = MtimeNs(h);
    if (expect_ == nullptr) return Verdict::Ok();
    if (info.size != expect_->size) {
      return Verdict::Fail(
          Status::Corruption(fmt::format("{}: {}: {} bytes now, {} when indexed", what_, kChanged,
                                         info.size, expect_->size)),
          ErrorKind::kPrecondition);
    }
    return JudgeValidator(h, *expect_, trust_missing_, what_, kChanged);
  }
  Status OnBody(const char*, size_t) override { return Status::Ok(); }
  Verdict Finish(const ResponseHead&) override { return Verdict::Ok(); }

  ObjectInfo info;

 private:
  std::string what_;
  const ExpectedObject* expect_;
  bool trust_missing_;
};

class StreamExchange final : public Exchange {
 public:
  StreamExchange(std::string what, const Sink& sink, bool trust_missing)
      : what_(std::move(what)), sink_(sink), trust_missing_(trust_missing) {}

  void Prepare(Request* req) override {
    if (delivered_ > 0) {
      req->range = fmt::format("{}-", delivered_);
      req->if_match = info.etag;
    }
  }

  Verdict Judge(const ResponseHead& h) override {
    if (delivered_ == 0) {
      if (h.status != 200) {
        if (h.status == 206) {
          return Verdict::Fail(Status::IoError(fmt::format(
                                   "{}: HTTP 206 for a request without Range", what_)),
                               ErrorKind::kBadResponse);
        }
        return CommonVerdict(h, what_);
      }
      size_ = h.content_length;
      info.etag = h.etag;
      info.mtime_ns = MtimeNs(h);
      return Verdict::Ok();
    }
    const std::string where = fmt::format("{}: resuming at byte {}", what_, delivered_);
    if (h.status == 206) {
      if (!h.has_range || h.range_first != delivered_) {
        return Verdict::Fail(
            Status::IoError(fmt::format("{}: HTTP 206 without the range asked for", where)),
            ErrorKind::kBadResponse);
      }
      constexpr std::string_view kChangedMidStream =
          "the object changed on the server while it was read";
      if (size_ >= 0 && h.range_total != size_) {
        return Verdict::Fail(
            Status::Corruption(fmt::format("{}: {} (size {} -> {})", where, kChangedMidStream,
                                           size_, h.range_total)),
            ErrorKind::kPrecondition);
      }
      // As strict as a read of an indexed shard: the first response's ETag
      // (else its Last-Modified) must be on the resumed one too.
      const ExpectedObject first{0, info.etag, info.mtime_ns};
      Verdict v = JudgeValidator(h, first, trust_missing_, where, kChangedMidStream);
      if (v.status.ok() && size_ < 0) size_ = h.range_total;
      return v;
    }
    if (h.status == 200) {
      return Verdict::Fail(
          Status::IoError(fmt::format(
              "{}: the server answered HTTP 200: it does not serve byte ranges", where)),
          ErrorKind::kBadResponse);
    }
    if (h.status == 412 || h.status == 416) {
      return Verdict::Fail(
          Status::Corruption(fmt::format(
              "{}: {}: the object changed on the server while it was read", where,
              StatusText(h))),
          ErrorKind::kPrecondition);
    }
    return CommonVerdict(h, where);
  }

  Status OnBody(const char* data, size_t n) override {
    if (size_ >= 0 && delivered_ + n > static_cast<uint64_t>(size_)) {
      return Status::Corruption(
          fmt::format("{}: more than the {} bytes announced", what_, size_));
    }
    SHARDFS_RETURN_IF_ERROR(sink_(data, n));
    delivered_ += n;
    return Status::Ok();
  }

  Verdict Finish(const ResponseHead&) override {
    if (size_ >= 0 && delivered_ != static_cast<uint64_t>(size_)) {
      return Verdict::Retry(fmt::format("short body: {} of {} bytes", delivered_, size_),
                            ErrorKind::kReset);
    }
    info.size = delivered_;
    return Verdict::Ok();
  }

  ObjectInfo info;

 private:
  std::string what_;
  const Sink& sink_;
  bool trust_missing_;
  uint64_t delivered_ = 0;
  int64_t size_ = -1;  // -1 while unknown (no Content-Length).
};

class TextExchange final : public Exchange {
 public:
  TextExchange(std::string what, std::string* body, size_t max)
      : what_(std::move(what)), body_(body), max_(max) {}
  void Prepare(Request*) override { body_->clear(); }
  Verdict Judge(const ResponseHead& h) override {
    if (h.status < 200 || h.status > 299) return CommonVerdict(h, what_);
    body_->clear();
    return Verdict::Ok();
  }
  Status OnBody(const char* data, size_t n) override {
    if (body_->size() + n > max_) {
      return Status::IoError(fmt::format("{}: response longer than {} bytes", what_, max_));
    }
    body_->append(data, n);
    return Status::Ok();
  }
  Verdict Finish(const ResponseHead&) override { return Verdict::Ok(); }

 private:
  std::string what_;
  std::string* body_;
  size_t max_;
};

}  // namespace

struct HttpClient::Impl {
  Impl(const FetchOptions& o, const AwsConfig& c, RequestStats* s)
      : options(o), config(c), stats(s),
        backoff(o.initial_backoff, o.max_backoff, std::random_device{}()) {
    curl = Curl(&curl_missing);
    if (curl != nullptr) {
      easy = curl->easy_init();
      multi = curl->multi_init();
    }
  }
  ~Impl() {
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

size_t HttpClient::Impl::OnHeader(char* data, size_t size, size_t n, void* self_ptr) {
  auto* self = static_cast<Impl*>(self_ptr);
  const size_t len = size * n;
  self->stall_deadline = Clock::now() + self->options.stall_timeout;
  ParseHeaderLine(std::string_view(data, len), &self->head);
  return len;
}

size_t HttpClient::Impl::OnWrite(char* data, size_t size, size_t n, void* self_ptr) {
  auto* self = static_cast<Impl*>(self_ptr);
  const size_t len = size * n;
  self->stall_deadline = Clock::now() + self->options.stall_timeout;
  if (!self->judged) {
    self->judged = true;
    self->verdict = self->exchange->Judge(self->head);
  }
  if (!self->verdict.status.ok()) {
    // An error answer: keep its start to name the error; abandon (and so
    // close) the connection only if the body is long.
    self->error_body_read += len;
    if (self->error_body.size() < kErrorBodyKept) {
      self->error_body.append(data, std::min(len, kErrorBodyKept - self->error_body.size()));
    }
    return self->error_body_read > kErrorBodyRead ? 0 : len;
  }
  if (self->stats != nullptr) self->stats->AddBytes(len);
  self->body_status = self->exchange->OnBody(data, len);
  return self->body_status.ok() ? len : 0;
}

namespace {

// The schemes a redirect of `url` may lead to (curl's list).
const char* RedirectProtocols(const RemoteUrl& url) {
  return url.scheme == RemoteUrl::Scheme::kHttps ? "https" : "http,https";
}

Verdict FromCurlCode(CURLcode rc, const char* detail) {
  std::string text = detail != nullptr && *detail != '\0'
                         ? std::string(detail)
                         : std::string(Curl(nullptr)->easy_strerror(rc));
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return Verdict::Retry(std::move(text), ErrorKind::kConnect);
    case CURLE_OPERATION_TIMEDOUT:
      return Verdict::Retry(std::move(text), ErrorKind::kTimeout);
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Verdict::Retry(std::move(text), ErrorKind::kReset);
    case CURLE_SSL_CONNECT_ERROR:
      // Often a handshake cut off by a restarting server.
      return Verdict::Retry(std::move(text), ErrorKind::kTls);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
      return Verdict::Fail(Status::IoError("TLS: " + text), ErrorKind::kTls);
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_TOO_MANY_REDIRECTS:
      return Verdict::Fail(Status::IoError(std::move(text)), ErrorKind::kBadResponse);
    default:
      return Verdict::Fail(Status::IoError(std::move(text)), ErrorKind::kOther);
  }
}

}  // namespace

curl_slist* HttpClient::Impl::SetUpTransfer(const RemoteUrl& url, const std::string& request_url,
                                            const Request& req, bool head_only,
                                            Clock::time_point deadline) {
  curl->easy_reset(easy);  // Keeps the live connections.
  curl->easy_setopt(easy, CURLOPT_URL, request_url.c_str());
  // Keys such as "a/../b" or "a//b" are object names, not paths to tidy.
  curl->easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  curl->easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl->easy_setopt(easy, CURLOPT_ERRORBUFFER, curl_error);
  curl->easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl->easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, options.connect_timeout.count())));
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  curl->easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, left.count())));
  curl->easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Impl::OnHeader);
  curl->easy_setopt(easy, CURLOPT_HEADERDATA, this);
  curl->easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Impl::OnWrite);
  curl->easy_setopt(easy, CURLOPT_WRITEDATA, this);
  if (head_only) curl->easy_setopt(easy, CURLOPT_NOBODY, 1L);
  if (!req.range.empty()) curl->easy_setopt(easy, CURLOPT_RANGE, req.range.c_str());
  std::string ca = options.ca_file;
  if (ca.empty()) {
    for (const char* env : {"CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
      const char* v = std::getenv(env);
      if (v != nullptr && *v != '\0') {
        ca = v;
        break;
      }
    }
  }
  if (!ca.empty()) curl->easy_setopt(easy, CURLOPT_CAINFO, ca.c_str());

  curl_slist* headers = nullptr;
  auto add_header = [&](const std::string& h) { headers = curl->slist_append(headers, h.c_str()); };
  if (!req.if_match.empty()) add_header("If-Match: " + req.if_match);
  std::string sigv4;
  if (url.is_s3() && config.sign) {
    // libcurl 7.88 neither adds x-amz-content-sha256 (servers answer 400
    // without it) nor the session token header: both by hand.
    sigv4 = fmt::format("aws:amz:{}:s3", config.region);
    curl->easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl->easy_setopt(easy, CURLOPT_USERNAME, config.access_key_id.c_str());
    curl->easy_setopt(easy, CURLOPT_PASSWORD, config.secret_access_key.c_str());
    add_header("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config.session_token.empty()) add_header("x-amz-security-token: " + config.session_token);
  } else if (!url.is_s3()) {
    // A CDN may redirect; a signed request may not follow (the signature
    // covers the host). Never to a weaker scheme (https -> http) or another
    // protocol (file, ftp, ...).
    curl->easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
    curl->easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
    curl->easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, RedirectProtocols(url));
  }
  if (headers != nullptr) curl->easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  return headers;
}

HttpClient::Impl::Cut HttpClient::Impl::Perform(std::optional<CURLcode>* rc) {
  Cut cut = Cut::kNone;
  curl->multi_add_handle(multi, easy);
  for (;;) {
    int running = 0;
    const CURLMcode mc = curl->multi_perform(multi, &running);
    if (mc != CURLM_OK) {
      *rc = CURLE_OUT_OF_MEMORY;
      snprintf(curl_error, sizeof(curl_error), "%s", curl->multi_strerror(mc));
      break;
    }
    if (running == 0) break;
    if (Cancelled()) {
      cut = Cut::kCancel;
      break;
    }
    if (Clock::now() > stall_deadline) {
      cut = Cut::kStall;
      break;
    }
    curl->multi_poll(multi, nullptr, 0, static_cast<int>(kPollInterval.count()), nullptr);
  }
  if (cut == Cut::kNone && !*rc) {
    int queued = 0;
    while (CURLMsg* msg = curl->multi_info_read(multi, &queued)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy) *rc = msg->data.result;
    }
  }
  return cut;
}

Verdict HttpClient::Impl::Attempt(const RemoteUrl& url, const std::string& request_url,
                                  const Request& req, bool head_only, Exchange& ex,
                                  Clock::time_point deadline) {
  exchange = &ex;
  head = ResponseHead();
  judged = false;
  verdict = Verdict::Ok();
  error_body.clear();
  error_body_read = 0;
  body_status = Status::Ok();
  curl_error[0] = '\0';

  curl_slist* headers = SetUpTransfer(url, request_url, req, head_only, deadline);

  const Clock::time_point start = Clock::now();
  stall_deadline = start + options.connect_timeout + options.stall_timeout;
  if (stats != nullptr) {
    stats->AddRequest();
    stats->AddInFlight(1);
  }
  std::optional<CURLcode> rc;
  const Cut cut = Perform(&rc);
  // Removing a transfer cut short closes its connection: never reused.
  curl->multi_remove_handle(multi, easy);
  curl->slist_free_all(headers);
  exchange = nullptr;
  if (stats != nullptr) {
    stats->AddInFlight(-1);
    stats->AddLatency(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start));
  }
  return Conclude(url, ex, cut, rc);
}

Verdict HttpClient::Impl::Conclude(const RemoteUrl& url, Exchange& ex, Cut cut,
                                   std::optional<CURLcode> rc) {
  Verdict v;
  if (cut == Cut::kCancel) {
    Verdict cancelled = Verdict::Fail(Status::IoError("cancelled"), ErrorKind::kOther);
    cancelled.cancelled = true;
    return cancelled;
  } else if (cut == Cut::kStall) {
    v = Verdict::Retry(fmt::format("stalled: no byte for {} ms", options.stall_timeout.count()),
                       ErrorKind::kTimeout);
  } else if (!body_status.ok()) {
    // The sink or the body check said stop.
    v = Verdict::Fail(body_status, body_status.code() == Status::Code::kCorruption
                                       ? ErrorKind::kPrecondition
                                       : ErrorKind::kOther);
  } else if (judged && !verdict.status.ok()) {
    v = verdict;
  } else if (rc == CURLE_UNSUPPORTED_PROTOCOL && head.status >= 300 && head.status <= 399) {
    v = Verdict::Fail(Status::IoError(fmt::format(
                          "refused to follow the redirect ({}) to {}: {}", StatusText(head),
                          head.location.empty() ? "(no Location)" : head.location,
                          url.scheme == RemoteUrl::Scheme::kHttps
                              ? "an https URL is only followed to https"
                              : "an http URL is only followed to http or https")),
                      ErrorKind::kBadResponse);
  } else if (!rc || *rc != CURLE_OK) {
    v = FromCurlCode(rc.value_or(CURLE_OUT_OF_MEMORY), curl_error);
  } else {
    if (!judged) {
      judged = true;
      verdict = ex.Judge(head);
    }
    v = verdict.status.ok() ? ex.Finish(head) : verdict;
  }
  if (!v.status.ok() && !error_body.empty()) {
    const std::string detail = DescribeErrorBody(error_body);
    if (!detail.empty()) {
      Status s = v.status;
      const std::string msg = fmt::format("{} [{}]", s.message(), detail);
      switch (s.code()) {
        case Status::Code::kNotFound: v.status = Status::NotFound(msg); break;
        case Status::Code::kCorruption: v.status = Status::Corruption(msg); break;
        default: v.status = Status::IoError(msg); break;
      }
    }
  }
  if (judged && verdict.unverified && stats != nullptr) stats->AddUnverified();
  if (!v.status.ok() && stats != nullptr) stats->AddError(v.kind);
  return v;
}

Status HttpClient::Impl::Run(const RemoteUrl& url, std::string_view query, bool head_only,
                             Exchange& ex) {
  const std::string what = url.Redacted();
  if (easy == nullptr || multi == nullptr) {
    return Status::IoError(fmt::format(
        "{}: {}", what, curl == nullptr ? curl_missing : "libcurl could not start a transfer"));
  }
  const std::string request_url =
      url.is_s3() ? S3RequestUrl(config.endpoint_url, config.region, url.bucket, url.key, query)
                  : (query.empty() ? url.url : fmt::format("{}?{}", url.url, query));
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options.retry_budget;
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  for (int attempts = 1;; ++attempts) {
    if (Cancelled()) {
      return Status::IoError(fmt::format("{}: cancelled after {} attempt{}", what, attempts - 1,
                                         attempts == 2 ? "" : "s"));
    }
    Request req;
    ex.Prepare(&req);
    Verdict v = Attempt(url, request_url, req, head_only, ex, deadline);
    if (v.status.ok()) return Status::Ok();
    if (!v.retry) {
      if (v.cancelled) {
        return Status::IoError(fmt::format("{}: cancelled during attempt {}", what, attempts));
      }
      // Judged answers already name the URL; transport errors do not.
      if (v.status.message().rfind(what, 0) == 0) return v.status;
      return v.status.WithContext(what);
    }
    const std::optional<Millis> wait = PlanRetry(Clock::now(), deadline,
                                                 backoff.Next(attempts - 1), v.retry_after);
    if (!wait) {
      std::string after;
      if (v.retry_after && Clock::now() + *v.retry_after >= deadline) {
        after = fmt::format("; the server asked to wait {} s", v.retry_after->count() / 1000);
      }
      return Status::IoError(fmt::format(
          "{}: gave up after {} attempt{} in {:.1f} s (retry budget {:.1f} s): {}{}", what,
          attempts, attempts == 1 ? "" : "s", elapsed_s(),
          std::chrono::duration<double>(options.retry_budget).count(), v.status.message(),
          after));
    }
    if (stats != nullptr) stats->AddRetry();
    const Clock::time_point until = Clock::now() + *wait;
    while (Clock::now() < until && !Cancelled()) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), kPollInterval));
    }
  }
}

HttpClient::HttpClient(FetchOptions options, AwsConfig config, RequestStats* stats)
    : options_(std::move(options)), config_(std::move(config)),
      impl_(std::make_unique<Impl>(options_, config_, stats)) {}

HttpClient::~HttpClient() = default;

std::string HttpClient::RequestUrl(const RemoteUrl& url, std::string_view query) const {
  if (url.is_s3()) {
    return S3RequestUrl(config_.endpoint_url, config_.region, url.bucket, url.key, query);
  }
  return query.empty() ? url.url : fmt::format("{}?{}", url.url, query);
}

Status HttpClient::GetRange(const RemoteUrl& url, uint64_t pos, uint64_t len,
                            const ExpectedObject& object, char* buf) {
  if (len == 0 || pos > object.size || len > object.size - pos) {
    return Status::InvalidArgument(fmt::format("{}: bytes {}+{} are not within its {} bytes",
                                               url.Redacted(), pos, len, object.size));
  }
  RangeExchange ex(url.Redacted(), pos, len, object, options_.trust_responses_without_etag, buf);
  return impl_->Run(url, {}, /*head_only=*/false, ex);
}

Status HttpClient::Check(const RemoteUrl& url, const ExpectedObject& object) {
  HeadExchange ex(url.Redacted(), &object, options_.trust_responses_without_etag);
  return impl_->Run(url, {}, /*head_only=*/true, ex);
}

Result<ObjectInfo> HttpClient::Head(const RemoteUrl& url) {
  HeadExchange ex(url.Redacted());
  SHARDFS_RETURN_IF_ERROR(impl_->Run(url, {}, /*head_only=*/true, ex));
  return ex.info;
}

Result<ObjectInfo> HttpClient::GetStream(const RemoteUrl& url, const Sink& sink) {
  StreamExchange ex(url.Redacted(), sink, options_.trust_responses_without_etag);
  SHARDFS_RETURN_IF_ERROR(impl_->Run(url, {}, /*head_only=*/false, ex));
  return ex.info;
}

Status HttpClient::GetText(const RemoteUrl& url, std::string_view query, std::string* body,
                           size_t max_bytes) {
  TextExchange ex(url.Redacted(), body, max_bytes);
  return impl_->Run(url, query, /*head_only=*/false, ex);
}

}  // namespace shardfs::remote
