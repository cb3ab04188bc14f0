// src/archive/tar_scanner.h at the edges: members past 8 GiB (without writing
// 8 GiB), GNU sparse members, and input that is not a well-formed tar.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <clocale>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "src/archive/tar_scanner.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using testing::CommandResult;
using testing::TempDir;

constexpr uint64_t kHugeSize = 9126805504;  // 8.5 GiB, past the 8 GiB octal limit.

// Writes argv[2] as a header from TarInfo.tobuf (format argv[1]) for one
// regular file of argv[3] bytes; the data is a hole, then two zero blocks
// end the archive. Prints the header length: where the data starts.
constexpr const char* kPyHuge = R"PY(
import sys, tarfile
fmt, out, size = getattr(tarfile, sys.argv[1]), sys.argv[2], int(sys.argv[3])
ti = tarfile.TarInfo("huge/eight-and-a-half-gib.bin")
ti.size, ti.mtime, ti.mode, ti.type = size, 1700000000, 0o640, tarfile.REGTYPE
buf = ti.tobuf(fmt, "utf-8", "surrogateescape")
with open(out, "wb") as f:
    f.write(buf)
    f.seek(len(buf) + (size + 511) // 512 * 512)
    f.write(b"\0" * 1024)
print(len(buf))
)PY";

std::vector<ScannedMember> ScanAll(const std::string& path, Status* status, bool checksum = true) {
  std::vector<ScannedMember> out;
  ShardInfo info;
  *status = ScanTar(
      path,
      ScanOptions{.checksum = checksum,
                  .walker = true,
                  .restart = {},
                  .on_bytes = {},
                  .on_directory_read = {}},
      [&](ScannedMember&& m) {
        out.push_back(std::move(m));
        return Status::Ok();
      },
      &info);
  return out;
}

class HugeMemberTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HugeMemberTest, SizeAndOffsetPast8GiB) {
  TempDir dir;
  const std::string shard = dir / "huge.tar";
  CommandResult made = testing::Run(
      {testing::Python3(), "-c", kPyHuge, GetParam(), shard, std::to_string(kHugeSize)});
  ASSERT_TRUE(made.ok()) << made.describe;
  const uint64_t header_len = std::stoull(made.out);
  struct stat st = testing::Lstat(shard);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size), header_len + kHugeSize + 1024);
  ASSERT_LT(st.st_blocks * 512, 1 << 20) << "the shard should be sparse";

  // GNU tar agrees on the size.
  CommandResult listed = testing::Run({"tar", "-tvf", shard});
  ASSERT_TRUE(listed.ok()) << listed.describe;
  std::istringstream fields(listed.out);
  std::string perms, owner, size;
  fields >> perms >> owner >> size;
  EXPECT_EQ(size, std::to_string(kHugeSize)) << listed.out;

  Status s;
  std::vector<ScannedMember> members = ScanAll(shard, &s, /*checksum=*/false);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].path, "huge/eight-and-a-half-gib.bin");
  EXPECT_EQ(members[0].kind, MemberKind::kFile);
  EXPECT_EQ(members[0].size, kHugeSize);
  EXPECT_EQ(members[0].data_offset, header_len);
  EXPECT_EQ(members[0].header_offset, 0u);
  EXPECT_EQ(members[0].mode, 0640u);
  EXPECT_EQ(members[0].mtime_ns, int64_t{1700000000} * 1000000000);
  EXPECT_FALSE(members[0].has_checksum);
}

INSTANTIATE_TEST_SUITE_P(Formats, HugeMemberTest, ::testing::Values("GNU_FORMAT", "PAX_FORMAT"),
                         [](const auto& info) { return std::string(info.param); });

// A file with holes archived with --sparse: the scanner reports its data
// extents, each pointing at the source's bytes in the shard.
class SparseMemberTest : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(SparseMemberTest, ExtentsPointAtTheData) {
  TempDir dir;
  const std::string src = dir / "src";
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  testing::WriteFile(src + "/before.txt", "before\n");
  const std::string holey = src + "/holes.bin";
  {
    int fd = ::open(holey.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    std::string block = testing::PseudoRandomBytes(4096, 9);
    for (off_t at : {off_t{0}, off_t{1} << 20, off_t{3} << 20}) {
      ASSERT_EQ(::pwrite(fd, block.data(), block.size(), at), 4096);
    }
    ASSERT_EQ(::ftruncate(fd, (off_t{4} << 20) + 4096 + 100), 0);
    ::close(fd);
  }
  const std::string shard = dir / "sparse.tar";
  std::vector<std::string> argv = {"tar"};
  argv.insert(argv.end(), GetParam().begin(), GetParam().end());
  argv.insert(argv.end(), {"--sparse", "-C", src, "-cf", shard, "before.txt", "holes.bin"});
  CommandResult made = testing::Run(argv);
  ASSERT_TRUE(made.ok()) << made.describe;
  // Precondition: tar really stored the holes as holes.
  ASSERT_LT(testing::Lstat(shard).st_size, testing::Lstat(holey).st_size);

  Status s;
  std::vector<ScannedMember> members = ScanAll(shard, &s);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(members.size(), 2u);
  const ScannedMember& m = members[1];
  EXPECT_EQ(m.path, "holes.bin");
  EXPECT_TRUE(m.sparse);
  EXPECT_EQ(m.size, (uint64_t{4} << 20) + 4096 + 100);
  const std::string bytes = testing::ReadFile(shard);
  const std::string block = testing::PseudoRandomBytes(4096, 9);
  ASSERT_EQ(m.extents.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const index::Extent& e = m.extents[i];
    EXPECT_EQ(e.logical, (std::vector<uint64_t>{0, 1 << 20, 3 << 20})[i]);
    EXPECT_EQ(e.length, 4096u);
    ASSERT_LE(e.physical + e.length, bytes.size());
    EXPECT_EQ(bytes.compare(e.physical, e.length, block), 0) << "extent " << i;
  }
  EXPECT_EQ(m.data_offset, m.extents[0].physical);
  EXPECT_TRUE(m.has_checksum);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, SparseMemberTest,
    ::testing::Values(std::vector<std::string>{"--format=gnu"},
                      std::vector<std::string>{"--format=posix"},
                      std::vector<std::string>{"--format=posix", "--sparse-version=0.1"},
                      std::vector<std::string>{"--format=posix", "--sparse-version=1.0"}),
    [](const auto& info) {
      std::string name;
      for (const std::string& a : info.param) {
        for (char c : a) {
          if (std::isalnum(static_cast<unsigned char>(c))) name.push_back(c);
        }
      }
      return name;
    });

// Malformed shards. Each must fail with a message naming the shard (and
// the byte where the trouble is, when there is one).
class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    testing::WriteFile(src_ + "/a.txt", "first member\n");
    testing::WriteFile(src_ + "/b.bin", testing::PseudoRandomBytes(10000, 10));
    testing::WriteFile(src_ + "/c.txt", "third member\n");
    good_ = dir_ / "good.tar";
    CommandResult r =
        testing::Run({"tar", "--format=gnu", "-C", src_, "-cf", good_, "a.txt", "b.bin", "c.txt"});
    ASSERT_TRUE(r.ok()) << r.describe;
    good_bytes_ = testing::ReadFile(good_);
    // Layout of a GNU archive of three small files: header, data blocks.
    ASSERT_EQ(good_bytes_.substr(0, 5), "a.txt");
    ASSERT_EQ(good_bytes_.substr(1024, 5), "b.bin");
    ASSERT_EQ(good_bytes_.substr(1024 + 512 + 10240, 5), "c.txt");
  }

  // Writes `bytes` as a shard and scans it; expects failure.
  Status ScanBytes(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ / name;
    testing::WriteFile(path, bytes);
    Status s;
    std::vector<ScannedMember> members = ScanAll(path, &s);
    EXPECT_FALSE(s.ok()) << name << " scanned fine";
    EXPECT_NE(s.message().find(path), std::string::npos)
        << "message does not name the shard: " << s.message();
    return s;
  }

  // The byte offset a message names ("at byte N" / "byte N"), or -1.
  static int64_t ByteIn(const std::string& msg) {
    std::smatch m;
    if (!std::regex_search(msg, m, std::regex("byte ([0-9]+)"))) return -1;
    if (m[1].length() > 15) return -2;  // Absurd: no test shard is that large.
    return std::stoll(m[1]);
  }

  TempDir dir_;
  std::string src_;
  std::string good_;
  std::string good_bytes_;
};

TEST_F(BadInputTest, ZeroLengthFile) {
  Status s = ScanBytes("empty.tar", "");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
}

TEST_F(BadInputTest, RandomBytes) {
  Status s = ScanBytes("random.tar", testing::PseudoRandomBytes(8192, 11));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_EQ(ByteIn(s.message()), 0) << s.message();
}

TEST_F(BadInputTest, GzipCompressedTar) {
  const std::string gz = dir_ / "good.tar.gz";
  CommandResult r = testing::Run({"tar", "-czf", gz, "-C", src_, "a.txt", "b.bin"});
  ASSERT_TRUE(r.ok()) << r.describe;
  Status s = ScanBytes("gzipped.tar", testing::ReadFile(gz));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_EQ(ByteIn(s.message()), 0) << s.message();
}

TEST_F(BadInputTest, TruncatedInsideTheFirstHeader) {
  Status s = ScanBytes("cut-header0.tar", good_bytes_.substr(0, 300));
  EXPECT_EQ(ByteIn(s.message()), 0) << s.message();
}

TEST_F(BadInputTest, TruncatedInsideALaterHeader) {
  // c.txt's header starts at 1024 + 512 + 10240.
  const uint64_t header = 1024 + 512 + 10240;
  Status s = ScanBytes("cut-header2.tar", good_bytes_.substr(0, header + 200));
  EXPECT_EQ(ByteIn(s.message()), static_cast<int64_t>(header)) << s.message();
}

TEST_F(BadInputTest, TruncatedInsideData) {
  // b.bin's data starts at 1536 and runs 10000 bytes; cut in the middle.
  const uint64_t cut = 1536 + 5000;
  Status s = ScanBytes("cut-data.tar", good_bytes_.substr(0, cut));
  EXPECT_NE(s.message().find("b.bin"), std::string::npos) << s.message();
  int64_t at = ByteIn(s.message());
  EXPECT_TRUE(at == 1024 || at == static_cast<int64_t>(cut))
      << "expected b.bin's header (1024) or the cut (" << cut << "): " << s.message();
}

TEST_F(BadInputTest, TruncatedAfterTheLastDataBlock) {
  // No end-of-archive blocks and c.txt's data cut short by one byte.
  const uint64_t c_data = 1024 + 512 + 10240 + 512;
  Status s = ScanBytes("cut-last.tar", good_bytes_.substr(0, c_data + 12));
  EXPECT_NE(s.message().find("c.txt"), std::string::npos) << s.message();
}

TEST_F(BadInputTest, HeaderChecksumCorrupted) {
  for (uint64_t header : {uint64_t{0}, uint64_t{1024}, uint64_t{1024 + 512 + 10240}}) {
    std::string bytes = good_bytes_;
    // The checksum field is 8 bytes at 148; make it a different octal value.
    bytes[header + 148] = bytes[header + 148] == '1' ? '2' : '1';
    Status s = ScanBytes("bad-sum-" + std::to_string(header) + ".tar", bytes);
    EXPECT_EQ(ByteIn(s.message()), static_cast<int64_t>(header)) << s.message();
  }
}

TEST_F(BadInputTest, NameChangedWithoutFixingTheChecksum) {
  std::string bytes = good_bytes_;
  bytes[1024] = 'X';  // b.bin -> X.bin, checksum stale.
  Status s = ScanBytes("bad-name.tar", bytes);
  EXPECT_EQ(ByteIn(s.message()), 1024) << s.message();
}

// A damaged header right after a member that has extended headers (a GNU
// long name): the offset named must still be that header's.
TEST_F(BadInputTest, DamagedHeaderAfterALongNamedMember) {
  const std::string long_dir = std::string(150, 'L');
  ASSERT_EQ(::mkdir((src_ + "/" + long_dir).c_str(), 0755), 0);
  const std::string shard = dir_ / "long.tar";
  CommandResult r =
      testing::Run({"tar", "--format=gnu", "-C", src_, "-cf", shard, long_dir, "a.txt"});
  ASSERT_TRUE(r.ok()) << r.describe;
  std::string bytes = testing::ReadFile(shard);
  // GNU tar's own block numbers (-R) say where a.txt's header is.
  CommandResult listed = testing::Run({"tar", "-tRf", shard});
  ASSERT_TRUE(listed.ok()) << listed.describe;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(listed.out, m, std::regex("block ([0-9]+): a\\.txt")))
      << listed.out;
  const uint64_t header = std::stoull(m[1]) * 512;
  ASSERT_EQ(bytes.substr(header, 5), "a.txt");
  bytes[header + 148] = bytes[header + 148] == '1' ? '2' : '1';
  Status s = ScanBytes("long-bad.tar", bytes);
  EXPECT_EQ(ByteIn(s.message()), static_cast<int64_t>(header)) << s.message();
}

TEST_F(BadInputTest, NotARegularFile) {
  Status s;
  std::vector<ScannedMember> members = ScanAll(dir_.path(), &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_.path()), std::string::npos) << s.message();
  members = ScanAll(dir_ / "does-not-exist.tar", &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does-not-exist.tar"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardfs::archive
