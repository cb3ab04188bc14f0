// base/open_file.h: opening regular files only, and paths confined beneath
// their directory through no symlink.
#include "base/open_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/fd.h"
#include "base/io.h"
#include "base/status.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using ::testing::HasSubstr;

// What a path an index names may be: a regular file, opened; anything else
// refused without being opened (a FIFO with no writer would block an open
// for ever, so a test that hangs here has failed). Confined: beneath its
// directory, through no symlink.
TEST(OpenFileTest, OpensRegularFilesOnlyAndNothingElse) {
  testing::TempDir dir;
  const std::string file = dir / "a.tar";
  std::ofstream(file) << "bytes";
  struct stat st;
  Result<UniqueFd> fd = OpenRegularFile(file, &st);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  EXPECT_EQ(st.st_size, 5);
  char buf[5];
  EXPECT_TRUE(PreadExact(fd->get(), buf, 5, 0).ok());
  EXPECT_EQ(fcntl(fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  Result<UniqueFd> fifo = OpenRegularFile(dir / "fifo", &st);
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(fifo.status().message(), HasSubstr("fifo: is a FIFO, expected a regular file"));
  EXPECT_THAT(OpenRegularFile("/dev/null", &st).status().message(),
              HasSubstr("is a character device"));
  EXPECT_THAT(OpenRegularFile(dir.path(), &st).status().message(), HasSubstr("is a directory"));
  EXPECT_EQ(OpenRegularFile(dir / "missing", &st).status().sys_errno(), ENOENT);
  // A symlink is followed unconfined, to what it names: a FIFO stays refused.
  std::filesystem::create_symlink(dir / "fifo", dir / "to-fifo");
  EXPECT_THAT(OpenRegularFile(dir / "to-fifo", &st).status().message(), HasSubstr("is a FIFO"));
  std::filesystem::create_symlink(file, dir / "to-file");
  EXPECT_TRUE(OpenRegularFile(dir / "to-file", &st).ok());
}

TEST(OpenFileTest, ConfinedPathsStayBeneathTheirDirectoryThroughNoSymlink) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir / "idx/shards");
  std::filesystem::create_directories(dir / "elsewhere");
  std::ofstream(dir / "idx/shards/a.tar") << "a";
  std::ofstream(dir / "elsewhere/secret") << "s";
  std::filesystem::create_symlink(dir / "elsewhere/secret", dir / "idx/shards/link.tar");
  std::filesystem::create_directory_symlink(dir / "elsewhere", dir / "idx/dirlink");
  OpenFileOptions confined;
  confined.beneath = dir / "idx";
  struct stat st;
  EXPECT_TRUE(OpenRegularFile("shards/a.tar", &st, confined).ok());
  for (const char* bad : {"shards/link.tar", "dirlink/secret", "../elsewhere/secret",
                          "shards/../../elsewhere/secret"}) {
    Result<UniqueFd> fd = OpenRegularFile(bad, &st, confined);
    ASSERT_FALSE(fd.ok()) << bad;
    EXPECT_EQ(fd.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_THAT(fd.status().message(), HasSubstr("symbolic link or out of")) << bad;
  }
  EXPECT_FALSE(OpenRegularFile(dir / "elsewhere/secret", &st, confined).ok());  // Absolute.
}

}  // namespace
}  // namespace shardfs
