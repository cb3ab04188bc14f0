// base/status.h: a fetch failure keeps its code and errno through context.
#include "base/status.h"

#include <gtest/gtest.h>

namespace shardfs {
namespace {

TEST(StatusTest, AFetchFailureKeepsItsCodeAndErrnoThroughContext) {
  Status s = Status::IoError("http://h/a.tar: gave up after 3 attempts").AsFetchFailure();
  EXPECT_TRUE(s.fetch_failed());
  Status wrapped = s.WithContext("shard a.tar");
  EXPECT_EQ(wrapped.code(), Status::Code::kIoError);
  EXPECT_TRUE(wrapped.fetch_failed());
  EXPECT_EQ(ToErrno(wrapped), EIO);
  EXPECT_FALSE(Status::IoError("pread").fetch_failed());
  EXPECT_FALSE(Status::Corruption("checksum").WithContext("x").fetch_failed());
  EXPECT_FALSE(Status::Ok().AsFetchFailure().fetch_failed());
}

}  // namespace
}  // namespace shardfs
