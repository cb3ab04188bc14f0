// src/remote/http_client.h: HttpClient against an in-process loopback HTTP
// server whose answers each test scripts (206s, 503s, 429 + Retry-After,
// resets and stalls mid-body, 412s, wrong totals, validators, redirects,
// SigV4 headers). No network beyond 127.0.0.1.
#include "src/remote/http_client.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/remote/aws_config.h"
#include "src/remote/request_stats.h"
#include "src/remote/retry.h"
#include "src/remote/url.h"
#include "tests/unit/remote/remote_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::remote {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kEtag = "\"v1-etag\"";

std::string Object() { return testing::PseudoRandomBytes(1000, 14); }

// Serves Object() with ranges and If-Match as nginx and S3 do.
After ServeRanges(int fd, const HttpRequest& req, const std::string& obj = Object(),
                  const std::string& etag = kEtag) {
  const bool head = req.method == "HEAD";
  const std::string if_match = req.Header("if-match");
  if (!if_match.empty() && if_match != etag) {
    Respond(fd, "412 Precondition Failed", {}, "");
    return After::kKeep;
  }
  const std::vector<std::string> common = {"ETag: " + etag,
                                           "Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT"};
  const std::string range = req.Header("range");
  if (range.empty()) {
    Respond(fd, "200 OK", common, obj, std::nullopt, head);
    return After::kKeep;
  }
  uint64_t first = 0, last = obj.size() - 1;
  const std::string spec = range.substr(6);  // "bytes="
  const size_t dash = spec.find('-');
  first = std::stoull(spec.substr(0, dash));
  if (dash + 1 < spec.size()) last = std::min<uint64_t>(last, std::stoull(spec.substr(dash + 1)));
  std::vector<std::string> h = common;
  h.push_back(fmt::format("Content-Range: bytes {}-{}/{}", first, last, obj.size()));
  Respond(fd, "206 Partial Content", h, obj.substr(first, last - first + 1), std::nullopt, head);
  return After::kKeep;
}

RemoteUrl Url(const std::string& text) {
  auto u = ParseRemoteUrl(text);
  EXPECT_TRUE(u.ok()) << text;
  return u.ok() ? *u : RemoteUrl();
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t Errors(const RequestStatsSnapshot& s, ErrorKind k) {
  return s.errors[static_cast<int>(k)];
}

class HttpClientTest : public ::testing::Test {
 protected:
  HttpClientTest() : env_() {}
  EnvGuard env_;  // No CA or AWS variables leak in.
  RequestStats stats_;
  const std::string obj_ = Object();
};

TEST_F(HttpClientTest, SendsTheRangeAndCopiesThe206) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) { return ServeRanges(fd, req); });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(100, 'x');
  ASSERT_TRUE(
      client.GetRange(Url(server.Url("/s/a.tar")), 100, 100, {1000, kEtag}, buf.data()).ok());
  EXPECT_EQ(buf, obj_.substr(100, 100));
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/s/a.tar");
  EXPECT_EQ(reqs[0].Header("range"), "bytes=100-199");
  EXPECT_EQ(reqs[0].Header("if-match"), kEtag);
  EXPECT_EQ(reqs[0].Header("authorization"), "");  // http(s) is never signed.
  const auto snap = stats_.Snapshot();
  EXPECT_EQ(snap.requests, 1u);
  EXPECT_EQ(snap.retries, 0u);
  EXPECT_EQ(snap.bytes_received, 100u);
  EXPECT_EQ(snap.in_flight, 0);
  EXPECT_EQ(snap.latency_count, 1u);
  EXPECT_EQ(snap.errors_total(), 0u);
}

TEST_F(HttpClientTest, KeepAliveReusesOneConnection) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) { return ServeRanges(fd, req); });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, '\0');
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(
        client.GetRange(Url(server.Url("/a.tar")), i * 10, 10, {1000, ""}, buf.data()).ok());
    EXPECT_EQ(buf, obj_.substr(i * 10, 10));
  }
  auto info = client.Head(Url(server.Url("/a.tar")));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(stats_.Snapshot().requests, 31u);
}

TEST_F(HttpClientTest, HeadGivesSizeEtagAndMtime) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) { return ServeRanges(fd, req); });
  HttpClient client(FastOptions(), AwsConfig(), nullptr);
  auto info = client.Head(Url(server.Url("/a.tar")));
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->size, 1000u);
  EXPECT_EQ(info->etag, kEtag);
  EXPECT_EQ(info->mtime_ns, int64_t{1796119200} * 1'000'000'000);
  EXPECT_EQ(server.requests()[0].method, "HEAD");
}

TEST_F(HttpClientTest, A503ThenA206SucceedsWithTheRetryCounted) {
  LoopbackServer server([](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "503 Service Unavailable", {},
              "<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>");
      return After::kKeep;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(50, '\0');
  ASSERT_TRUE(client.GetRange(Url(server.Url("/a.tar")), 0, 50, {1000, kEtag}, buf.data()).ok());
  EXPECT_EQ(buf, obj_.substr(0, 50));
  const auto snap = stats_.Snapshot();
  EXPECT_EQ(snap.requests, 2u);
  EXPECT_EQ(snap.retries, 1u);
  EXPECT_EQ(Errors(snap, ErrorKind::kServer), 1u);
  EXPECT_EQ(snap.bytes_received, 50u);  // Error bodies are not data.
}

TEST_F(HttpClientTest, A429WithRetryAfterIsWaitedFor) {
  LoopbackServer server([](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "429 Too Many Requests", {"Retry-After: 1"}, "");
      return After::kKeep;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, '\0');
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(client.GetRange(Url(server.Url("/a.tar")), 5, 10, {1000, ""}, buf.data()).ok());
  EXPECT_GE(SecondsSince(t0), 0.95);
  EXPECT_EQ(Errors(stats_.Snapshot(), ErrorKind::kThrottle), 1u);

  // A Retry-After past the budget ends the call at once, saying so.
  LoopbackServer slow([](int fd, const HttpRequest&, int) {
    Respond(fd, "429 Too Many Requests", {"Retry-After: 60"}, "");
    return After::kKeep;
  });
  const Clock::time_point t1 = Clock::now();
  Status s = client.GetRange(Url(slow.Url("/a.tar")), 5, 10, {1000, ""}, buf.data());
  EXPECT_LT(SecondsSince(t1), 0.5);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("asked to wait 60 s"));
}

TEST_F(HttpClientTest, AResetMidBodyResumesFromTheFirstMissingByte) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "206 Partial Content", {"ETag: " + kEtag, "Content-Range: bytes 100-299/1000"},
              obj_.substr(100, 200), 120);
      return After::kReset;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(200, '\0');
  Status s = client.GetRange(Url(server.Url("/a.tar")), 100, 200, {1000, kEtag}, buf.data());
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(buf, obj_.substr(100, 200));
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].Header("range"), "bytes=220-299");
  EXPECT_EQ(reqs[1].Header("if-match"), kEtag);
  EXPECT_EQ(Errors(stats_.Snapshot(), ErrorKind::kReset), 1u);
}

TEST_F(HttpClientTest, AStalledBodyFailsAfterStallTimeoutAndIsRetried) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "206 Partial Content", {"ETag: " + kEtag, "Content-Range: bytes 0-499/1000"},
              obj_.substr(0, 500), 10);
      return After::kStall;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(500, '\0');
  const Clock::time_point t0 = Clock::now();
  Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 500, {1000, kEtag}, buf.data());
  ASSERT_TRUE(s.ok()) << s.message();
  const double took = SecondsSince(t0);
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(buf, obj_.substr(0, 500));
  EXPECT_EQ(Errors(stats_.Snapshot(), ErrorKind::kTimeout), 1u);
  EXPECT_EQ(server.connections(), 2);  // The stalled connection was dropped.
}

TEST_F(HttpClientTest, AnExhaustedBudgetIsOneIoErrorSoonAfterTheBudget) {
  LoopbackServer server([](int fd, const HttpRequest&, int) {
    Respond(fd, "500 Internal Server Error", {}, "oops");
    return After::kKeep;
  });
  FetchOptions o = FastOptions();
  o.retry_budget = milliseconds(800);
  HttpClient client(o, AwsConfig(), &stats_);
  std::string buf(10, '\0');
  const Clock::time_point t0 = Clock::now();
  Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, ""}, buf.data());
  const double took = SecondsSince(t0);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), StartsWith(server.Url("/a.tar")));
  EXPECT_THAT(s.message(), HasSubstr("gave up after"));
  EXPECT_THAT(s.message(), HasSubstr("HTTP 500"));
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 0.8 + 0.3);
  const auto snap = stats_.Snapshot();
  EXPECT_GE(snap.requests, 4u);
  EXPECT_EQ(snap.retries, snap.requests - 1);
  EXPECT_EQ(Errors(snap, ErrorKind::kServer), snap.requests);
}

TEST_F(HttpClientTest, RefusedConnectionsAreRetriedUntilTheBudget) {
  int port;
  {
    LoopbackServer gone([](int, const HttpRequest&, int) { return After::kClose; });
    port = std::stoi(gone.Endpoint().substr(17));
  }
  FetchOptions o = FastOptions();
  o.retry_budget = milliseconds(400);
  HttpClient client(o, AwsConfig(), &stats_);
  std::string buf(10, '\0');
  Status s = client.GetRange(Url(fmt::format("http://127.0.0.1:{}/a.tar", port)), 0, 10, {1000, ""},
                             buf.data());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("gave up after"));
  EXPECT_GE(Errors(stats_.Snapshot(), ErrorKind::kConnect), 2u);
}

TEST_F(HttpClientTest, A412IsCorruptionAndNotRetried) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    return ServeRanges(fd, req, Object(), "\"v2-etag\"");
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, 'x');
  Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, kEtag}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("the object changed on the server since it was indexed"));
  EXPECT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(buf, std::string(10, 'x'));
  EXPECT_EQ(Errors(stats_.Snapshot(), ErrorKind::kPrecondition), 1u);
}

TEST_F(HttpClientTest, AnotherTotalIsCorruption) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    return ServeRanges(fd, req, Object() + "more", kEtag);  // Same ETag, longer object.
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, 'x');
  Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, kEtag}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("1004 bytes long now, 1000 when indexed"));
  EXPECT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(buf, std::string(10, 'x'));
}

TEST_F(HttpClientTest, A200IsTakenOnlyForTheWholeObjectOfTheRightLength) {
  // A server that ignores Range.
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    const std::string obj = req.target == "/short.tar" ? Object().substr(0, 900) : Object();
    Respond(fd, "200 OK", {"ETag: " + kEtag}, obj);
    return After::kKeep;
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(100, 'x');
  Status s = client.GetRange(Url(server.Url("/a.tar")), 100, 100, {1000, ""}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("does not serve byte ranges"));
  EXPECT_EQ(buf, std::string(100, 'x'));
  EXPECT_EQ(server.requests().size(), 1u);

  std::string whole(1000, '\0');
  ASSERT_TRUE(client.GetRange(Url(server.Url("/a.tar")), 0, 1000, {1000, ""}, whole.data()).ok());
  EXPECT_EQ(whole, obj_);

  s = client.GetRange(Url(server.Url("/short.tar")), 0, 1000, {1000, ""}, whole.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  s = client.GetRange(Url(server.Url("/short.tar")), 0, 10, {1000, ""}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(buf, std::string(100, 'x'));
}

TEST_F(HttpClientTest, NotFoundAndAccessDeniedAreNotRetried) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    Respond(fd, req.target == "/missing" ? "404 Not Found" : "403 Forbidden", {},
            "<Error><Code>AccessDenied</Code><Message>no</Message></Error>");
    return After::kKeep;
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, '\0');
  Status s = client.GetRange(Url(server.Url("/missing")), 0, 10, {1000, ""}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  auto h = client.Head(Url(server.Url("/secret")));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kIoError);
  EXPECT_THAT(h.status().message(), HasSubstr("access denied"));
  s = client.GetRange(Url(server.Url("/secret")), 0, 10, {1000, ""}, buf.data());
  EXPECT_THAT(s.message(), HasSubstr("AccessDenied"));
  EXPECT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(stats_.Snapshot().retries, 0u);
}

TEST_F(HttpClientTest, GetStreamResumesAfterAResetWithRangeAndIfMatch) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "200 OK", {"ETag: " + kEtag}, obj_, 400);
      return After::kReset;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string got;
  int calls = 0;
  auto info = client.GetStream(Url(server.Url("/a.tar")), [&](const char* p, size_t n) {
    got.append(p, n);
    ++calls;
    return Status::Ok();
  });
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(got, obj_);
  EXPECT_EQ(info->size, 1000u);
  EXPECT_EQ(info->etag, kEtag);
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].Header("range"), "");
  EXPECT_EQ(reqs[1].Header("range"), "bytes=400-");
  EXPECT_EQ(reqs[1].Header("if-match"), kEtag);
}

TEST_F(HttpClientTest, GetStreamRefusesAnObjectChangedMidStream) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "200 OK", {"ETag: " + kEtag}, obj_, 400);
      return After::kReset;
    }
    return ServeRanges(fd, req, obj_, "\"v2\"");
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string got;
  auto info = client.GetStream(Url(server.Url("/a.tar")), [&](const char* p, size_t n) {
    got.append(p, n);
    return Status::Ok();
  });
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(got, obj_.substr(0, 400));
}

TEST_F(HttpClientTest, GetStreamStopsWhenTheSinkSaysSo) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) { return ServeRanges(fd, req); });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  auto info = client.GetStream(Url(server.Url("/a.tar")),
                               [](const char*, size_t) { return Status::IoError("disk full"); });
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("disk full"));
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST_F(HttpClientTest, CancelEndsARetryLoopQuickly) {
  LoopbackServer server([](int fd, const HttpRequest&, int) {
    Respond(fd, "503 Service Unavailable", {"Retry-After: 2"}, "");
    return After::kKeep;
  });
  std::atomic<bool> cancel{false};
  FetchOptions o = FastOptions();
  o.retry_budget = milliseconds(20'000);
  o.cancel = &cancel;
  HttpClient client(o, AwsConfig(), &stats_);
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    cancel = true;
  });
  std::string buf(10, '\0');
  const Clock::time_point t0 = Clock::now();
  Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, ""}, buf.data());
  const double took = SecondsSince(t0);
  canceller.join();
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("cancelled"));
  EXPECT_LT(took, 0.6);

  // Mid-transfer too: a stalled body with a long stall timeout.
  cancel = false;
  LoopbackServer stall([](int fd, const HttpRequest&, int) {
    Respond(fd, "200 OK", {}, std::string(1000, 'a'), 10);
    return After::kStall;
  });
  FetchOptions o2 = o;
  o2.stall_timeout = milliseconds(10'000);
  HttpClient client2(o2, AwsConfig(), nullptr);
  std::thread canceller2([&] {
    std::this_thread::sleep_for(milliseconds(200));
    cancel = true;
  });
  const Clock::time_point t1 = Clock::now();
  auto r =
      client2.GetStream(Url(stall.Url("/a.tar")), [](const char*, size_t) { return Status::Ok(); });
  canceller2.join();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cancelled"));
  EXPECT_LT(SecondsSince(t1), 0.6);
}

// ---------------------------------------------------------------- validators

const std::string kLastModified = "Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT";
constexpr int64_t kLastModifiedNs = int64_t{1796119200} * 1'000'000'000;

// A server that ignores If-Match (python range servers, some caches and S3
// gateways): it answers every range from `obj` with exactly `headers` (and
// Content-Range), whatever the request's If-Match says.
After ServeIgnoringIfMatch(int fd, const HttpRequest& req, const std::string& obj,
                           const std::vector<std::string>& headers) {
  std::vector<std::string> h = headers;
  const std::string range = req.Header("range");
  if (range.empty()) {
    Respond(fd, "200 OK", h, obj, std::nullopt, req.method == "HEAD");
    return After::kKeep;
  }
  const std::string spec = range.substr(6);
  const size_t dash = spec.find('-');
  const uint64_t first = std::stoull(spec.substr(0, dash));
  uint64_t last = obj.size() - 1;
  if (dash + 1 < spec.size()) last = std::min<uint64_t>(last, std::stoull(spec.substr(dash + 1)));
  h.push_back(fmt::format("Content-Range: bytes {}-{}/{}", first, last, obj.size()));
  Respond(fd, "206 Partial Content", h, obj.substr(first, last - first + 1));
  return After::kKeep;
}

// Same size, other bytes: what a replaced shard looks like.
std::string Replaced() { return testing::PseudoRandomBytes(1000, 99); }

TEST_F(HttpClientTest, TheResponseEtagIsComparedEvenWhenIfMatchIsIgnored) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    return ServeIgnoringIfMatch(fd, req, Replaced(), {"ETag: \"v2-etag\"", kLastModified});
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(100, 'x');
  Status s = client.GetRange(Url(server.Url("/a.tar")), 100, 100, {1000, kEtag}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("ETag \"v2-etag\", \"v1-etag\" when indexed"));
  EXPECT_EQ(buf, std::string(100, 'x'));
  // The whole object as a 200 is held to the same.
  std::string whole(1000, 'x');
  s = client.GetRange(Url(server.Url("/a.tar")), 0, 1000, {1000, kEtag}, whole.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(server.requests().size(), 2u);  // Not retried.
  EXPECT_EQ(Errors(stats_.Snapshot(), ErrorKind::kPrecondition), 2u);
}

TEST_F(HttpClientTest, AWeakEtagNeverMatchesEitherSide) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    const std::string etag = req.target == "/weak-both.tar" ? "W/\"w1\"" : "W/" + kEtag;
    return ServeIgnoringIfMatch(fd, req, Object(), {"ETag: " + etag});
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, 'x');
  Status s = client.GetRange(Url(server.Url("/weak.tar")), 0, 10, {1000, kEtag}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("weak ETag"));
  s = client.GetRange(Url(server.Url("/weak-both.tar")), 0, 10, {1000, "W/\"w1\""}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(buf, std::string(10, 'x'));
}

TEST_F(HttpClientTest, AResponseWithoutTheIndexedEtagIsCountedAndRefusedUnlessTrusted) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    if (req.target == "/other-lm.tar") {
      return ServeIgnoringIfMatch(fd, req, Replaced(),
                                  {"Last-Modified: Wed, 02 Dec 2026 10:00:00 GMT"});
    }
    return ServeIgnoringIfMatch(fd, req, Object(), {kLastModified});
  });
  std::string buf(10, 'x');
  {
    HttpClient client(FastOptions(), AwsConfig(), &stats_);
    Status s = client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, kEtag}, buf.data());
    EXPECT_EQ(s.code(), Status::Code::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr("no ETag"));
    EXPECT_THAT(s.message(), HasSubstr("trust_responses_without_etag"));
    EXPECT_EQ(buf, std::string(10, 'x'));
    const auto snap = stats_.Snapshot();
    EXPECT_EQ(snap.unverified, 1u);
    EXPECT_EQ(Errors(snap, ErrorKind::kBadResponse), 1u);
    EXPECT_EQ(snap.retries, 0u);
  }
  FetchOptions trusting = FastOptions();
  trusting.trust_responses_without_etag = true;
  HttpClient client(trusting, AwsConfig(), &stats_);
  Status s =
      client.GetRange(Url(server.Url("/a.tar")), 0, 10, {1000, kEtag, kLastModifiedNs}, buf.data());
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(buf, obj_.substr(0, 10));
  EXPECT_EQ(stats_.Snapshot().unverified, 2u);  // Counted when accepted too.
  // Trusted, but a Last-Modified that differs still proves a change.
  buf.assign(10, 'x');
  s = client.GetRange(Url(server.Url("/other-lm.tar")), 0, 10, {1000, kEtag, kLastModifiedNs},
                      buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("Last-Modified"));
  EXPECT_EQ(buf, std::string(10, 'x'));
}

TEST_F(HttpClientTest, WithoutAnEtagLastModifiedIsHeldTo) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    if (req.target == "/other.tar") {
      return ServeIgnoringIfMatch(fd, req, Replaced(),
                                  {"Last-Modified: Wed, 02 Dec 2026 10:00:00 GMT"});
    }
    if (req.target == "/none.tar") return ServeIgnoringIfMatch(fd, req, Replaced(), {});
    return ServeIgnoringIfMatch(fd, req, Object(), {kLastModified});
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  const ExpectedObject indexed{1000, "", kLastModifiedNs};
  std::string buf(10, 'x');
  ASSERT_TRUE(client.GetRange(Url(server.Url("/same.tar")), 5, 10, indexed, buf.data()).ok());
  EXPECT_EQ(buf, obj_.substr(5, 10));
  buf.assign(10, 'x');
  Status s = client.GetRange(Url(server.Url("/other.tar")), 5, 10, indexed, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("Last-Modified Wed, 02 Dec 2026"));
  s = client.GetRange(Url(server.Url("/none.tar")), 5, 10, indexed, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("no Last-Modified"));
  EXPECT_EQ(buf, std::string(10, 'x'));
  EXPECT_EQ(stats_.Snapshot().unverified, 1u);
  // An index that holds neither has only the size to go by.
  ASSERT_TRUE(client.GetRange(Url(server.Url("/none.tar")), 5, 10, {1000, ""}, buf.data()).ok());
}

TEST_F(HttpClientTest, CheckJudgesAHeadLikeEveryResponse) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    if (req.target == "/missing.tar") {
      Respond(fd, "404 Not Found", {}, "", std::nullopt, true);
      return After::kKeep;
    }
    if (req.target == "/noetag.tar") return ServeIgnoringIfMatch(fd, req, Object(), {});
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  EXPECT_TRUE(client.Check(Url(server.Url("/a.tar")), {1000, kEtag}).ok());
  EXPECT_TRUE(client.Check(Url(server.Url("/a.tar")), {1000, "", kLastModifiedNs}).ok());
  EXPECT_EQ(client.Check(Url(server.Url("/a.tar")), {1000, "\"v0\""}).code(),
            Status::Code::kCorruption);
  EXPECT_EQ(client.Check(Url(server.Url("/a.tar")), {999, kEtag}).code(),
            Status::Code::kCorruption);
  EXPECT_EQ(client.Check(Url(server.Url("/noetag.tar")), {1000, kEtag}).code(),
            Status::Code::kCorruption);
  EXPECT_EQ(client.Check(Url(server.Url("/missing.tar")), {1000, kEtag}).code(),
            Status::Code::kNotFound);
  for (const HttpRequest& r : server.requests()) EXPECT_EQ(r.method, "HEAD");
}

TEST_F(HttpClientTest, GetStreamRefusesAResumeWithoutTheFirstEtag) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "200 OK", {"ETag: " + kEtag}, obj_, 400);
      return After::kReset;
    }
    return ServeIgnoringIfMatch(fd, req, Replaced(), {});
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string got;
  auto info = client.GetStream(Url(server.Url("/a.tar")), [&](const char* p, size_t n) {
    got.append(p, n);
    return Status::Ok();
  });
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(got, obj_.substr(0, 400));
}

TEST_F(HttpClientTest, GetStreamWithoutAnEtagHoldsTheResumeToLastModified) {
  LoopbackServer server([this](int fd, const HttpRequest& req, int i) {
    if (i == 0) {
      Respond(fd, "200 OK", {kLastModified}, obj_, 400);
      return After::kReset;
    }
    return ServeIgnoringIfMatch(fd, req, Replaced(),
                                {"Last-Modified: Wed, 02 Dec 2026 10:00:00 GMT"});
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string got;
  auto info = client.GetStream(Url(server.Url("/a.tar")), [&](const char* p, size_t n) {
    got.append(p, n);
    return Status::Ok();
  });
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(got, obj_.substr(0, 400));
}

TEST_F(HttpClientTest, RedirectsToAnotherSchemeAreRefused) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    if (req.target == "/moved.tar") {
      Respond(fd, "302 Found", {"Location: /a.tar"}, "");
      return After::kKeep;
    }
    if (req.target == "/file.tar") {
      Respond(fd, "302 Found", {"Location: file:///etc/hostname"}, "");
      return After::kKeep;
    }
    return ServeRanges(fd, req);
  });
  HttpClient client(FastOptions(), AwsConfig(), &stats_);
  std::string buf(10, 'x');
  ASSERT_TRUE(
      client.GetRange(Url(server.Url("/moved.tar")), 0, 10, {1000, kEtag}, buf.data()).ok());
  EXPECT_EQ(buf, obj_.substr(0, 10));
  buf.assign(10, 'x');
  Status s = client.GetRange(Url(server.Url("/file.tar")), 0, 10, {1000, kEtag}, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("refused to follow the redirect (HTTP 302 Found) to "
                                     "file:///etc/hostname"));
  EXPECT_EQ(buf, std::string(10, 'x'));
  EXPECT_EQ(stats_.Snapshot().retries, 0u);
}

TEST_F(HttpClientTest, S3RequestsCarrySigV4Headers) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) { return ServeRanges(fd, req); });
  AwsConfig cfg;
  cfg.sign = true;
  cfg.access_key_id = "AKIDEXAMPLE";
  cfg.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  cfg.session_token = "session-token-1";
  cfg.region = "eu-west-3";
  cfg.endpoint_url = server.Endpoint();
  {
    HttpClient client(FastOptions(), cfg, &stats_);
    std::string buf(10, '\0');
    Status s = client.GetRange(Url("s3://bkt/dir/a b+c.tar"), 10, 10, {1000, kEtag}, buf.data());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(buf, obj_.substr(10, 10));
  }  // Closes its connection: the server serves one at a time.
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/bkt/dir/a%20b%2Bc.tar");
  EXPECT_THAT(reqs[0].Header("authorization"),
              StartsWith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
  EXPECT_THAT(reqs[0].Header("authorization"), HasSubstr("/eu-west-3/s3/aws4_request"));
  EXPECT_THAT(reqs[0].Header("authorization"), HasSubstr("Signature="));
  EXPECT_EQ(reqs[0].Header("x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
  EXPECT_EQ(reqs[0].Header("x-amz-security-token"), "session-token-1");
  EXPECT_NE(reqs[0].Header("x-amz-date"), "");

  // Unsigned when the config says so (public buckets).
  cfg.sign = false;
  HttpClient anonymous(FastOptions(), cfg, nullptr);
  ASSERT_TRUE(anonymous.Head(Url("s3://bkt/k")).ok());
  EXPECT_EQ(server.requests()[1].Header("authorization"), "");
  EXPECT_EQ(server.requests()[1].Header("x-amz-content-sha256"), "");
}

}  // namespace
}  // namespace shardfs::remote
