// Index bundles (src/archive/index_bundle.h): a bundle round-trips, and every
// unsafe member is refused.
#include "src/archive/index_bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/fd.h"
#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::archive {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::DirNames;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::Python3;
using ::shardfs::testing::ReadFile;
using ::shardfs::testing::Run;
using ::shardfs::testing::TempDir;
using ::shardfs::testing::WriteFile;

// Writes a tar at `out` with Python's tarfile: `script` adds members to `t`.
void PythonTar(const std::string& out, const std::string& script) {
  auto r = Run({Python3(), "-c",
                "import io, sys, tarfile\n"
                "def add(t, name, data=b'x', kind=tarfile.REGTYPE, link=''):\n"
                "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link\n"
                "    i.size = len(data) if kind == tarfile.REGTYPE else 0\n"
                "    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)\n"
                "with tarfile.open(sys.argv[1], 'w') as t:\n" +
                    script,
                out});
  ASSERT_TRUE(r.ok()) << r.describe;
}

Status UnpackFile(const std::string& tar, const std::string& dir) {
  UniqueFd in(::open(tar.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(in.valid() && d.valid());
  BundleLimits limits;
  limits.max_bytes = 1 << 20;
  return UnpackIndexBundle(in.get(), d.get(), "B", limits);
}

class IndexBundleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::BuildAndOpen(dir_.path(), {DirMember("a"), FileMember("a/x", 10)}), nullptr);
    index_ = dir_ / "idx";
  }
  TempDir dir_;
  std::string index_;
};

TEST_F(IndexBundleTest, RoundTripIsDeterministicAndAnIndex) {
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "a.tar").ok());
  ASSERT_TRUE(WriteIndexBundle(index_, dir_ / "b.tar").ok());
  EXPECT_EQ(ReadFile(dir_ / "a.tar"), ReadFile(dir_ / "b.tar"));
  EXPECT_FALSE(WriteIndexBundle(index_, dir_ / "a.tar").ok()) << "an existing file is kept";
  ::mkdir((dir_ / "out").c_str(), 0700);
  ASSERT_TRUE(UnpackFile(dir_ / "a.tar", dir_ / "out").ok());
  EXPECT_EQ(DirNames(dir_ / "out"), DirNames(index_));
  for (const std::string& n : DirNames(index_)) {
    EXPECT_EQ(ReadFile(dir_ / "out/" + n), ReadFile(index_ + "/" + n)) << n;
  }
  EXPECT_TRUE(index::IsShardfsIndex(dir_ / "out"));
  EXPECT_FALSE(WriteIndexBundle(dir_.path(), dir_ / "c.tar").ok()) << "not an index";
}

TEST_F(IndexBundleTest, GnuTarOfTheDirectoryIsAccepted) {
  auto r = testing::Run({"tar", "-C", index_, "-czf", dir_ / "gnu.tar.gz", "."});
  ASSERT_TRUE(r.ok()) << r.describe;
  ::mkdir((dir_ / "out").c_str(), 0700);
  ASSERT_TRUE(UnpackFile(dir_ / "gnu.tar.gz", dir_ / "out").ok());
  EXPECT_EQ(DirNames(dir_ / "out"), DirNames(index_));
}

TEST_F(IndexBundleTest, UnsafeMembersAreRefused) {
  struct Case {
    const char* script;
    const char* why;
  } cases[] = {
      {"    add(t, '../x')\n", "not a plain file name"},
      {"    add(t, 'a/b')\n", "not a plain file name"},
      {"    add(t, '/etc/x')\n", "not a plain file name"},
      {"    add(t, '..')\n", "not a plain file name"},
      {"    add(t, 'l', kind=tarfile.SYMTYPE, link='/etc/passwd')\n", "symbolic link"},
      {"    add(t, 'f')\n    add(t, 'h', kind=tarfile.LNKTYPE, link='f')\n", "hard link"},
      {"    add(t, 'd', kind=tarfile.DIRTYPE)\n", "a directory"},
      {"    add(t, 'p', kind=tarfile.FIFOTYPE)\n", "a FIFO"},
      {"    add(t, 'c', kind=tarfile.CHRTYPE)\n", "a device"},
      {"    add(t, 'f')\n    add(t, './f')\n", "appears twice"},
      {"    add(t, 'big', b'x' * (2 << 20))\n", "--max-index-size"},
      {"    pass\n", "no files"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string tar = dir_ / ("bad" + std::to_string(i) + ".tar");
    const std::string out = dir_ / ("out" + std::to_string(i++));
    PythonTar(tar, c.script);
    ::mkdir(out.c_str(), 0700);
    Status s = UnpackFile(tar, out);
    EXPECT_FALSE(s.ok()) << c.script;
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.script << ": " << s.message();
    EXPECT_NE(s.message().find("index bundle B"), std::string::npos) << s.message();
  }
  WriteFile(dir_ / "junk.tar", std::string(3000, 'j'));
  ::mkdir((dir_ / "junk").c_str(), 0700);
  EXPECT_FALSE(UnpackFile(dir_ / "junk.tar", dir_ / "junk").ok());
}

}  // namespace
}  // namespace shardfs::archive
