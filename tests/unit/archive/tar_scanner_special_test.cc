// src/archive/tar_scanner.h and tools/builder/index_build.h on shard paths that are not
// regular files: refused at once with a message naming the path and what it
// is, never blocking in open() (a FIFO without a writer would block forever).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "src/archive/tar_scanner.h"
#include "tests/unit/test_util.h"
#include "tools/builder/index_build.h"

namespace shardfs::archive {
namespace {

using shardfs::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr auto kDeadline = std::chrono::seconds(20);

// Runs `fn` on a thread of its own and waits at most kDeadline for it: a
// regression that blocks fails the test instead of hanging the suite (the
// blocked thread is left behind; the process ends without it).
template <typename Fn>
std::optional<Status> WithDeadline(Fn fn) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> done = promise->get_future();
  std::thread([promise, fn] { promise->set_value(fn()); }).detach();
  if (done.wait_for(kDeadline) != std::future_status::ready) return std::nullopt;
  return done.get();
}

Status ScanSpecial(const std::string& path) {
  ShardInfo info;
  return ScanTar(
      path, ScanOptions{}, [](ScannedMember&&) { return Status::Ok(); }, &info);
}

TEST(TarScannerSpecialTest, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir / "pipe.tar";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::optional<Status> s = WithDeadline([fifo] { return ScanSpecial(fifo); });
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

TEST(TarScannerSpecialTest, BuildIndexRefusesAFifoAndPublishesNothing) {
  TempDir dir;
  const std::string fifo = dir / "pipe.tar";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  builder::IndexBuildOptions o;
  o.inputs = {fifo};
  o.out = dir / "idx";
  o.quiet = true;
  std::optional<Status> s = WithDeadline([o] {
    Result<builder::IndexBuildReport> r = builder::BuildIndex(o);
    return r.ok() ? Status::Ok() : r.status();
  });
  ASSERT_TRUE(s.has_value()) << "BuildIndex blocked on a FIFO";
  EXPECT_EQ(s->code(), Status::Code::kInvalidArgument) << s->message();
  EXPECT_THAT(s->message(), AllOf(HasSubstr(fifo), HasSubstr("is a FIFO")));
  EXPECT_EQ(shardfs::testing::WalkTree(dir.path()), std::vector<std::string>{"pipe.tar"});
}

}  // namespace
}  // namespace shardfs::archive
