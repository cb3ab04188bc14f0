// src/reader/shard_files.h on real shards: transient open failures are retried on
// the next Get, bad shards heal after the back-off, a FIFO is refused
// without blocking, and eviction never closes a held descriptor.
#include "src/reader/shard_files.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::TempDir;
using ::testing::HasSubstr;

class ShardFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string src = dir_ / "src";
    fs::create_directories(src);
    std::vector<reader_testing::TestShard> written;
    for (int i = 0; i < 2; ++i) {
      std::string name = "f" + std::to_string(i);
      shardfs::testing::WriteFile(src + "/" + name,
                                  shardfs::testing::PseudoRandomBytes(5000 + i, 70 + i));
      shards_.push_back(dir_ / ("s" + std::to_string(i) + ".tar"));
      written.push_back(reader_testing::WriteShard(src, shards_.back(), {name}));
    }
    reader_testing::IndexShards(written, dir_ / "idx");
    auto r = index::IndexReader::Open(dir_ / "idx");
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (uint32_t i = 0; i < shards_.size(); ++i) {
      cache_shards_.push_back({(*r)->ShardPath(index::ShardId{i}), (*r)->shards()[i]});
    }
  }

  TempDir dir_;
  std::vector<std::string> shards_;
  std::vector<ShardFiles::Shard> cache_shards_;
};

// The lowest descriptor number free now: a limit of it leaves none.
int LowestFreeFd() {
  int fd = ::dup(0);
  ::close(fd);
  return fd;
}

TEST_F(ShardFilesTest, TransientOpenFailureIsRetriedOnTheNextGet) {
  ShardFiles cache(cache_shards_, {});
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(LowestFreeFd());
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  Result<ShardHandle> h = cache.Get(index::ShardId{0});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().sys_errno(), EMFILE) << h.status().message();
  // Not marked bad: the very next Get opens it.
  Result<ShardHandle> again = cache.Get(index::ShardId{0});
  EXPECT_TRUE(again.ok()) << again.status().message();
}

TEST_F(ShardFilesTest, ABadShardIsCheckedAgainAfterTheBackOffAndHeals) {
  ShardFiles cache(cache_shards_, {});
  ASSERT_EQ(::rename(shards_[1].c_str(), (shards_[1] + ".away").c_str()), 0);
  Result<ShardHandle> h = cache.Get(index::ShardId{1});
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr(shards_[1]));
  ASSERT_EQ(::rename((shards_[1] + ".away").c_str(), shards_[1].c_str()), 0);
  // Within the back-off the verdict stands (no open per read of a bad shard).
  EXPECT_FALSE(cache.Get(index::ShardId{1}).ok());
  std::this_thread::sleep_for(ShardFiles::kFirstRecheck + std::chrono::milliseconds(100));
  h = cache.Get(index::ShardId{1});
  EXPECT_TRUE(h.ok()) << h.status().message();
  // The other shard was never affected.
  EXPECT_TRUE(cache.Get(index::ShardId{0}).ok());
}

TEST_F(ShardFilesTest, AShardThatDiffersStaysRefusedWhileItDiffers) {
  ShardFiles cache(cache_shards_, {});
  uint64_t size = fs::file_size(shards_[0]);
  shardfs::testing::WriteFile(shards_[0], shardfs::testing::PseudoRandomBytes(size, 99));
  Result<ShardHandle> h = cache.Get(index::ShardId{0});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kCorruption) << h.status().message();
  std::this_thread::sleep_for(ShardFiles::kFirstRecheck + std::chrono::milliseconds(100));
  h = cache.Get(index::ShardId{0});
  EXPECT_EQ(h.status().code(), Status::Code::kCorruption) << h.status().message();
}

TEST_F(ShardFilesTest, AFifoWhereAShardShouldBeIsRefusedWithoutBlocking) {
  ShardFiles cache(cache_shards_, {});
  ASSERT_EQ(::unlink(shards_[0].c_str()), 0);
  ASSERT_EQ(::mkfifo(shards_[0].c_str(), 0644), 0);
  // A blocking open would wait here for a writer forever.
  Result<ShardHandle> h = cache.Get(index::ShardId{0});
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr("FIFO"));
  EXPECT_THAT(h.status().message(), HasSubstr(shards_[0]));
}

TEST_F(ShardFilesTest, EvictionNeverClosesAHeldDescriptor) {
  ShardFiles cache(cache_shards_, {.max_open = 1});
  Result<ShardHandle> first = cache.Get(index::ShardId{0});
  ASSERT_TRUE(first.ok());
  Result<ShardHandle> second = cache.Get(index::ShardId{1});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(cache.open_count(), 1u);
  struct stat st;
  EXPECT_EQ(::fstat((*first)->fd(), &st), 0);  // Still open: we hold it.
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), fs::file_size(shards_[0]));
  int fd = (*first)->fd();
  first = Status::NotFound("let go");
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // Closed once let go.
}

TEST_F(ShardFilesTest, AnIdOutOfRangeIsCorruption) {
  ShardFiles cache(cache_shards_, {});
  EXPECT_EQ(cache.Get(index::ShardId{7}).status().code(), Status::Code::kCorruption);
}

// A slice shard (a compressed tar inside a shard) is checked as its whole
// file and reads its range: positions from its base, nothing past its length.
TEST_F(ShardFilesTest, ASliceReadsItsRangeOfTheCheckedFile) {
  std::vector<ShardFiles::Shard> shards = cache_shards_;
  ShardFiles::Shard slice = shards[0];
  slice.meta.flags |= index::kShardSlice;
  slice.meta.set_codec(index::Codec::kGzip);
  slice.meta.base = 512;
  slice.meta.length = 1000;
  shards.push_back(slice);
  ShardFiles cache(shards, {});
  Result<ShardHandle> h = cache.Get(index::ShardId{2});
  ASSERT_TRUE(h.ok()) << h.status().message();
  const std::string whole = shardfs::testing::ReadFile(shards_[0]);
  std::string buf(100, '\0');
  ASSERT_TRUE((*h)->ReadAt(buf.data(), buf.size(), 900).ok());
  EXPECT_EQ(buf, whole.substr(512 + 900, 100));
  EXPECT_EQ((*h)->base(), 512u);
  Status past = (*h)->ReadAt(buf.data(), buf.size(), 901);
  EXPECT_EQ(past.code(), Status::Code::kCorruption) << past.message();
  // The file's check applies: a file of another size is refused.
  ShardFiles::Shard wrong = slice;
  wrong.meta.size += 1;
  wrong.meta.length = 10;
  ShardFiles bad({wrong}, {});
  EXPECT_EQ(bad.Get(index::ShardId{0}).status().code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace shardfs::reader
