// base/io.h: whole reads naming where a file ends; and base/fd.h's UniqueFd
// (a header alone), closing once.
#include "base/io.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "base/fd.h"
#include "base/status.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using ::testing::HasSubstr;

TEST(PreadExactTest, ReadsWholeRangesAndNamesWhereAFileEnds) {
  testing::TempDir dir;
  const std::string path = dir / "f";
  testing::WriteFile(path, "0123456789");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  char buf[8] = {};
  ASSERT_TRUE(PreadExact(fd.get(), buf, 4, 3).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  Status s = PreadExact(fd.get(), buf, 8, 6);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("ends at byte 10, expected data up to byte 14"));
  EXPECT_EQ(PreadExact(-1, buf, 1, 0).code(), Status::Code::kIoError);
}

TEST(UniqueFdTest, ClosesOnceAndGivesUpOnRelease) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd a(raw);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // Closed by b.
  int kept = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  {
    UniqueFd c(kept);
    EXPECT_EQ(c.release(), kept);
  }
  EXPECT_NE(::fcntl(kept, F_GETFD), -1);  // Not closed.
  ::close(kept);
}

}  // namespace
}  // namespace shardfs
