// src/remote/url.h: URL parsing, redaction, SigV4 key encoding and request URLs.
#include "src/remote/url.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "base/strings.h"

namespace shardfs::remote {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  for (const char* bad :
       {"s3://", "s3:///key", "s3://bu cket/k", "s3://b$/k", "http://", "http:///x",
        "https://:80/x", "ftp://h/x", "/local/path", "http://h/a b"}) {
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

}  // namespace
}  // namespace shardfs::remote
