// src/archive/tar_scanner.h on shard paths that are not regular files: refused
// at once with a message naming the path and what it is, never blocking in
// open() (a FIFO without a writer would block forever).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "src/archive/tar_scanner.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using shardfs::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

Status ScanSpecial(const std::string& path) {
  ShardInfo info;
  return ScanTar(
      path, ScanOptions{}, [](ScannedMember&&) { return Status::Ok(); }, &info);
}

TEST(TarScannerSpecialTest, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir / "pipe.tar";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::optional<Status> s = shardfs::testing::WithDeadline([fifo] { return ScanSpecial(fifo); });
  ASSERT_TRUE(s.has_value()) << "ScanTar blocked on a FIFO";
  EXPECT_EQ(s->code(), Status::Code::kInvalidArgument) << s->message();
  EXPECT_THAT(s->message(), AllOf(HasSubstr(fifo), HasSubstr("is a FIFO")));
}

TEST(TarScannerSpecialTest, DevicesAndDirectoriesAreRefusedByName) {
  TempDir dir;
  Status s = ScanSpecial("/dev/null");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("/dev/null"), HasSubstr("is a character device")));
  s = ScanSpecial(dir.path());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_THAT(s.message(), AllOf(HasSubstr(dir.path()), HasSubstr("is a directory")));
}

}  // namespace
}  // namespace shardfs::archive
