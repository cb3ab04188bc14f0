// Unpacking index bundles (src/indexref/bundle_unpack.h) with the project's
// own tar reading: what GNU tar and Python's tarfile write (plain, gzip,
// zstd; ustar, GNU and pax headers) unpacks to the index, and every unsafe
// member, damaged or truncated archive is refused with a message.
#include "src/indexref/bundle_unpack.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/fd.h"
#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::indexref {
namespace {

using ::shardfs::testing::DirMember;
using ::shardfs::testing::DirNames;
using ::shardfs::testing::FileMember;
using ::shardfs::testing::Python3;
using ::shardfs::testing::ReadFile;
using ::shardfs::testing::TempDir;
using ::shardfs::testing::WriteFile;

// Writes a tar at `out` with Python's tarfile (`mode` as tarfile.open takes
// it, `format` one of its formats): `script` adds members to `t`.
void PythonTar(const std::string& out, const std::string& script, const std::string& mode = "w",
               const std::string& format = "PAX_FORMAT") {
  auto r = testing::Run({Python3(), "-c",
                         "import io, sys, tarfile\n"
                         "def add(t, name, data=b'x', kind=tarfile.REGTYPE, link=''):\n"
                         "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link\n"
                         "    i.size = len(data) if kind == tarfile.REGTYPE else 0\n"
                         "    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)\n"
                         "with tarfile.open(sys.argv[1], '" +
                             mode + "', format=tarfile." + format + ") as t:\n" + script,
                         out});
  ASSERT_TRUE(r.ok()) << r.describe;
}

Status UnpackFile(const std::string& tar, const std::string& dir) {
  ::mkdir(dir.c_str(), 0700);
  UniqueFd in(::open(tar.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(in.valid() && d.valid());
  BundleLimits limits;
  limits.max_bytes = 1 << 20;
  return UnpackIndexBundle(in.get(), d.get(), "B", limits);
}

class BundleUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::BuildAndOpen(dir_.path(), {DirMember("a"), FileMember("a/x", 10)}), nullptr);
    index_ = dir_ / "idx";
  }
  // The unpacked directory `out` holds the index's files, byte for byte.
  void ExpectTheIndex(const std::string& out) {
    EXPECT_EQ(DirNames(out), DirNames(index_));
    for (const std::string& n : DirNames(index_)) {
      EXPECT_EQ(ReadFile(out + "/" + n), ReadFile(index_ + "/" + n)) << n;
    }
    EXPECT_TRUE(index::IsShardfsIndex(out));
  }
  TempDir dir_;
  std::string index_;
};

TEST_F(BundleUnpackTest, GnuTarOfTheDirectoryPlainGzipAndZstd) {
  for (const char* how :
       {"-cf", "-czf", "--zstd -cf", "--format=posix -cf", "--format=ustar -cf"}) {
    const std::string tar = dir_ / "gnu.tar";
    ::unlink(tar.c_str());
    auto r = testing::Run(
        {"sh", "-c", std::string("tar -C \"$1\" ") + how + " \"$2\" .", "sh", index_, tar});
    ASSERT_TRUE(r.ok()) << r.describe;
    const std::string out = dir_ / (std::string("out") + std::to_string(tar.size()) + how);
    ASSERT_TRUE(UnpackFile(tar, out).ok()) << how << ": " << UnpackFile(tar, out + "x").message();
    ExpectTheIndex(out);
  }
}

TEST_F(BundleUnpackTest, LongNamesAndConcatenatedStreams) {
  const std::string name(150, 'n');
  for (const char* format : {"PAX_FORMAT", "GNU_FORMAT"}) {
    const std::string tar = dir_ / (std::string("long-") + format + ".tar");
    PythonTar(tar, "    add(t, '" + name + "', b'y' * 1000)\n    add(t, 'short', b'')\n", "w",
              format);
    const std::string out = dir_ / (std::string("long-out-") + format);
    ASSERT_TRUE(UnpackFile(tar, out).ok()) << format;
    EXPECT_EQ(ReadFile(out + "/" + name), std::string(1000, 'y')) << format;
    EXPECT_EQ(ReadFile(out + "/short"), "") << format;
  }
  // Two gzip members one after the other (pigz, `cat a.gz b.gz`) are one
  // stream; so are two zstd frames.
  const std::string tar = dir_ / "two.tar";
  PythonTar(tar, "    add(t, 'f', b'z' * 70000)\n");
  const std::string data = ReadFile(tar);
  for (const char* tool : {"gzip", "zstd"}) {
    WriteFile(dir_ / "h1", data.substr(0, 4096));
    WriteFile(dir_ / "h2", data.substr(4096));
    const std::string z = dir_ / (std::string("two.") + tool);
    auto r = testing::Run(
        {"sh", "-c",
         std::string(tool) + " -c \"$1/h1\" > \"$2\" && " + tool + " -c \"$1/h2\" >> \"$2\"", "sh",
         dir_.path(), z});
    ASSERT_TRUE(r.ok()) << r.describe;
    const std::string out = dir_ / (std::string("two-out-") + tool);
    ASSERT_TRUE(UnpackFile(z, out).ok()) << tool;
    EXPECT_EQ(ReadFile(out + "/f"), std::string(70000, 'z')) << tool;
  }
}

TEST_F(BundleUnpackTest, UnsafeMembersAreRefused) {
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
      {"    add(t, 'a' * 120 + '/../x')\n", "not a plain file name"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string tar = dir_ / ("bad" + std::to_string(i) + ".tar");
    const std::string out = dir_ / ("out" + std::to_string(i++));
    PythonTar(tar, c.script);
    Status s = UnpackFile(tar, out);
    EXPECT_FALSE(s.ok()) << c.script;
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.script << ": " << s.message();
    EXPECT_NE(s.message().find("index bundle B"), std::string::npos) << s.message();
  }
}

TEST_F(BundleUnpackTest, ASparseMemberIsRefused) {
  const std::string sparse = dir_ / "sp/holes";
  ::mkdir((dir_ / "sp").c_str(), 0700);
  WriteFile(sparse, "head");
  ASSERT_EQ(::truncate(sparse.c_str(), 8 << 20), 0);
  for (const char* format : {"--format=gnu", "--format=posix"}) {
    const std::string tar = dir_ / (std::string("sparse") + format + ".tar");
    auto r = testing::Run({"tar", format, "-S", "-C", dir_ / "sp", "-cf", tar, "holes"});
    ASSERT_TRUE(r.ok()) << r.describe;
    Status s = UnpackFile(tar, dir_ / (std::string("sparse-out") + format));
    EXPECT_FALSE(s.ok()) << format;
    EXPECT_NE(s.message().find("a sparse file"), std::string::npos)
        << format << ": " << s.message();
  }
}

TEST_F(BundleUnpackTest, DamagedAndTruncatedArchivesAreRefused) {
  WriteFile(dir_ / "junk.tar", std::string(3000, 'j'));
  Status s = UnpackFile(dir_ / "junk.tar", dir_ / "junk");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("not a tar"), std::string::npos) << s.message();

  PythonTar(dir_ / "good.tar", "    add(t, 'f', b'q' * 5000)\n    add(t, 'g', b'r' * 5000)\n");
  const std::string good = ReadFile(dir_ / "good.tar");
  struct Cut {
    const char* name;
    std::string bytes;
  } cuts[] = {
      {"inside the first member's data", good.substr(0, 512 + 1000)},
      {"inside the second header", good.substr(0, 512 + 5120 + 100)},
  };
  for (const Cut& c : cuts) {
    WriteFile(dir_ / "cut.tar", c.bytes);
    s = UnpackFile(dir_ / "cut.tar", dir_ / ("cut-out-" + std::to_string(c.bytes.size())));
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << c.name << ": " << s.message();
  }
  // The second header's checksum broken.
  std::string bad = good;
  bad[512 + 5120 + 10] ^= 0x55;
  WriteFile(dir_ / "sum.tar", bad);
  s = UnpackFile(dir_ / "sum.tar", dir_ / "sum-out");
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_NE(s.message().find("damaged tar header"), std::string::npos) << s.message();
  // A gzip stream cut short, and one with a damaged body.
  auto r = testing::Run({"gzip", "-k", dir_ / "good.tar"});
  ASSERT_TRUE(r.ok()) << r.describe;
  const std::string gz = ReadFile(dir_ / "good.tar.gz");
  WriteFile(dir_ / "short.tar.gz", gz.substr(0, gz.size() - 12));
  s = UnpackFile(dir_ / "short.tar.gz", dir_ / "short-out");
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  std::string mangled = gz;
  for (size_t i = 20; i < 40 && i < mangled.size(); ++i) mangled[i] ^= 0xff;
  WriteFile(dir_ / "mangled.tar.gz", mangled);
  s = UnpackFile(dir_ / "mangled.tar.gz", dir_ / "mangled-out");
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace shardfs::indexref
