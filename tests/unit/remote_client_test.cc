// remote/: URL parsing and request URLs, AWS configuration from env and
// files, backoff, request counters, S3 listing XML, and HttpClient against an
// in-process loopback HTTP server whose answers each test scripts (206s,
// 503s, 429 + Retry-After, resets and stalls mid-body, 412s, wrong totals,
// S3 listing pages). No network beyond 127.0.0.1.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/strings.h"
#include "remote/aws_config.h"
#include "remote/http_client.h"
#include "remote/request_stats.h"
#include "remote/retry.h"
#include "remote/s3_list.h"
#include "remote/url.h"
#include "tests/unit/test_util.h"

namespace shardfs::remote {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// ---------------------------------------------------------------- URLs

TEST(RemoteUrlTest, IsRemoteUrlKnowsTheThreeSchemes) {
  EXPECT_TRUE(IsRemoteUrl("http://h/x.tar"));
  EXPECT_TRUE(IsRemoteUrl("HTTPS://h/x.tar"));
  EXPECT_TRUE(IsRemoteUrl("s3://b/k"));
  EXPECT_FALSE(IsRemoteUrl("/data/x.tar"));
  EXPECT_FALSE(IsRemoteUrl("ftp://h/x"));
  EXPECT_FALSE(IsRemoteUrl("s3:/b/k"));
  EXPECT_FALSE(IsRemoteUrl("http:"));
}

TEST(RemoteUrlTest, ParsesAndGivesBackTheCanonicalText) {
  auto s3 = ParseRemoteUrl("s3://my-bucket/dir/sub/train-000001.tar");
  ASSERT_TRUE(s3.ok()) << s3.status().message();
  EXPECT_TRUE(s3->is_s3());
  EXPECT_EQ(s3->bucket, "my-bucket");
  EXPECT_EQ(s3->key, "dir/sub/train-000001.tar");
  EXPECT_EQ(s3->ToString(), "s3://my-bucket/dir/sub/train-000001.tar");

  auto odd = ParseRemoteUrl("s3://b/a b/ü/%41/../x?y#z");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->key, "a b/ü/%41/../x?y#z");  // Raw: never decoded, never tidied.
  auto again = ParseRemoteUrl(odd->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->key, odd->key);

  auto http = ParseRemoteUrl("HTTPS://cdn.example:8443/shards/a.tar?sig=1");
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->scheme, RemoteUrl::Scheme::kHttps);
  EXPECT_EQ(http->ToString(), "https://cdn.example:8443/shards/a.tar?sig=1");

  auto bucket_only = ParseRemoteUrl("s3://b");
  ASSERT_TRUE(bucket_only.ok());
  EXPECT_EQ(bucket_only->key, "");
}

TEST(RemoteUrlTest, RefusesWhatIsNotAUrl) {
  for (const char* bad : {"s3://", "s3:///key", "s3://bu cket/k", "s3://b$/k", "http://",
                          "http:///x", "https://:80/x", "ftp://h/x", "/local/path",
                          "http://h/a b"}) {
    auto r = ParseRemoteUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
      EXPECT_THAT(r.status().message(), HasSubstr(bad));
    }
  }
}

TEST(RemoteUrlTest, RedactedHidesTheQueryAndAnyUserinfo) {
  EXPECT_EQ(RedactLocation("https://cdn.example/d/a.tar?X-Amz-Signature=SECRET&X-Amz-Date=1"),
            "https://cdn.example/d/a.tar?<redacted>");
  EXPECT_EQ(RedactLocation("HTTP://h:8080/a.tar?"), "HTTP://h:8080/a.tar?<redacted>");
  EXPECT_EQ(RedactLocation("http://h?sig=SECRET"), "http://h?<redacted>");
  EXPECT_EQ(RedactLocation("http://h/a.tar#frag?SECRET"), "http://h/a.tar#frag?<redacted>");
  EXPECT_EQ(RedactLocation("http://alice:SECRET@h/a.tar"), "http://<redacted>@h/a.tar");
  EXPECT_EQ(RedactLocation("https://a@b:SECRET@h/x?SECRET"), "https://<redacted>@h/x?<redacted>");
  EXPECT_EQ(RedactLocation("http://h/a@b.tar"), "http://h/a@b.tar");  // Not in the host part.
  EXPECT_EQ(RedactLocation("http://h/a.tar"), "http://h/a.tar");
  // An S3 key may hold '?' and '#': it is the object's name, not a query.
  EXPECT_EQ(RedactLocation("s3://b/d/a?b#c.tar"), "s3://b/d/a?b#c.tar");
  EXPECT_EQ(RedactLocation("s3://AK:SECRET@b/k?x"), "s3://<redacted>@b/k?x");
  EXPECT_EQ(RedactLocation("/data/a?b@c.tar"), "/data/a?b@c.tar");
  EXPECT_EQ(RedactLocation("shards/x.tar"), "shards/x.tar");
  EXPECT_EQ(RedactLocation(""), "");

  auto u = ParseRemoteUrl("https://h:1/a.tar?X-Amz-Signature=SECRET");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->ToString(), "https://h:1/a.tar?X-Amz-Signature=SECRET");  // Kept for fetching.
  EXPECT_EQ(u->Redacted(), "https://h:1/a.tar?<redacted>");
  auto s3 = ParseRemoteUrl("s3://b/k?v=1");
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(s3->Redacted(), "s3://b/k?v=1");
}

TEST(RemoteUrlTest, RefusesUserinfoNamingTheWaysToGiveCredentials) {
  for (const char* bad : {"http://alice:hunter2@h/a.tar", "https://hunter2@h:443/a.tar?q",
                          "http://alice:hunter2@h", "HTTPS://u:hunter2@h?x=1"}) {
    auto r = ParseRemoteUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2"))) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("<redacted>@h")) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("presigned URL")) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("AWS_ACCESS_KEY_ID")) << bad;
  }
  auto r = ParseRemoteUrl("s3://AKIA:hunter2@bkt/k.tar");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(r.status().message(), HasSubstr("s3://<redacted>@bkt/k.tar"));
  EXPECT_THAT(r.status().message(), HasSubstr("AWS_PROFILE"));
  // Other refusals do not print a query either.
  r = ParseRemoteUrl("http://h/a b.tar?sig=hunter2");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(r.status().message(), HasSubstr("http://h/a b.tar?<redacted>"));
}

TEST(RemoteUrlTest, EncodesKeysPerSigV4) {
  EXPECT_EQ(UriEncode("AZaz09-._~", true), "AZaz09-._~");
  EXPECT_EQ(UriEncode("a b/c+d=e&f", true), "a%20b/c%2Bd%3De%26f");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("ü%", true), "%C3%BC%25");
  EXPECT_EQ(UriEncode(std::string_view("\x00\xff", 2), true), "%00%FF");
}

TEST(RemoteUrlTest, BuildsPathStyleAndVirtualHostedRequestUrls) {
  EXPECT_EQ(S3RequestUrl("", "eu-west-1", "bkt", "dir/a b.tar"),
            "https://bkt.s3.eu-west-1.amazonaws.com/dir/a%20b.tar");
  EXPECT_EQ(S3RequestUrl("http://127.0.0.1:9000/", "us-east-1", "bkt", "dir/../x?.tar"),
            "http://127.0.0.1:9000/bkt/dir/../x%3F.tar");
  EXPECT_EQ(S3RequestUrl("http://h:1", "r", "bkt", "", "list-type=2"),
            "http://h:1/bkt?list-type=2");
  EXPECT_EQ(S3RequestUrl("", "r", "bkt", "", "list-type=2"),
            "https://bkt.s3.r.amazonaws.com/?list-type=2");
}

TEST(RemoteUrlTest, QueriesAreSortedAndEncodedForSigning) {
  EXPECT_EQ(S3Query({{"prefix", "a/b c"}, {"list-type", "2"}, {"continuation-token", "x+y="}}),
            "continuation-token=x%2By%3D&list-type=2&prefix=a%2Fb%20c");
  EXPECT_EQ(S3Query({}), "");
}

// ---------------------------------------------------------------- AWS config

// Sets environment variables for one test and restores every one it touched.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name :
         {"HOME", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
          "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
          "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_NO_SIGN_REQUEST", "CURL_CA_BUNDLE",
          "SSL_CERT_FILE", "SHARDFS_S3_ALLOW_HTTP"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      if (std::string_view(name) != "HOME") unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (const auto& s : saved_) {
      if (s.second) {
        setenv(s.first.c_str(), s.second->c_str(), 1);
      } else {
        unsetenv(s.first.c_str());
      }
    }
  }
  void Set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class AwsConfigTest : public ::testing::Test {
 protected:
  AwsConfigTest() {
    env_.Set("HOME", dir_.path());
    // Most tests here name plain-http endpoints; PlainHttpEndpointNeedsConsent
    // shows the refusal without this.
    env_.Set("SHARDFS_S3_ALLOW_HTTP", "1");
    ::mkdir((dir_ / ".aws").c_str(), 0700);
  }
  void WriteCredentials(std::string_view text) {
    testing::WriteFile(dir_ / ".aws/credentials", text);
  }
  void WriteConfig(std::string_view text) { testing::WriteFile(dir_ / ".aws/config", text); }

  testing::TempDir dir_;
  EnvGuard env_;
};

TEST_F(AwsConfigTest, NothingAnywhereMeansUnsignedAwsDefaults) {
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->sign);
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(c->endpoint_url, "");
}

TEST_F(AwsConfigTest, FilesGiveTheDefaultProfile) {
  WriteCredentials(
      "# comment\n[default]\naws_access_key_id = AKFILE\naws_secret_access_key=SFILE\n"
      "aws_session_token = TFILE\n\n[other]\naws_access_key_id=AKO\naws_secret_access_key=SO\n");
  WriteConfig("[default]\nregion = eu-central-1\n; c\nendpoint_url = http://127.0.0.1:9000/\n"
              "s3 =\n  addressing_style = path\n");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->sign);
  EXPECT_EQ(c->access_key_id, "AKFILE");
  EXPECT_EQ(c->secret_access_key, "SFILE");
  EXPECT_EQ(c->session_token, "TFILE");
  EXPECT_EQ(c->region, "eu-central-1");
  EXPECT_EQ(c->endpoint_url, "http://127.0.0.1:9000");
}

TEST_F(AwsConfigTest, NamedProfileReadsProfileSections) {
  WriteCredentials("[default]\naws_access_key_id=AKD\naws_secret_access_key=SD\n"
                   "[train]\naws_access_key_id=AKT\naws_secret_access_key=ST\n");
  WriteConfig("[default]\nregion=us-west-2\n[profile train]\nregion = ap-south-1\n"
              "endpoint_url = https://minio.internal:9000\n");
  env_.Set("AWS_PROFILE", "train");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AKT");
  EXPECT_EQ(c->session_token, "");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint_url, "https://minio.internal:9000");
}

TEST_F(AwsConfigTest, EnvironmentWinsOverFiles) {
  WriteCredentials("[default]\naws_access_key_id=AKD\naws_secret_access_key=SD\n");
  WriteConfig("[default]\nregion=us-west-2\nendpoint_url=http://file:1\n");
  env_.Set("AWS_ACCESS_KEY_ID", "AKENV");
  env_.Set("AWS_SECRET_ACCESS_KEY", "SENV");
  env_.Set("AWS_SESSION_TOKEN", "TENV");
  env_.Set("AWS_DEFAULT_REGION", "eu-north-1");
  env_.Set("AWS_ENDPOINT_URL", "http://generic:2");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AKENV");
  EXPECT_EQ(c->secret_access_key, "SENV");
  EXPECT_EQ(c->session_token, "TENV");
  EXPECT_EQ(c->region, "eu-north-1");
  EXPECT_EQ(c->endpoint_url, "http://generic:2");
  env_.Set("AWS_REGION", "sa-east-1");
  env_.Set("AWS_ENDPOINT_URL_S3", "http://s3only:3");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->region, "sa-east-1");
  EXPECT_EQ(c->endpoint_url, "http://s3only:3");
}

TEST_F(AwsConfigTest, FileLocationsFromEnvironment) {
  testing::WriteFile(dir_ / "creds", "[default]\naws_access_key_id=AK\naws_secret_access_key=S\n");
  testing::WriteFile(dir_ / "conf", "[default]\nregion=r1\n");
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", dir_ / "creds");
  env_.Set("AWS_CONFIG_FILE", dir_ / "conf");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AK");
  EXPECT_EQ(c->region, "r1");
}

TEST_F(AwsConfigTest, NoSignRequestOverridesCredentials) {
  env_.Set("AWS_ACCESS_KEY_ID", "AK");
  env_.Set("AWS_SECRET_ACCESS_KEY", "S");
  env_.Set("AWS_NO_SIGN_REQUEST", "TRUE");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->sign);
  EXPECT_EQ(c->access_key_id, "");
}

TEST_F(AwsConfigTest, ClearErrors) {
  WriteCredentials("[default]\naws_access_key_id = AK\nthis line is wrong\n");
  auto c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(dir_ / ".aws/credentials:3:"));

  WriteCredentials("key = value\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("credentials:1:"));

  WriteCredentials("[default\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("credentials:1:"));

  WriteCredentials("[default]\naws_access_key_id = AK\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("without a secret access key"));

  WriteCredentials("");
  env_.Set("AWS_PROFILE", "nope");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("nope"));

  unsetenv("AWS_PROFILE");
  env_.Set("AWS_ENDPOINT_URL", "minio:9000");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_ENDPOINT_URL"));
}

TEST_F(AwsConfigTest, PlainHttpEndpointNeedsConsent) {
  unsetenv("SHARDFS_S3_ALLOW_HTTP");
  env_.Set("AWS_ENDPOINT_URL_S3", "http://user:hunter2@127.0.0.1:9000/");
  auto c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_ENDPOINT_URL_S3 = http://<redacted>@127.0.0.1"));
  EXPECT_THAT(c.status().message(), HasSubstr("clear text"));
  EXPECT_THAT(c.status().message(), HasSubstr("SHARDFS_S3_ALLOW_HTTP=1"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("hunter2")));

  unsetenv("AWS_ENDPOINT_URL_S3");
  WriteConfig("[default]\nendpoint_url = http://minio:9000\n");
  env_.Set("SHARDFS_S3_ALLOW_HTTP", "0");  // Only "1" says yes.
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("endpoint_url of profile default"));

  env_.Set("SHARDFS_S3_ALLOW_HTTP", "1");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->endpoint_url, "http://minio:9000");

  unsetenv("SHARDFS_S3_ALLOW_HTTP");
  WriteConfig("[default]\nendpoint_url = https://minio:9000\n");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->endpoint_url, "https://minio:9000");
}

// ---------------------------------------------------------------- backoff, stats

TEST(BackoffTest, CeilingDoublesUpToTheMaximum) {
  Backoff b(milliseconds(50), milliseconds(2000), 1);
  EXPECT_EQ(b.Ceiling(0), milliseconds(50));
  EXPECT_EQ(b.Ceiling(1), milliseconds(100));
  EXPECT_EQ(b.Ceiling(5), milliseconds(1600));
  EXPECT_EQ(b.Ceiling(6), milliseconds(2000));
  EXPECT_EQ(b.Ceiling(1000), milliseconds(2000));  // No overflow.
}

TEST(BackoffTest, DelaysAreFullyJitteredWithinTheCeiling) {
  Backoff b(milliseconds(50), milliseconds(2000), 42);
  for (int retry = 0; retry < 12; ++retry) {
    std::map<int64_t, int> seen;
    for (int i = 0; i < 200; ++i) {
      const milliseconds d = b.Next(retry);
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, b.Ceiling(retry));
      seen[d.count()]++;
    }
    EXPECT_GT(seen.size(), 20u) << "retry " << retry << ": not jittered";
    // Full jitter: some delays well below half the ceiling, some above.
    EXPECT_LT(seen.begin()->first, b.Ceiling(retry).count() / 4);
    EXPECT_GT(seen.rbegin()->first, b.Ceiling(retry).count() * 3 / 4);
  }
}

TEST(BackoffTest, PlanRetryKeepsToTheBudgetAndHonoursRetryAfter) {
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline = now + milliseconds(1000);
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), std::nullopt), milliseconds(100));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(500)), milliseconds(500));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(5)), milliseconds(100));
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(100), milliseconds(2000)), std::nullopt);
  EXPECT_EQ(PlanRetry(now, deadline, milliseconds(1000), std::nullopt), std::nullopt);
  EXPECT_EQ(PlanRetry(deadline, deadline, milliseconds(0), std::nullopt), std::nullopt);
  // A schedule of retries never plans past the deadline.
  Backoff b(milliseconds(50), milliseconds(2000), 7);
  Clock::time_point t = now;
  for (int retry = 0;; ++retry) {
    auto w = PlanRetry(t, deadline, b.Next(retry), std::nullopt);
    if (!w) break;
    t += *w;
    ASSERT_LT(t, deadline);
  }
}

TEST(RequestStatsTest, BucketsAreOrderedAndBoundTheirValues) {
  int last = 0;
  for (uint64_t us = 0; us < 5'000'000; us = us * 5 / 4 + 1) {
    const int b = RequestStats::BucketOf(us);
    EXPECT_GE(b, last) << us;
    EXPECT_GE(RequestStats::BucketUpperBound(b), us) << us;
    if (us >= 8) {
      EXPECT_LE(RequestStats::BucketUpperBound(b), us * 5 / 4) << us;
    }
    last = b;
  }
}

TEST(RequestStatsTest, SnapshotCountsAndPercentiles) {
  RequestStats s;
  for (int i = 1; i <= 100; ++i) s.AddLatency(std::chrono::microseconds(i * 1000));
  s.AddRequest();
  s.AddRetry();
  s.AddBytes(10);
  s.AddInFlight(2);
  s.AddInFlight(-1);
  s.AddError(ErrorKind::kThrottle);
  const RequestStatsSnapshot snap = s.Snapshot();
  EXPECT_EQ(snap.requests, 1u);
  EXPECT_EQ(snap.retries, 1u);
  EXPECT_EQ(snap.bytes_received, 10u);
  EXPECT_EQ(snap.in_flight, 1);
  EXPECT_EQ(snap.errors[static_cast<int>(ErrorKind::kThrottle)], 1u);
  EXPECT_EQ(snap.errors_total(), 1u);
  EXPECT_EQ(snap.latency_count, 100u);
  EXPECT_EQ(snap.latency_max_us, 100'000u);
  EXPECT_GE(snap.latency_p50_us, 50'000u);
  EXPECT_LE(snap.latency_p50_us, 62'500u);
  EXPECT_GE(snap.latency_p90_us, 90'000u);
  EXPECT_GE(snap.latency_p99_us, 99'000u);
  EXPECT_LE(snap.latency_p99_us, 100'000u);
  EXPECT_EQ(ErrorKindName(ErrorKind::kServer), "5xx");
}

// ---------------------------------------------------------------- XML

TEST(S3ListXmlTest, DecodesEntities) {
  auto d = DecodeXmlText("a&amp;b&lt;c&gt;d&quot;e&apos;f&#65;&#x42;&#252;");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "a&b<c>d\"e'fAB\xc3\xbc");
  EXPECT_FALSE(DecodeXmlText("a&b").ok());
  EXPECT_FALSE(DecodeXmlText("&nbsp;").ok());
  EXPECT_FALSE(DecodeXmlText("&#xD800;").ok());
}

TEST(S3ListXmlTest, ParsesAPageWithPaginationFields) {
  auto p = ParseListObjectsV2(
      R"(<?xml version="1.0" encoding="UTF-8"?>)"
      R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>)"
      R"(<Prefix>d/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>)"
      R"(<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>)"
      R"(<Contents><Key>d/a &amp; b.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>)"
      R"(<ETag>&quot;abc&quot;</ETag><Size>1024</Size><StorageClass>STANDARD</StorageClass></Contents>)"
      R"(<Contents><Key>d/c.tar</Key><ETag>"def-2"</ETag><Size>0</Size></Contents>)"
      R"(</ListBucketResult>)");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].key, "d/a & b.tar");
  EXPECT_EQ(p->objects[0].size, 1024u);
  EXPECT_EQ(p->objects[0].etag, "\"abc\"");
  EXPECT_EQ(p->objects[1].key, "d/c.tar");
  EXPECT_EQ(p->objects[1].etag, "\"def-2\"");
  EXPECT_TRUE(p->is_truncated);
  EXPECT_EQ(p->next_continuation_token, "tok&1");
}

TEST(S3ListXmlTest, EmptyListAndErrors) {
  auto p = ParseListObjectsV2(
      "<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"
      "</ListBucketResult>");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->objects.empty());
  EXPECT_FALSE(p->is_truncated);
  EXPECT_FALSE(ParseListObjectsV2("<Error><Code>NoSuchBucket</Code></Error>").ok());
  EXPECT_FALSE(
      ParseListObjectsV2("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>")
          .ok());
  EXPECT_FALSE(ParseListObjectsV2(
                   "<ListBucketResult><Contents><Key>k</Key><Size>x</Size></Contents>"
                   "</ListBucketResult>")
                   .ok());
  EXPECT_FALSE(
      ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
          .ok());
}

// ---------------------------------------------------------------- loopback server

struct HttpRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // Names lower-cased.
  int connection = 0;                          // 0 for the first accepted.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// What the server does with the connection after a handler answered.
enum class After { kKeep, kClose, kReset, kStall };

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// "HTTP/1.1 <status>" with headers (Content-Length added when missing) and
// a body, of which only `send_bytes` are written when given.
void Respond(int fd, std::string_view status, std::vector<std::string> headers,
             std::string_view body, std::optional<size_t> send_bytes = std::nullopt,
             bool head = false) {
  std::string out = fmt::format("HTTP/1.1 {}\r\n", status);
  bool has_length = false;
  for (const std::string& h : headers) {
    if (h.rfind("Content-Length:", 0) == 0) has_length = true;
    out += h + "\r\n";
  }
  if (!has_length) out += fmt::format("Content-Length: {}\r\n", body.size());
  out += "\r\n";
  if (!head) out.append(body.substr(0, send_bytes.value_or(body.size())));
  WriteAll(fd, out);
}

// A one-thread HTTP/1.1 server on 127.0.0.1 serving one connection at a time
// (each HttpClient uses one). Each request goes to the handler, which writes
// the answer and says what becomes of the connection.
class LoopbackServer {
 public:
  using Handler = std::function<After(int fd, const HttpRequest& req, int index)>;

  explicit LoopbackServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      ADD_FAILURE() << "loopback server: bind/listen failed";
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  std::string Url(std::string_view path) const {
    return fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  std::string Endpoint() const { return fmt::format("http://127.0.0.1:{}", port_); }
  int connections() const { return connections_; }
  std::vector<HttpRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  // Waits for `fd` to be readable; false when stopping or after timeout_ms.
  bool WaitReadable(int fd, int timeout_ms) {
    for (int waited = 0; !stop_ && waited < timeout_ms; waited += 20) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) return true;
    }
    return false;
  }

  void Loop() {
    while (!stop_) {
      if (!WaitReadable(listen_fd_, 1 << 30)) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int conn = connections_++;
      Serve(fd, conn);
    }
  }

  void Serve(int fd, int conn) {
    std::string buf;
    for (;;) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (!WaitReadable(fd, 5000)) return (void)::close(fd);
        char tmp[4096];
        const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0) return (void)::close(fd);
        buf.append(tmp, static_cast<size_t>(n));
      }
      HttpRequest req;
      req.connection = conn;
      std::string_view head(buf.data(), end);
      size_t line_end = head.find("\r\n");
      std::string_view first = head.substr(0, line_end);
      req.method = std::string(first.substr(0, first.find(' ')));
      first.remove_prefix(first.find(' ') + 1);
      req.target = std::string(first.substr(0, first.find(' ')));
      while (line_end != std::string_view::npos) {
        head.remove_prefix(line_end + 2);
        line_end = head.find("\r\n");
        std::string_view line = head.substr(0, line_end);
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string name(line.substr(0, colon));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        req.headers[name] = std::string(value);
      }
      buf.erase(0, end + 4);
      int index;
      {
        std::lock_guard<std::mutex> lock(mu_);
        index = static_cast<int>(requests_.size());
        requests_.push_back(req);
      }
      const After after = handler_(fd, req, index);
      if (after == After::kKeep) continue;
      if (after == After::kReset) {
        linger l{1, 0};  // Close with RST, as a dropped connection does.
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      } else if (after == After::kStall) {
        // Send nothing more until the client gives up and closes.
        char tmp[256];
        while (WaitReadable(fd, 5000) && ::recv(fd, tmp, sizeof(tmp), 0) > 0) {
        }
      }
      ::close(fd);
      return;
    }
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::vector<HttpRequest> requests_;  // Guarded by mu_.
  std::thread thread_;
};

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

FetchOptions FastOptions() {
  FetchOptions o;
  o.retry_budget = milliseconds(3000);
  o.connect_timeout = milliseconds(1000);
  o.stall_timeout = milliseconds(300);
  o.initial_backoff = milliseconds(10);
  o.max_backoff = milliseconds(100);
  return o;
}

RemoteUrl Url(const std::string& text) {
  auto u = ParseRemoteUrl(text);
  EXPECT_TRUE(u.ok()) << text;
  return u.ok() ? *u : RemoteUrl();
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t Errors(const RequestStatsSnapshot& s, ErrorKind k) { return s.errors[static_cast<int>(k)]; }

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
      Respond(fd, "206 Partial Content",
              {"ETag: " + kEtag, "Content-Range: bytes 100-299/1000"}, obj_.substr(100, 200), 120);
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
  auto info = client.GetStream(Url(server.Url("/a.tar")), [](const char*, size_t) {
    return Status::IoError("disk full");
  });
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
  auto r = client2.GetStream(Url(stall.Url("/a.tar")), [](const char*, size_t) {
    return Status::Ok();
  });
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

TEST_F(HttpClientTest, ListS3FollowsContinuationTokensWithSortedQueries) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    std::string body;
    if (req.target == "/bkt?list-type=2&prefix=d%2F") {
      body = "<ListBucketResult><IsTruncated>true</IsTruncated>"
             "<NextContinuationToken>t/1=</NextContinuationToken>"
             "<Contents><Key>d/b.tar</Key><ETag>&quot;e2&quot;</ETag><Size>20</Size></Contents>"
             "</ListBucketResult>";
    } else if (req.target == "/bkt?continuation-token=t%2F1%3D&list-type=2&prefix=d%2F") {
      body = "<ListBucketResult><IsTruncated>false</IsTruncated>"
             "<Contents><Key>d/a.tar</Key><ETag>&quot;e1&quot;</ETag><Size>10</Size></Contents>"
             "</ListBucketResult>";
    } else {
      Respond(fd, "400 Bad Request", {}, "unexpected target " + req.target);
      return After::kKeep;
    }
    Respond(fd, "200 OK", {"Content-Type: application/xml"}, body);
    return After::kKeep;
  });
  AwsConfig cfg;
  cfg.endpoint_url = server.Endpoint();
  HttpClient client(FastOptions(), cfg, &stats_);
  auto list = ListS3(client, "bkt", "d/");
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "d/a.tar");
  EXPECT_EQ((*list)[0].size, 10u);
  EXPECT_EQ((*list)[0].etag, "\"e1\"");
  EXPECT_EQ((*list)[1].key, "d/b.tar");
  EXPECT_EQ(server.requests().size(), 2u);
}

// One page per request, truncated, with the continuation token `token(n)`
// for the n-th request (0-based).
LoopbackServer::Handler EndlessListing(std::function<std::string(int)> token) {
  return [token](int fd, const HttpRequest&, int index) {
    Respond(fd, "200 OK", {"Content-Type: application/xml"},
            fmt::format("<ListBucketResult><IsTruncated>true</IsTruncated>"
                        "<NextContinuationToken>{}</NextContinuationToken>"
                        "<Contents><Key>d/{}.tar</Key><Size>1</Size></Contents>"
                        "</ListBucketResult>",
                        token(index), index));
    return After::kKeep;
  };
}

TEST_F(HttpClientTest, ListS3StopsAtATokenSentBefore) {
  // A, B, C, A, B, C, ...: never the same token twice in a row.
  LoopbackServer server(EndlessListing([](int n) { return std::string(1, "ABC"[n % 3]); }));
  AwsConfig cfg;
  cfg.endpoint_url = server.Endpoint();
  HttpClient client(FastOptions(), cfg, &stats_);
  auto list = ListS3(client, "bkt", "d/");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), Status::Code::kIoError);
  EXPECT_THAT(list.status().message(),
              HasSubstr("s3://bkt/d/: page 4: the server sent again the continuation token of "
                        "page 1"));
  EXPECT_EQ(server.requests().size(), 4u);
}

TEST_F(HttpClientTest, ListS3StopsAfterMaxPages) {
  LoopbackServer server(EndlessListing([](int n) { return fmt::format("t{}", n); }));
  AwsConfig cfg;
  cfg.endpoint_url = server.Endpoint();
  HttpClient client(FastOptions(), cfg, &stats_);
  auto list = ListS3(client, "bkt", "d/", /*max_pages=*/5);
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), Status::Code::kIoError);
  EXPECT_THAT(list.status().message(), HasSubstr("s3://bkt/d/: the listing goes on past 5 pages"));
  EXPECT_THAT(list.status().message(), HasSubstr("--max-list-pages"));
  EXPECT_EQ(server.requests().size(), 5u);
}

}  // namespace
}  // namespace shardfs::remote
