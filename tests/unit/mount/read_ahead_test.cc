// src/mount/read_ahead.h on a fake mountinfo and a fake /sys/class/bdi: the
// FUSE mount's device found by its mountpoint, the window raised and never
// lowered, and an error naming the file when it cannot be written.
#include "src/mount/read_ahead.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/unit/test_util.h"

namespace shardfs::mount {
namespace {

using shardfs::testing::ReadFile;
using shardfs::testing::TempDir;
using shardfs::testing::WriteFile;

constexpr char kMountinfo[] =
    "22 1 253:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "36 22 0:40 / /mnt/data rw,nosuid,nodev - fuse.shardfs /x/index rw,user_id=0\n"
    "37 22 0:41 / /mnt/with\\040space rw - fuse.shardfs /y/index rw\n"
    "38 22 7:3 / /mnt/sq ro - squashfs /dev/loop3 ro\n"
    "39 36 0:42 / /mnt/data rw - fuse.shardfs /z/index rw,user_id=0\n";

TEST(ReadAheadTest, FindsTheNewestFuseMountAtAPath) {
  Result<std::string> dev = FindFuseMountDevice(kMountinfo, "/mnt/data");
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  EXPECT_EQ(*dev, "0:42");  // Mounted over the first one.
  dev = FindFuseMountDevice(kMountinfo, "/mnt/with space");
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  EXPECT_EQ(*dev, "0:41");
  EXPECT_EQ(FindFuseMountDevice(kMountinfo, "/mnt/sq").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(FindFuseMountDevice(kMountinfo, "/mnt").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(FindFuseMountDevice("", "/mnt/data").status().code(), Status::Code::kNotFound);
}

TEST(ReadAheadTest, RaisesTheWindowAndNeverLowersIt) {
  TempDir dir;
  const std::string mountinfo = dir / "mountinfo";
  WriteFile(mountinfo, kMountinfo);
  std::filesystem::create_directories(dir / "bdi/0:42");
  const std::string ra = dir / "bdi/0:42/read_ahead_kb";
  WriteFile(ra, "128\n");
  Result<uint64_t> kb = RaiseMountReadAhead("/mnt/data", 1024, mountinfo, dir / "bdi");
  ASSERT_TRUE(kb.ok()) << kb.status().message();
  EXPECT_EQ(*kb, 1024u);
  EXPECT_EQ(ReadFile(ra), "1024\n");
  WriteFile(ra, "4096\n");
  kb = RaiseMountReadAhead("/mnt/data", 1024, mountinfo, dir / "bdi");
  ASSERT_TRUE(kb.ok()) << kb.status().message();
  EXPECT_EQ(*kb, 4096u);
  EXPECT_EQ(ReadFile(ra), "4096\n");
}

TEST(ReadAheadTest, AnErrorNamesTheFile) {
  TempDir dir;
  const std::string mountinfo = dir / "mountinfo";
  WriteFile(mountinfo, kMountinfo);
  // No such device directory: the error names the file.
  Result<uint64_t> kb = RaiseMountReadAhead("/mnt/data", 1024, mountinfo, dir / "bdi");
  ASSERT_FALSE(kb.ok());
  EXPECT_NE(kb.status().message().find("bdi/0:42/read_ahead_kb"), std::string::npos)
      << kb.status().message();
  kb = RaiseMountReadAhead("/mnt/none", 1024, mountinfo, dir / "bdi");
  EXPECT_EQ(kb.status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace shardfs::mount
