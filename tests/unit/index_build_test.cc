// tools/index_build.h: the index does not depend on the number of jobs; a
// later shard wins a path; a bad shard fails the build and publishes nothing.
#include "tools/index_build.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/schema.h"
#include "tests/unit/test_util.h"

namespace shardfs::tools {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

void Tar(const std::string& src, const std::string& out, const std::vector<std::string>& names) {
  std::vector<std::string> argv = {"tar", "--format=posix", "-C", src, "-cf", out};
  argv.insert(argv.end(), names.begin(), names.end());
  CommandResult r = testing::Run(argv);
  ASSERT_TRUE(r.ok()) << r.describe;
}

void MkDirs(const std::string& path) { fs::create_directories(path); }

std::vector<std::pair<std::string, std::string>> AllKeyValues(const std::string& index) {
  rocksdb::Options o;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, index, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  EXPECT_TRUE(it->status().ok());
  return out;
}

std::string Printable(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                   : fmt::format("\\x{:02x}", c);
  }
  return out;
}

TEST(IndexBuildTest, SameIndexWhateverTheNumberOfJobs) {
  TempDir dir;
  const std::string src = dir / "src";
  testing::BuildSourceTree(src, testing::TreeFlavor::kFull);
  // Seven shards over overlapping parts of the tree: whole directories in
  // some, single files of the same directories in others.
  const std::vector<std::vector<std::string>> parts = {
      {"dir", "hello.txt"},      {"odd"},
      {"big.bin", "deep"},       {"hard", "link-rel"},
      {"dir/sub", "p256"},       {"dangling", "exec.sh", "ro.bin"},
      {"hello.txt", "odd/-dash"}};
  MkDirs(dir / "shards");
  std::vector<std::string> inputs;
  for (size_t i = 0; i < parts.size(); ++i) {
    inputs.push_back(dir / fmt::format("shards/part-{}.tar", i));
    Tar(src, inputs.back(), parts[i]);
  }
  std::vector<std::vector<std::pair<std::string, std::string>>> dumps;
  std::vector<std::string> build_options;
  for (int jobs : {1, 4, 3}) {
    IndexBuildOptions o;
    o.inputs = {dir / "shards"};  // A directory: its *.tar in name order.
    o.out = dir / fmt::format("idx-j{}", jobs);
    o.jobs = jobs;
    o.quiet = true;
    Result<IndexBuildReport> r = BuildIndex(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->shards, parts.size());
    auto kvs = AllKeyValues(o.out);
    ASSERT_FALSE(kvs.empty());
    // Every key and value is the same whatever the number of jobs,
    // build_options included.
    const std::string bo_key = index::EncodeMetaKey(index::kMetaBuildOptions);
    for (auto it = kvs.begin(); it != kvs.end(); ++it) {
      if (it->first == bo_key) build_options.push_back(it->second);
    }
    dumps.push_back(std::move(kvs));
  }
  ASSERT_EQ(build_options.size(), 3u);
  EXPECT_THAT(build_options[0], Not(HasSubstr("jobs")));
  for (size_t d = 1; d < dumps.size(); ++d) {
    ASSERT_EQ(dumps[d].size(), dumps[0].size());
    for (size_t i = 0; i < dumps[0].size(); ++i) {
      ASSERT_EQ(Printable(dumps[d][i].first), Printable(dumps[0][i].first)) << "key " << i;
      EXPECT_EQ(dumps[d][i].second, dumps[0][i].second)
          << "value of " << Printable(dumps[0][i].first);
    }
  }
  // And the index holds every path of the source parts.
  auto reader = index::IndexReader::Open(dir / "idx-j4");
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  for (const char* p : {"dir/sub/leaf.txt", "odd/new\nline", "hard/link.bin", "big.bin",
                        "dir/link-up", "odd/bad\xff\xfe.bin"}) {
    index::EntryRecord rec;
    index::RecordHolder holder;
    EXPECT_TRUE((*reader)->LookupPath(p, &rec, &holder).ok()) << p;
  }
}

TEST(IndexBuildTest, LaterShardWinsAPath) {
  TempDir dir;
  for (const char* s : {"one", "two"}) MkDirs(dir / fmt::format("{}/common", s));
  testing::WriteFile(dir / "one/dup.txt", "from the first shard\n");
  testing::WriteFile(dir / "one/common/a", "a");
  testing::WriteFile(dir / "two/dup.txt", "second shard's version, longer\n");
  testing::WriteFile(dir / "two/common/b", "b");
  Tar(dir / "one", dir / "1.tar", {"dup.txt", "common"});
  Tar(dir / "two", dir / "2.tar", {"dup.txt", "common"});

  IndexBuildOptions o;
  o.inputs = {dir / "1.tar", dir / "2.tar"};
  o.out = dir / "idx";
  o.jobs = 2;
  o.quiet = true;
  Result<IndexBuildReport> r = BuildIndex(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GE(r->stats.replaced, 1u);

  auto reader = index::IndexReader::Open(o.out);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  index::EntryRecord rec;
  index::RecordHolder holder;
  ASSERT_TRUE((*reader)->LookupPath("dup.txt", &rec, &holder).ok());
  EXPECT_EQ(rec.shard.value, 1u);
  const std::string want = testing::ReadFile(dir / "two/dup.txt");
  ASSERT_EQ(rec.size, want.size());
  const std::string shard = testing::ReadFile((*reader)->ShardPath(rec.shard));
  EXPECT_EQ(shard.substr(rec.offset, rec.size), want);
  // Directories merge: both shards' entries are there.
  EXPECT_TRUE((*reader)->LookupPath("common/a", &rec, &holder).ok());
  EXPECT_TRUE((*reader)->LookupPath("common/b", &rec, &holder).ok());

  // Reversed order, reversed winner.
  o.inputs = {dir / "2.tar", dir / "1.tar"};
  o.out = dir / "idx-rev";
  ASSERT_TRUE(BuildIndex(o).ok());
  auto rev = index::IndexReader::Open(o.out);
  ASSERT_TRUE(rev.ok());
  index::RecordHolder rev_holder;  // Pins blocks of `rev`: must not outlive it.
  ASSERT_TRUE((*rev)->LookupPath("dup.txt", &rec, &rev_holder).ok());
  EXPECT_EQ(rec.size, testing::ReadFile(dir / "one/dup.txt").size());
  EXPECT_EQ((*rev)->ShardPath(rec.shard), (*reader)->ShardPath(index::ShardId{0}));
}

TEST(IndexBuildTest, ABadShardFailsTheBuildAndPublishesNothing) {
  TempDir dir;
  MkDirs(dir / "src");
  testing::WriteFile(dir / "src/f", "content");
  Tar(dir / "src", dir / "a.tar", {"f"});
  Tar(dir / "src", dir / "c.tar", {"f"});
  testing::WriteFile(dir / "b.tar", testing::PseudoRandomBytes(3000, 21));
  for (int jobs : {1, 3}) {
    IndexBuildOptions o;
    o.inputs = {dir / "a.tar", dir / "b.tar", dir / "c.tar"};
    o.out = dir / "idx";
    o.jobs = jobs;
    o.quiet = true;
    Result<IndexBuildReport> r = BuildIndex(o);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(dir / "b.tar"));
    EXPECT_FALSE(fs::exists(dir / "idx"));
  }
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find("idx"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace shardfs::tools
