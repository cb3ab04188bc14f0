// The index cache (src/indexref/index_cache.h): a refused bundle leaves
// nothing in the cache, partitions are resolved from a manifest's place
// (and a fetched manifest may not point at local files), and a manifest by
// URL is revalidated.
#include "src/indexref/index_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/indexref/index_ref.h"
#include "tests/unit/index/index_test_util.h"
#include "tests/unit/remote/remote_test_util.h"

namespace shardfs::indexref {
namespace {

using remote::After;
using remote::HttpRequest;
using remote::LoopbackServer;
using remote::Respond;
using ::shardfs::testing::DirMember;
using ::shardfs::testing::DirNames;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::TempDir;

class IndexCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::BuildAndOpen(dir_.path(), {DirMember("a"), FileMember("a/x", 10)}), nullptr);
    index_ = dir_ / "idx";
  }
  TempDir dir_;
  std::string index_;
};

TEST_F(IndexCacheTest, RefusesRelativeShardsAndLeavesNothing) {
  // BuildAndOpen stores its shard relative to the index's directory.
  auto tar = testing::Run({"tar", "-C", index_, "-cf", dir_ / "rel.tar", "."});
  ASSERT_TRUE(tar.ok()) << tar.describe;
  ::mkdir((dir_ / "cache").c_str(), 0700);
  IndexCacheOptions o;
  o.cache_dir = dir_ / "cache";
  IndexCache cache(o);
  Result<std::string> got = cache.Unpack(dir_ / "rel.tar");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("relative to the index's own directory"), std::string::npos)
      << got.status().message();
  const std::string top = dir_ / "cache/shardfs-index-v1";
  for (const std::string& entry : DirNames(top)) {
    if (entry == "shardfs-cache") continue;
    for (const std::string& n : DirNames(top + "/" + entry)) {
      EXPECT_TRUE(n == "lock") << "left in the cache: " << n;
    }
  }
}

TEST(PartitionResolverTest, LocalReferencesAndUrlManifests) {
  TempDir dir;
  IndexCacheOptions o;
  o.cache_dir = dir / "cache";
  auto resolve = MakePartitionResolver(std::make_shared<IndexCache>(o));
  auto p = resolve(dir.path() + "/", "part-0.idx");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, dir / "part-0.idx");
  p = resolve(dir.path() + "/", "/abs/part.idx");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "/abs/part.idx");
  // A manifest fetched by URL may not point at local files.
  p = resolve("https://example.invalid/ds/", "/etc");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("refused"), std::string::npos) << p.status().message();
  // Nothing was fetched or made for any of these.
  EXPECT_FALSE(std::filesystem::exists(dir / "cache"));
}

// A manifest by URL: fetched once, revalidated with If-None-Match (304: the
// same copy), and its relative partitions taken from the manifest's URL.
TEST(IndexCacheUrlTest, ManifestRevalidatedAndPartitionsTakenFromItsUrl) {
  remote::EnvGuard env;
  const std::string manifest = "shardfs-manifest 1\npart-0.tar\n";
  LoopbackServer server([&](int fd, const HttpRequest& req, int) {
    const bool head = req.method == "HEAD";
    if (req.target == "/ds/manifest") {
      if (req.Header("if-none-match") == "\"m1\"") {
        Respond(fd, "304 Not Modified", {"ETag: \"m1\"", "Content-Length: 0"}, "", {}, true);
      } else {
        Respond(fd, "200 OK", {"ETag: \"m1\""}, manifest, {}, head);
      }
    } else {
      Respond(fd, "404 Not Found", {}, "", {}, head);
    }
    return After::kKeep;
  });
  testing::TempDir dir;
  IndexCacheOptions o;
  o.cache_dir = dir / "cache";
  o.fetch.retry_budget = std::chrono::milliseconds(2000);
  auto cache = std::make_shared<IndexCache>(o);
  Result<std::string> first = cache->Fetch(server.Url("/ds/manifest"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->ends_with("/manifest")) << *first;
  EXPECT_EQ(testing::ReadFile(*first), manifest);
  Result<std::string> again = cache->Fetch(server.Url("/ds/manifest"));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *first);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[1].method, "HEAD");
  EXPECT_EQ(reqs[1].Header("if-none-match"), "\"m1\"");
  // The reader asks for partition "part-0.tar" from the copy's directory:
  // it is fetched from the manifest's URL (here a 404, named).
  const std::string base = first->substr(0, first->size() - std::string("manifest").size());
  auto resolve = MakePartitionResolver(cache);
  Result<std::string> part = resolve(base, "part-0.tar");
  ASSERT_FALSE(part.ok());
  EXPECT_NE(part.status().message().find(server.Url("/ds/part-0.tar")), std::string::npos)
      << part.status().message();
  reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[2].target, "/ds/part-0.tar");
}

}  // namespace
}  // namespace shardfs::indexref
