// Network storage detection (base/storage.h), the volume's choice of a
// node-local cache (src/reader/storage_plan.h) and its copy of an index
// directory (src/reader/index_copy.h).
#include "base/storage.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "src/reader/index_copy.h"
#include "src/reader/storage_plan.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

namespace fs = std::filesystem;
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

TEST(StoragePlanTest, TheFirstUsableRootIsMadeWithMode0700) {
  TempDir dir;
  // Not writable by this user: a file where a directory should be.
  std::ofstream(dir / "file") << "x";
  Result<std::string> root = reader::PickCacheRoot(
      std::vector<std::string>{dir / "file/sub/shardfs", dir / "home/.cache/shardfs"});
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, dir / "home/.cache/shardfs");
  struct stat st {};
  ASSERT_EQ(::stat(root->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((dir / "home").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  Result<std::string> none = reader::PickCacheRoot(std::vector<std::string>{dir / "file/sub"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(dir / "file/sub"), std::string::npos);
  EXPECT_GT(reader::AutoCacheSize(dir.path(), uint64_t{1} << 62), 0u);
  EXPECT_LE(reader::AutoCacheSize(dir.path(), reader::kMinAutoCache), reader::kMinAutoCache);
}

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
  expect_refused(reader::CopyListedFile(dir, sst, to), Status::Code::kIoError,
                 "000008.sst: changed since it was checked: another file");
  // The same file, its ctime moved (a chmod; a write with its mtime set
  // back looks the same). The ctime moves with the clock's tick: chmod
  // again until it has.
  const reader::ListedFile current = listed("CURRENT");
  for (int i = 0; i < 1000 && listed("CURRENT").stamp == current.stamp; ++i) {
    ASSERT_EQ(::chmod((dir + "/CURRENT").c_str(), i % 2 ? 0644 : 0600), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  expect_refused(reader::CopyListedFile(dir, current, to), Status::Code::kIoError,
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
