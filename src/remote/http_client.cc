#include "src/remote/http_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "src/remote/http_transfer.h"

namespace shardfs::remote {
namespace {

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
          Status::Corruption(fmt::format("{}: {}: {} (the ETag or size no longer matches)", what,
                                         status, kChanged)),
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
        return Verdict::Fail(
            Status::IoError(fmt::format("{}: HTTP 206 without a valid Content-Range", Where())),
            ErrorKind::kBadResponse);
      }
      if (h.range_total != static_cast<int64_t>(size_)) {
        return Verdict::Fail(
            Status::Corruption(fmt::format(
                "{}: {}: it is {} bytes long now, {} when indexed", Where(), kChanged,
                h.range_total < 0 ? std::string("of unknown size") : std::to_string(h.range_total),
                size_)),
            ErrorKind::kPrecondition);
      }
      if (h.range_first != pos_ + got_ || h.range_last != pos_ + len_ - 1) {
        return Verdict::Fail(Status::IoError(fmt::format("{}: the server sent bytes {}-{} instead",
                                                         Where(), h.range_first, h.range_last)),
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
    return Verdict::Retry(fmt::format("short body: {} of {} bytes", got_, len_), ErrorKind::kReset);
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
  // A conditional HEAD: "If-None-Match: etag", and 304 is an answer.
  void SetIfNoneMatch(std::string_view etag) { if_none_match_ = etag; }
  void Prepare(Request* req) override { req->if_none_match = if_none_match_; }
  Verdict Judge(const ResponseHead& h) override {
    not_modified = false;
    if (h.status == 304 && !if_none_match_.empty()) {
      not_modified = true;
      info.etag = h.etag;
      info.mtime_ns = MtimeNs(h);
      return Verdict::Ok();
    }
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
  bool not_modified = false;

 private:
  std::string what_;
  const ExpectedObject* expect_;
  bool trust_missing_;
  std::string if_none_match_;
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
          return Verdict::Fail(
              Status::IoError(fmt::format("{}: HTTP 206 for a request without Range", what_)),
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
              "{}: {}: the object changed on the server while it was read", where, StatusText(h))),
          ErrorKind::kPrecondition);
    }
    return CommonVerdict(h, where);
  }

  Status OnBody(const char* data, size_t n) override {
    if (size_ >= 0 && delivered_ + n > static_cast<uint64_t>(size_)) {
      return Status::Corruption(fmt::format("{}: more than the {} bytes announced", what_, size_));
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

HttpClient::HttpClient(FetchOptions options, AwsConfig config, RequestStats* stats)
    : options_(std::move(options)),
      config_(std::move(config)),
      impl_(std::make_unique<HttpTransfer>(options_, config_, stats)) {}

HttpClient::~HttpClient() = default;

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

Result<ObjectInfo> HttpClient::Revalidate(const RemoteUrl& url, std::string_view etag,
                                          bool* not_modified) {
  HeadExchange ex(url.Redacted());
  ex.SetIfNoneMatch(etag);
  SHARDFS_RETURN_IF_ERROR(impl_->Run(url, {}, /*head_only=*/true, ex));
  *not_modified = ex.not_modified;
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
