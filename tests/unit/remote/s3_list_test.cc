// src/remote/s3_list.h: ListObjectsV2 XML parsing, and ListS3 against an
// in-process loopback HTTP server. No network beyond 127.0.0.1.
#include "src/remote/s3_list.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "src/remote/aws_config.h"
#include "src/remote/http_client.h"
#include "src/remote/request_stats.h"
#include "tests/unit/remote/remote_test_util.h"

namespace shardfs::remote {
namespace {

using ::testing::HasSubstr;

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
  EXPECT_FALSE(
      ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key><Size>x</Size></Contents>"
                         "</ListBucketResult>")
          .ok());
  EXPECT_FALSE(
      ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
          .ok());
}

// ListS3 against the loopback server: pagination and its guards.

class S3ListTest : public ::testing::Test {
 protected:
  EnvGuard env_;  // No CA or AWS variables leak in.
  RequestStats stats_;
};

TEST_F(S3ListTest, ListS3FollowsContinuationTokensWithSortedQueries) {
  LoopbackServer server([](int fd, const HttpRequest& req, int) {
    std::string body;
    if (req.target == "/bkt?list-type=2&prefix=d%2F") {
      body =
          "<ListBucketResult><IsTruncated>true</IsTruncated>"
          "<NextContinuationToken>t/1=</NextContinuationToken>"
          "<Contents><Key>d/b.tar</Key><ETag>&quot;e2&quot;</ETag><Size>20</Size></Contents>"
          "</ListBucketResult>";
    } else if (req.target == "/bkt?continuation-token=t%2F1%3D&list-type=2&prefix=d%2F") {
      body =
          "<ListBucketResult><IsTruncated>false</IsTruncated>"
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

TEST_F(S3ListTest, ListS3StopsAtATokenSentBefore) {
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

TEST_F(S3ListTest, ListS3StopsAfterMaxPages) {
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

// The listing's sizes are read with base's ParseDecimal, which takes every
// 64-bit value: 20 digits included.
TEST(DecimalCallersTest, S3ListingSizesUpTo2To64Minus1) {
  auto p = ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551615</Size></Contents>"
      "<Contents><Key>b</Key><Size>10000000000000000000</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].size, UINT64_MAX);
  EXPECT_EQ(p->objects[1].size, 10000000000000000000u);
  auto over = ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "S3 listing: object a has no valid <Size>");
}

}  // namespace
}  // namespace shardfs::remote
