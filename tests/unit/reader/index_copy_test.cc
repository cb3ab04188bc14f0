// The volume's node-local copy of an index directory
// (src/reader/index_copy.h).
#include "src/reader/index_copy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::TempDir;

class IndexCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "idx");
    ASSERT_EQ(::mkdir((dir_ / "cache").c_str(), 0700), 0);
    Write("CURRENT", "MANIFEST-000005\n");
    Write("000008.sst", std::string(5000, 's'));
    Write("LOG", "not copied");
    Write("LOCK", "");
  }
  void Write(const std::string& name, const std::string& data) {
    std::ofstream(dir_ / ("idx/" + name), std::ios::binary | std::ios::trunc) << data;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  TempDir dir_;
};

TEST_F(IndexCopyTest, CopiedOnceReusedWhileUnchangedAndCopiedAgainAfterAChange) {
  auto first = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(first->bytes, 5016u);
  EXPECT_EQ(Read(first->path + "/000008.sst"), std::string(5000, 's'));
  EXPECT_FALSE(fs::exists(first->path + "/LOG"));
  EXPECT_FALSE(fs::exists(first->path + "/LOCK"));
  auto again = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(again->path, first->path);
  // A view create writes a new table and switches CURRENT.
  Write("000011.sst", "new table");
  Write("CURRENT", "MANIFEST-000012\n");
  auto changed = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(changed->reused);
  EXPECT_EQ(Read(changed->path + "/CURRENT"), "MANIFEST-000012\n");
  EXPECT_EQ(Read(changed->path + "/000011.sst"), "new table");
  // CURRENT replaced by a rename, same size, maybe the same mtime tick.
  std::ofstream(dir_ / "idx/CURRENT.tmp") << "MANIFEST-000013\n";
  ASSERT_EQ(::rename((dir_ / "idx/CURRENT.tmp").c_str(), (dir_ / "idx/CURRENT").c_str()), 0);
  auto renamed = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_TRUE(renamed.ok());
  EXPECT_FALSE(renamed->reused);
  EXPECT_EQ(Read(renamed->path + "/CURRENT"), "MANIFEST-000013\n");
  // Only the copy and its lock beside it: no temporary directory left.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "cache/shardfs-index-copies-v1")) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2);
}

TEST_F(IndexCopyTest, RefusedForAnUnsafeRootASpecialFileOrTooLargeAnIndex) {
  // Refused as a cache_dir is (src/reader/cache_dir.h): writable by others.
  ASSERT_EQ(::chmod((dir_ / "cache").c_str(), 0777), 0);
  auto open_root = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_FALSE(open_root.ok());
  EXPECT_NE(open_root.status().message().find("writable by"), std::string::npos)
      << open_root.status().message();
  ASSERT_EQ(::chmod((dir_ / "cache").c_str(), 0700), 0);
  auto too_large = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 100);
  ASSERT_FALSE(too_large.ok());
  EXPECT_NE(too_large.status().message().find("more than the 100 bytes"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir_ / "idx/000012.sst").c_str(), 0600), 0);
  auto fifo = reader::LocalIndexCopy(dir_ / "idx", dir_ / "cache", 1 << 20);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("000012.sst is not a regular file"), std::string::npos);
}

// Each file is copied from the descriptor that was held to the listing: a
// file swapped between the listing and the copy is refused, and nothing is
// written in its place.
TEST_F(IndexCopyTest, AFileSwappedAfterTheListingIsNotCopied) {
  const std::string dir = dir_ / "idx";
  const std::string to = dir_ / "copied";
  auto listed = [&](const std::string& name) {
    struct stat st {};
    EXPECT_EQ(::lstat((dir + "/" + name).c_str(), &st), 0) << name;
    return reader::ListedFile{name, FileStamp::Of(st)};
  };
  auto expect_refused = [&](const Status& s, Status::Code code, const std::string& why) {
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(to));
  };
  // Another file of the same size and mtime renamed over it: what a check
  // of the size and mtime after the copy let through.
  const reader::ListedFile sst = listed("000008.sst");
  const std::string other = dir_ / "other";
  std::ofstream(other, std::ios::binary) << std::string(5000, 'o');
  const struct timespec times[2] = {{0, UTIME_OMIT},
                                    {static_cast<time_t>(sst.stamp.mtime_ns / 1000000000),
                                     static_cast<long>(sst.stamp.mtime_ns % 1000000000)}};
  ASSERT_EQ(::utimensat(AT_FDCWD, other.c_str(), times, 0), 0);
  ASSERT_EQ(::rename(other.c_str(), (dir + "/000008.sst").c_str()), 0);
  expect_refused(reader::CopyListedFile(dir, sst, to), Status::Code::kCorruption,
                 "000008.sst: changed since it was checked: another file");
  // The same file, its ctime moved (a chmod; a write with its mtime set
  // back looks the same). The ctime moves with the clock's tick: chmod
  // again until it has.
  const reader::ListedFile current = listed("CURRENT");
  for (int i = 0; i < 1000 && listed("CURRENT").stamp == current.stamp; ++i) {
    ASSERT_EQ(::chmod((dir + "/CURRENT").c_str(), i % 2 ? 0644 : 0600), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  expect_refused(reader::CopyListedFile(dir, current, to), Status::Code::kCorruption,
                 "CURRENT: changed since it was checked: ctime");
  // A symbolic link to a file outside, of the listed size and mtime.
  const reader::ListedFile relisted = listed("CURRENT");
  ASSERT_EQ(::rename((dir + "/CURRENT").c_str(), (dir_ / "away").c_str()), 0);
  ASSERT_EQ(::symlink((dir_ / "away").c_str(), (dir + "/CURRENT").c_str()), 0);
  expect_refused(reader::CopyListedFile(dir, relisted, to), Status::Code::kInvalidArgument,
                 "symbolic link");
  // A FIFO: refused, without blocking.
  ASSERT_EQ(::unlink((dir + "/CURRENT").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/CURRENT").c_str(), 0600), 0);
  expect_refused(reader::CopyListedFile(dir, relisted, to), Status::Code::kInvalidArgument, "FIFO");
  // The file as listed is copied.
  ASSERT_EQ(::unlink((dir + "/CURRENT").c_str()), 0);
  ASSERT_EQ(::rename((dir_ / "away").c_str(), (dir + "/CURRENT").c_str()), 0);
  Status copied = reader::CopyListedFile(dir, listed("CURRENT"), to);
  ASSERT_TRUE(copied.ok()) << copied.message();
  EXPECT_EQ(Read(to), "MANIFEST-000005\n");
}

}  // namespace
}  // namespace shardfs
