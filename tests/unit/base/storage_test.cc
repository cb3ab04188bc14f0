// Network storage detection (base/storage.h): mountinfo lines, filesystems
// by magic number and FUSE subtype, storage modes.
#include "base/storage.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using shardfs::testing::TempDir;

constexpr char kMountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:44 / /data rw,relatime shared:20 - nfs4 srv:/export rw,vers=4.2\n"
    "41 22 0:52 / /mnt/remote rw,nosuid,nodev shared:21 - fuse.sshfs user@host:/data "
    "rw,user_id=0\n"
    "42 22 0:53 / /mnt/s3 rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0\n"
    "43 22 0:54 / /mnt/arch rw,nosuid,nodev - fuse.archivemount archivemount rw\n"
    "44 22 0:55 / /opt/x rw master:3 unbindable - fuse.rclone remote: rw\n";

TEST(StorageTest, MountinfoNamesTheFilesystemOfADevice) {
  std::string source;
  EXPECT_EQ(MountinfoFstype(kMountinfo, 0, 52, &source), "fuse.sshfs");
  EXPECT_EQ(source, "user@host:/data");
  EXPECT_EQ(MountinfoFstype(kMountinfo, 0, 53, &source), "fuse");
  EXPECT_EQ(source, "mountpoint-s3");
  // Optional fields of any number before the separator.
  EXPECT_EQ(MountinfoFstype(kMountinfo, 0, 55), "fuse.rclone");
  EXPECT_EQ(MountinfoFstype(kMountinfo, 8, 1), "ext4");
  EXPECT_EQ(MountinfoFstype(kMountinfo, 0, 99), "");
  EXPECT_EQ(MountinfoFstype("garbage\n\n1 2 3\n", 0, 52), "");
}

TEST(StorageTest, MountinfoLinesAndTheirEscapes) {
  MountinfoLine m;
  ASSERT_TRUE(ParseMountinfoLine(
      "25 1 0:22 /pod /sys/fs/cgroup/my\\040mem rw shared:9 - cgroup cgroup rw,memory", &m));
  EXPECT_EQ(m.major, 0u);
  EXPECT_EQ(m.minor, 22u);
  EXPECT_EQ(m.root, "/pod");
  EXPECT_EQ(UnescapeMountinfo(m.mountpoint), "/sys/fs/cgroup/my mem");
  EXPECT_EQ(m.fstype, "cgroup");
  EXPECT_EQ(m.super_options, "rw,memory");
  EXPECT_FALSE(ParseMountinfoLine("1 2 3", &m));
  // A backslash not followed by three octal digits stays.
  EXPECT_EQ(UnescapeMountinfo("a\\09b\\"), "a\\09b\\");
  EXPECT_EQ(UnescapeMountinfo("tab\\011nl\\012bs\\134"), "tab\tnl\nbs\\");
}

TEST(StorageTest, NetworkFilesystemsByMagicAndFuseSubtype) {
  bool network = false;
  EXPECT_EQ(FilesystemName(0x6969, &network), "nfs");
  EXPECT_TRUE(network);
  EXPECT_EQ(FilesystemName(0x0BD00BD0, &network), "lustre");
  EXPECT_TRUE(network);
  EXPECT_EQ(FilesystemName(0x00C36400, &network), "ceph");
  EXPECT_TRUE(network);
  EXPECT_EQ(FilesystemName(0xFE534D42, &network), "smb2");
  EXPECT_TRUE(network);
  EXPECT_EQ(FilesystemName(0xEF53, &network), "ext4");
  EXPECT_FALSE(network);
  EXPECT_EQ(FilesystemName(0x12345678, &network), "");
  EXPECT_FALSE(network);
  EXPECT_TRUE(IsNetworkFuseSubtype("sshfs"));
  EXPECT_TRUE(IsNetworkFuseSubtype("s3fs"));
  EXPECT_TRUE(IsNetworkFuseSubtype("mountpoint-s3"));
  EXPECT_FALSE(IsNetworkFuseSubtype("archivemount"));
  EXPECT_FALSE(IsNetworkFuseSubtype("shardfs"));
  EXPECT_FALSE(IsNetworkFuseSubtype(""));
}

TEST(StorageTest, ATemporaryDirectoryIsLocalAndAMissingPathAnError) {
  TempDir dir;
  Result<StorageInfo> info = DetectStorage(dir.path());
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_FALSE(info->network) << info->fstype;
  EXPECT_FALSE(info->fstype.empty());
  Result<StorageInfo> missing = DetectStorage(dir / "missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir / "missing"), std::string::npos);
}

TEST(StorageTest, StorageModes) {
  StorageMode m = StorageMode::kAuto;
  EXPECT_TRUE(ParseStorageMode("network", &m));
  EXPECT_EQ(m, StorageMode::kNetwork);
  EXPECT_TRUE(ParseStorageMode("local", &m));
  EXPECT_EQ(m, StorageMode::kLocal);
  EXPECT_TRUE(ParseStorageMode("auto", &m));
  EXPECT_EQ(m, StorageMode::kAuto);
  EXPECT_FALSE(ParseStorageMode("nfs", &m));
}

}  // namespace
}  // namespace shardfs
