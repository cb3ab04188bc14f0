// tools/builder/index_build.h: the index does not depend on the number of jobs; a
// later shard wins a path; a bad shard (a FIFO too) fails the build and
// publishes nothing.
#include "tools/builder/index_build.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/schema.h"
#include "tests/unit/test_util.h"

namespace shardfs::builder {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
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

TEST(ShardPartTest, ParsesKOverN) {
  ShardPart p;
  ASSERT_TRUE(ParseShardPart("0/1", &p).ok());
  EXPECT_EQ(p.index, 0u);
  EXPECT_EQ(p.count, 1u);
  ASSERT_TRUE(ParseShardPart("3/4", &p).ok());
  EXPECT_EQ(p.index, 3u);
  EXPECT_EQ(p.count, 4u);
  ASSERT_TRUE(ParseShardPart("007/010", &p).ok());
  EXPECT_EQ(p.index, 7u);
  EXPECT_EQ(p.count, 10u);
}

TEST(ShardPartTest, RefusesWhatIsNotKBelowN) {
  ShardPart p;
  for (const char* bad : {"", "3", "4/4", "5/4", "0/0", "-1/4", "1/-4", "a/4", "1/b", " 1/4",
                          "1 /4", "1/4/2", "1/", "99999999999999999999/4", "0/4294967297"}) {
    Status s = ParseShardPart(bad, &p);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(), HasSubstr(fmt::format("--part {}:", bad))) << bad;
  }
  // What `--part $UNSET_VARIABLE/4` leaves: said in so many words.
  EXPECT_THAT(ParseShardPart("/4", &p).message(), HasSubstr("no part number"));
  EXPECT_THAT(ParseShardPart("4/4", &p).message(), HasSubstr("0 to 3"));
}

TEST(ShardPartTest, PartsCoverTheListOnceInOrder) {
  for (uint64_t n : {0, 1, 2, 3, 7, 12, 13, 100}) {
    for (uint64_t count : {1, 2, 3, 4, 5, 8, 16, 200}) {
      uint64_t next = 0, smallest = UINT64_MAX, largest = 0;
      for (uint64_t k = 0; k < count; ++k) {
        const auto [first, last] = ShardPartRange(n, ShardPart{k, count});
        EXPECT_EQ(first, next) << k << "/" << count << " of " << n;
        EXPECT_LE(first, last);
        smallest = std::min(smallest, last - first);
        largest = std::max(largest, last - first);
        next = last;
      }
      EXPECT_EQ(next, n) << count;
      EXPECT_LE(largest - smallest, 1u) << count << " of " << n;
    }
  }
  EXPECT_EQ(ShardPartRange(12, ShardPart{1, 4}), std::make_pair(uint64_t{3}, uint64_t{6}));
  // No overflow at the top of the range: floor(k*n/N) exactly.
  const uint64_t big = kMaxShardParts;
  EXPECT_EQ(ShardPartRange(UINT64_MAX, ShardPart{big - 1, big}),
            std::make_pair(UINT64_MAX - UINT64_MAX / big - 1, UINT64_MAX));
  EXPECT_EQ(ShardPartRange(big + 1, ShardPart{big - 1, big}), std::make_pair(big - 1, big + 1));
}

TEST(IndexBuildTest, APartHoldsItsShardsAndSaysWhichPartItIs) {
  TempDir dir;
  MkDirs(dir / "src");
  MkDirs(dir / "shards");
  std::vector<std::string> names;
  for (int i = 0; i < 5; ++i) {
    names.push_back(fmt::format("f{}", i));
    testing::WriteFile(dir / ("src/" + names.back()), fmt::format("shard {}\n", i));
    Tar(dir / "src", dir / fmt::format("shards/s{}.tar", i), {names.back()});
  }
  // 5 shards in 3 parts: [0,1) [1,3) [3,5).
  const std::vector<std::vector<std::string>> want = {{"f0"}, {"f1", "f2"}, {"f3", "f4"}};
  for (uint64_t k = 0; k < 3; ++k) {
    IndexBuildOptions o;
    o.inputs = {dir / "shards"};  // A directory: expanded in name order.
    o.out = dir / fmt::format("part-{}", k);
    o.quiet = true;
    o.part = ShardPart{k, 3};
    Result<IndexBuildReport> r = BuildIndex(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->listed_shards, 5u);
    EXPECT_EQ(r->shards, want[k].size());
    auto reader = index::IndexReader::Open(o.out);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_EQ((*reader)->Meta(index::kMetaPartition), fmt::format("{}/3", k));
    EXPECT_EQ((*reader)->MetaNumber(index::kMetaPartitionShards), 5u);
    ASSERT_EQ((*reader)->shards().size(), want[k].size());
    for (size_t i = 0; i < want[k].size(); ++i) {
      index::EntryRecord rec;
      index::RecordHolder holder;
      ASSERT_TRUE((*reader)->LookupPath(want[k][i], &rec, &holder).ok()) << want[k][i];
      EXPECT_EQ(rec.shard.value, i);
      const uint64_t first = ShardPartRange(5, o.part).first;
      EXPECT_THAT((*reader)->ShardPath(rec.shard), HasSubstr(fmt::format("s{}.tar", first + i)));
    }
  }
  // Without --part: no partition keys.
  IndexBuildOptions whole;
  whole.inputs = {dir / "shards"};
  whole.out = dir / "whole";
  whole.quiet = true;
  ASSERT_TRUE(BuildIndex(whole).ok());
  auto reader = index::IndexReader::Open(whole.out);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Meta(index::kMetaPartition), "");
  EXPECT_EQ((*reader)->Meta(index::kMetaPartitionShards), "");
}

TEST(IndexBuildTest, AnEmptyPartPublishesAnEmptyTree) {
  TempDir dir;
  MkDirs(dir / "src");
  testing::WriteFile(dir / "src/f", "content");
  Tar(dir / "src", dir / "a.tar", {"f"});
  IndexBuildOptions o;
  o.inputs = {dir / "a.tar"};
  o.out = dir / "part-0";
  o.quiet = true;
  o.part = ShardPart{0, 2};  // 1 shard in 2 parts: [0,0) and [0,1).
  Result<IndexBuildReport> r = BuildIndex(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->shards, 0u);
  auto reader = index::IndexReader::Open(o.out);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ((*reader)->Meta(index::kMetaPartition), "0/2");
  EXPECT_EQ((*reader)->MetaNumber(index::kMetaPartitionShards), 1u);
  EXPECT_TRUE((*reader)->shards().empty());
  index::EntryRecord rec;
  index::RecordHolder holder;
  EXPECT_FALSE((*reader)->LookupPath("f", &rec, &holder).ok());
}

// A FIFO given as a shard fails the build (ScanTar refuses it without
// blocking: tests/unit/archive/tar_scanner_special_test.cc) and nothing is
// published.
TEST(TarScannerSpecialTest, BuildIndexRefusesAFifoAndPublishesNothing) {
  TempDir dir;
  const std::string fifo = dir / "pipe.tar";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  IndexBuildOptions o;
  o.inputs = {fifo};
  o.out = dir / "idx";
  o.quiet = true;
  std::optional<Status> s = testing::WithDeadline([o] {
    Result<IndexBuildReport> r = BuildIndex(o);
    return r.ok() ? Status::Ok() : r.status();
  });
  ASSERT_TRUE(s.has_value()) << "BuildIndex blocked on a FIFO";
  EXPECT_EQ(s->code(), Status::Code::kInvalidArgument) << s->message();
  EXPECT_THAT(s->message(), AllOf(HasSubstr(fifo), HasSubstr("is a FIFO")));
  EXPECT_EQ(shardfs::testing::WalkTree(dir.path()), std::vector<std::string>{"pipe.tar"});
}

}  // namespace
}  // namespace shardfs::builder
