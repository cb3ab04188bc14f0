// tools/pack/source_tree.h: what ScanTree lists (tree order, kinds, excludes,
// --from-list, --follow-symlinks) on trees made here, and HashFile against
// XXH3 of the bytes written.
#include "tools/pack/source_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/fd.h"
#include "tests/unit/test_util.h"

namespace shardfs::pack {
namespace {

using ::shardfs::testing::TempDir;
using ::shardfs::testing::WriteFile;

class ScanTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    for (const char* d : {"a", "a/b", "c", "skip"}) {
      ASSERT_EQ(::mkdir((src_ + "/" + d).c_str(), 0755), 0);
    }
    for (const char* f : {"a/x.jpg", "a/x.cls", "a/b/y.txt", "c/z.o", "c/keep.txt", "skip/w"}) {
      WriteFile(src_ + "/" + f, f);
    }
  }

  std::vector<std::string> Paths(const TreeScan& scan) {
    std::vector<std::string> out;
    for (const SourceEntry& e : scan.entries) out.push_back(e.path);
    return out;
  }

  Result<TreeScan> Scan(TreeScanOptions o = {}) { return ScanTree(src_, o); }

  TempDir dir_;
  std::string src_;
};

TEST_F(ScanTreeTest, ListsEveryEntryInTreeOrderRootFirst) {
  Result<TreeScan> scan = Scan();
  ASSERT_TRUE(scan.ok()) << scan.status().message();
  EXPECT_EQ(Paths(*scan),
            (std::vector<std::string>{"", "a", "a/b", "a/b/y.txt", "a/x.cls", "a/x.jpg", "c",
                                      "c/keep.txt", "c/z.o", "skip", "skip/w"}));
  EXPECT_EQ(scan->entries[0].kind, SourceKind::kDir);
  const SourceEntry& f = scan->entries[4];
  EXPECT_EQ(f.kind, SourceKind::kFile);
  EXPECT_EQ(f.size, 7u);
  EXPECT_EQ(f.mtime_ns, ::shardfs::testing::MtimeNs(::shardfs::testing::Lstat(src_ + "/a/x.cls")));
}

TEST_F(ScanTreeTest, ExcludesMatchNamesWithoutSlashAndPathsWithOne) {
  TreeScanOptions o;
  o.excludes = {"*.o", "skip", "a/b"};
  Result<TreeScan> scan = Scan(o);
  ASSERT_TRUE(scan.ok()) << scan.status().message();
  EXPECT_EQ(Paths(*scan),
            (std::vector<std::string>{"", "a", "a/x.cls", "a/x.jpg", "c", "c/keep.txt"}));
}

TEST_F(ScanTreeTest, FromListKeepsListedPathsAndTheDirectoriesAboveThem) {
  WriteFile(dir_ / "list", "a/b\nc/keep.txt\n\n");
  TreeScanOptions o;
  o.from_list = dir_ / "list";
  Result<TreeScan> scan = Scan(o);
  ASSERT_TRUE(scan.ok()) << scan.status().message();
  EXPECT_EQ(Paths(*scan),
            (std::vector<std::string>{"", "a", "a/b", "a/b/y.txt", "c", "c/keep.txt"}));

  WriteFile(dir_ / "list", "a/nothere\n");
  Result<TreeScan> missing = Scan(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("a/nothere: not found in"), std::string::npos)
      << missing.status().message();
}

TEST_F(ScanTreeTest, SymlinksStayUnlessFollowedAndFollowingStaysInside) {
  ASSERT_EQ(::symlink("../c", (src_ + "/a/toc").c_str()), 0);
  ASSERT_EQ(::symlink("/", (src_ + "/out").c_str()), 0);
  ASSERT_EQ(::symlink("..", (src_ + "/a/up").c_str()), 0);
  Result<TreeScan> plain = Scan();
  ASSERT_TRUE(plain.ok());
  auto find = [](const TreeScan& s, std::string_view p) {
    return std::find_if(s.entries.begin(), s.entries.end(),
                        [&](const SourceEntry& e) { return e.path == p; });
  };
  ASSERT_NE(find(*plain, "a/toc"), plain->entries.end());
  EXPECT_EQ(find(*plain, "a/toc")->kind, SourceKind::kSymlink);
  EXPECT_EQ(find(*plain, "a/toc")->link_target, "../c");
  EXPECT_EQ(find(*plain, "a/toc/z.o"), plain->entries.end());

  TreeScanOptions o;
  o.follow_symlinks = true;
  Result<TreeScan> followed = Scan(o);
  ASSERT_TRUE(followed.ok());
  ASSERT_NE(find(*followed, "a/toc/z.o"), followed->entries.end());
  EXPECT_EQ(find(*followed, "a/toc")->kind, SourceKind::kDir);
  EXPECT_EQ(find(*followed, "a/toc/z.o")->open_path(), "c/z.o");
  EXPECT_EQ(find(*followed, "out")->kind, SourceKind::kSymlink);
  EXPECT_EQ(find(*followed, "a/up")->kind, SourceKind::kSymlink);  // A loop.
  std::string warnings;
  for (const std::string& w : followed->warnings) warnings += w + "\n";
  EXPECT_NE(warnings.find("out: symlink kept: target / is outside the source"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("a/up: symlink kept: following it would loop"), std::string::npos)
      << warnings;
}

TEST_F(ScanTreeTest, SpecialFilesAreListedWithTheirKind) {
  ASSERT_EQ(::mkfifo((src_ + "/pipe").c_str(), 0644), 0);
  Result<TreeScan> scan = Scan();
  ASSERT_TRUE(scan.ok());
  auto it = std::find_if(scan->entries.begin(), scan->entries.end(),
                         [](const SourceEntry& e) { return e.path == "pipe"; });
  ASSERT_NE(it, scan->entries.end());
  EXPECT_EQ(it->kind, SourceKind::kSpecial);
  EXPECT_STREQ(it->special, "fifo");
}

TEST_F(ScanTreeTest, OpenBeneathRefusesToLeaveTheRoot) {
  ASSERT_EQ(::symlink("/etc/hostname", (src_ + "/escape").c_str()), 0);
  UniqueFd root(::open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  UniqueFd ok(OpenBeneath(root.get(), "a/x.jpg", O_RDONLY));
  EXPECT_TRUE(ok.valid());
  EXPECT_LT(OpenBeneath(root.get(), "escape", O_RDONLY), 0);
  EXPECT_LT(OpenBeneath(root.get(), "../src/a/x.jpg", O_RDONLY), 0);
}

TEST_F(ScanTreeTest, StatOpenFileGivesWhatFstatGivesButTheAccessTime) {
  ::shardfs::testing::WriteFile(dir_ / "f", std::string(5000, 'x'));
  UniqueFd fd(::open((dir_ / "f").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  struct stat want, got;
  ASSERT_EQ(::fstat(fd.get(), &want), 0);
  ASSERT_EQ(StatOpenFile(fd.get(), &got), 0);
  EXPECT_EQ(got.st_dev, want.st_dev);
  EXPECT_EQ(got.st_ino, want.st_ino);
  EXPECT_EQ(got.st_mode, want.st_mode);
  EXPECT_EQ(got.st_nlink, want.st_nlink);
  EXPECT_EQ(got.st_uid, want.st_uid);
  EXPECT_EQ(got.st_gid, want.st_gid);
  EXPECT_EQ(got.st_size, 5000);
  EXPECT_EQ(got.st_blocks, want.st_blocks);
  EXPECT_EQ(MtimeNs(got), MtimeNs(want));
  EXPECT_EQ(CtimeNs(got), CtimeNs(want));
  EXPECT_EQ(got.st_atim.tv_sec, 0);
  EXPECT_EQ(StatOpenFile(-1, &got), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST_F(ScanTreeTest, ReplacedSinceTellsAnotherInodeAndAsksOncePerDevice) {
  ::shardfs::testing::WriteFile(dir_ / "f", "abc");
  UniqueFd fd(::open((dir_ / "f").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  struct stat st;
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  SourceEntry e;
  e.dev = st.st_dev;
  e.ino = st.st_ino;
  e.ctime_ns = CtimeNs(st);
  FuseDevices fuse;
  EXPECT_FALSE(ReplacedSince(e, st, fd.get(), &fuse));
  e.ino = st.st_ino + 1;  // Not FUSE: another number is another file, whatever the ctime.
  EXPECT_TRUE(ReplacedSince(e, st, fd.get(), &fuse));
  // The device's answer is remembered: no descriptor is needed for it again.
  EXPECT_EQ(fuse.IsFuse(st.st_dev, -1), 0);
  EXPECT_EQ(fuse.IsFuse(st.st_dev + 1, -1), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(HashFileTest, HashesTheBytesAndHolesAsZeros) {
  TempDir dir;
  std::string data = ::shardfs::testing::PseudoRandomBytes(3 << 20, 9);
  std::string path = dir / "f";
  WriteFile(path, data);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  bool short_read = true;
  Result<uint64_t> h = HashFile(fd.get(), data.size(), "f", &short_read);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(short_read);
  EXPECT_EQ(*h, XXH3_64bits(data.data(), data.size()));

  // A hole of 5 MiB past the data.
  ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(data.size() + (5 << 20))), 0);
  std::string whole = data + std::string(5 << 20, '\0');
  h = HashFile(fd.get(), whole.size(), "f", &short_read);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, XXH3_64bits(whole.data(), whole.size()));

  // A file that became shorter than its scanned size is a short read, not
  // a hole to the end.
  ASSERT_EQ(::ftruncate(fd.get(), 1000), 0);
  short_read = false;
  h = HashFile(fd.get(), data.size(), "f", &short_read);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(short_read);
}

}  // namespace
}  // namespace shardfs::pack
