#include "src/remote/http_transfer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <thread>

#include "base/parse.h"
#include "src/remote/curl_api.h"
#include "src/remote/retry.h"

namespace shardfs::remote {

time_t ParseHttpDate(const std::string& text) {
  const CurlApi* curl = Curl(nullptr);
  return curl != nullptr ? curl->getdate(text.c_str(), nullptr) : -1;
}

std::string StatusText(const ResponseHead& h) {
  return h.reason.empty() ? fmt::format("HTTP {}", h.status)
                          : fmt::format("HTTP {} {}", h.status, h.reason);
}

namespace {

// How often a running transfer looks at the cancel flag and the stall clock.
constexpr Millis kPollInterval{20};
// Error bodies (S3's XML) are read this far to name the error, then dropped.
constexpr size_t kErrorBodyKept = 2048;
constexpr size_t kErrorBodyRead = 64 << 10;

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

}  // namespace

size_t HttpTransfer::OnHeader(char* data, size_t size, size_t n, void* self_ptr) {
  auto* self = static_cast<HttpTransfer*>(self_ptr);
  const size_t len = size * n;
  self->stall_deadline = Clock::now() + self->options.stall_timeout;
  ParseHeaderLine(std::string_view(data, len), &self->head);
  return len;
}

size_t HttpTransfer::OnWrite(char* data, size_t size, size_t n, void* self_ptr) {
  auto* self = static_cast<HttpTransfer*>(self_ptr);
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

curl_slist* HttpTransfer::SetUpTransfer(const RemoteUrl& url, const std::string& request_url,
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
  curl->easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                    static_cast<long>(std::max<int64_t>(1, left.count())));
  curl->easy_setopt(easy, CURLOPT_HEADERFUNCTION, &HttpTransfer::OnHeader);
  curl->easy_setopt(easy, CURLOPT_HEADERDATA, this);
  curl->easy_setopt(easy, CURLOPT_WRITEFUNCTION, &HttpTransfer::OnWrite);
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
  if (!req.if_none_match.empty()) add_header("If-None-Match: " + req.if_none_match);
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

HttpTransfer::Cut HttpTransfer::Perform(std::optional<CURLcode>* rc) {
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

Verdict HttpTransfer::Attempt(const RemoteUrl& url, const std::string& request_url,
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

Verdict HttpTransfer::Conclude(const RemoteUrl& url, Exchange& ex, Cut cut,
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
        case Status::Code::kNotFound:
          v.status = Status::NotFound(msg);
          break;
        case Status::Code::kCorruption:
          v.status = Status::Corruption(msg);
          break;
        default:
          v.status = Status::IoError(msg);
          break;
      }
    }
  }
  if (judged && verdict.unverified && stats != nullptr) stats->AddUnverified();
  if (!v.status.ok() && stats != nullptr) stats->AddError(v.kind);
  return v;
}

Status HttpTransfer::Run(const RemoteUrl& url, std::string_view query, bool head_only,
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
  auto elapsed_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
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
    const std::optional<Millis> wait =
        PlanRetry(Clock::now(), deadline, backoff.Next(attempts - 1), v.retry_after);
    if (!wait) {
      std::string after;
      if (v.retry_after && Clock::now() + *v.retry_after >= deadline) {
        after = fmt::format("; the server asked to wait {} s", v.retry_after->count() / 1000);
      }
      return Status::IoError(fmt::format(
          "{}: gave up after {} attempt{} in {:.1f} s (retry budget {:.1f} s): {}{}", what,
          attempts, attempts == 1 ? "" : "s", elapsed_s(),
          std::chrono::duration<double>(options.retry_budget).count(), v.status.message(), after));
    }
    if (stats != nullptr) stats->AddRetry();
    const Clock::time_point until = Clock::now() + *wait;
    while (Clock::now() < until && !Cancelled()) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), kPollInterval));
    }
  }
}

}  // namespace shardfs::remote
