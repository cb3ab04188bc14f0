// Index bundles (src/archive/index_bundle.h) and the index cache's local side
// (src/indexref/index_cache.h): a bundle round-trips, every unsafe member is refused, and
// a refused bundle leaves nothing in the cache.
#include "src/archive/index_bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/fd.h"
#include "index/index_reader.h"
#include "src/indexref/index_cache.h"
#include "src/indexref/index_ref.h"
#include "tests/unit/remote_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::Python3;
using ::shardfs::testing::ReadFile;
using ::shardfs::testing::Run;
using ::shardfs::testing::TempDir;
using ::shardfs::testing::WriteFile;

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Writes a tar at `out` with Python's tarfile: `script` adds members to `t`.
void PythonTar(const std::string& out, const std::string& script) {
  auto r = Run({Python3(), "-c",
                "import io, sys, tarfile\n"
                "def add(t, name, data=b'x', kind=tarfile.REGTYPE, link=''):\n"
                "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link\n"
                "    i.size = len(data) if kind == tarfile.REGTYPE else 0\n"
                "    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)\n"
                "with tarfile.open(sys.argv[1], 'w') as t:\n" +
                    script,
                out});
  ASSERT_TRUE(r.ok()) << r.describe;
}

Status UnpackFile(const std::string& tar, const std::string& dir) {
  UniqueFd in(::open(tar.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(in.valid() && d.valid());
  BundleLimits limits;
  limits.max_bytes = 1 << 20;
  return UnpackIndexBundle(in.get(), d.get(), "B", limits);
}

class IndexBundleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::BuildAndOpen(dir_.path(), {DirMember("a"), FileMember("a/x", 10)}), nullptr);
    index_ = dir_ / "idx";
  }
  TempDir dir_;
  std::string index_;
};

TEST_F(IndexBundleTest, RoundTripIsDeterministicAndAnIndex) {
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "a.tar").ok());
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "b.tar").ok());
  EXPECT_EQ(ReadFile(dir_ / "a.tar"), ReadFile(dir_ / "b.tar"));
  EXPECT_FALSE(WriteIndexBundle(index_, dir_ / "a.tar").ok()) << "an existing file is kept";
  ::mkdir((dir_ / "out").c_str(), 0700);
  ASSERT_TRUE(UnpackFile(dir_ / "a.tar", dir_ / "out").ok());
  EXPECT_EQ(Names(dir_ / "out"), Names(index_));
  for (const std::string& n : Names(index_)) {
    EXPECT_EQ(ReadFile(dir_ / "out/" + n), ReadFile(index_ + "/" + n)) << n;
  }
  EXPECT_TRUE(index::IsShardfsIndex(dir_ / "out"));
  EXPECT_FALSE(WriteIndexBundle(dir_.path(), dir_ / "c.tar").ok()) << "not an index";
}

TEST_F(IndexBundleTest, GnuTarOfTheDirectoryIsAccepted) {
  auto r = testing::Run({"tar", "-C", index_, "-czf", dir_ / "gnu.tar.gz", "."});
  ASSERT_TRUE(r.ok()) << r.describe;
  ::mkdir((dir_ / "out").c_str(), 0700);
  ASSERT_TRUE(UnpackFile(dir_ / "gnu.tar.gz", dir_ / "out").ok());
  EXPECT_EQ(Names(dir_ / "out"), Names(index_));
}

TEST_F(IndexBundleTest, UnsafeMembersAreRefused) {
  struct Case {
    const char* script;
    const char* why;
  } cases[] = {
      {"    add(t, '../x')\n", "not a plain file name"},
      {"    add(t, 'a/b')\n", "not a plain file name"},
      {"    add(t, '/etc/x')\n", "not a plain file name"},
      {"    add(t, '..')\n", "not a plain file name"},
      {"    add(t, 'l', kind=tarfile.SYMTYPE, link='/etc/passwd')\n", "symbolic link"},
      {"    add(t, 'f')\n    add(t, 'h', kind=tarfile.LNKTYPE, link='f')\n", "hard link"},
      {"    add(t, 'd', kind=tarfile.DIRTYPE)\n", "a directory"},
      {"    add(t, 'p', kind=tarfile.FIFOTYPE)\n", "a FIFO"},
      {"    add(t, 'c', kind=tarfile.CHRTYPE)\n", "a device"},
      {"    add(t, 'f')\n    add(t, './f')\n", "appears twice"},
      {"    add(t, 'big', b'x' * (2 << 20))\n", "--max-index-size"},
      {"    pass\n", "no files"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string tar = dir_ / ("bad" + std::to_string(i) + ".tar");
    const std::string out = dir_ / ("out" + std::to_string(i++));
    PythonTar(tar, c.script);
    ::mkdir(out.c_str(), 0700);
    Status s = UnpackFile(tar, out);
    EXPECT_FALSE(s.ok()) << c.script;
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.script << ": " << s.message();
    EXPECT_NE(s.message().find("index bundle B"), std::string::npos) << s.message();
  }
  WriteFile(dir_ / "junk.tar", std::string(3000, 'j'));
  ::mkdir((dir_ / "junk").c_str(), 0700);
  EXPECT_FALSE(UnpackFile(dir_ / "junk.tar", dir_ / "junk").ok());
}

TEST_F(IndexBundleTest, CacheRefusesRelativeShardsAndLeavesNothing) {
  // BuildAndOpen stores its shard relative to the index's directory.
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "rel.tar").ok());
  ::mkdir((dir_ / "cache").c_str(), 0700);
  indexref::IndexCacheOptions o;
  o.cache_dir = dir_ / "cache";
  indexref::IndexCache cache(o);
  Result<std::string> got = cache.Unpack(dir_ / "rel.tar");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("relative to the index's own directory"), std::string::npos)
      << got.status().message();
  const std::string top = dir_ / "cache/shardfs-index-v1";
  for (const std::string& entry : Names(top)) {
    if (entry == "shardfs-cache") continue;
    for (const std::string& n : Names(top + "/" + entry)) {
      EXPECT_TRUE(n == "lock") << "left in the cache: " << n;
    }
  }
}

TEST(PartitionResolverTest, LocalReferencesAndUrlManifests) {
  TempDir dir;
  indexref::IndexCacheOptions o;
  o.cache_dir = dir / "cache";
  auto resolve = indexref::MakePartitionResolver(std::make_shared<indexref::IndexCache>(o));
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

}  // namespace
}  // namespace shardfs::archive

namespace shardfs::indexref {
namespace {

using remote::After;
using remote::HttpRequest;
using remote::LoopbackServer;
using remote::Respond;

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
