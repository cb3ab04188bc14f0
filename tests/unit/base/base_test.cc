// base/: the size and count grammar every command and mount option shares,
// path joining, the UTF-8 check, whole reads, UniqueFd, huge-page arrays,
// path containment and directory replacement.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/coding.h"
#include "base/fd.h"
#include "base/huge_pages.h"
#include "base/io.h"
#include "base/log.h"
#include "base/open_file.h"
#include "base/parse.h"
#include "base/paths.h"
#include "base/status.h"
#include "base/strings.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using ::testing::HasSubstr;

TEST(CodingTest, FixedWidthLittleEndianBytes) {
  char b[8];
  EncodeFixed16(b, 0x0102);
  EXPECT_EQ(std::string(b, 2), std::string("\x02\x01", 2));
  EncodeFixed32(b, 0x01020304);
  EXPECT_EQ(std::string(b, 4), std::string("\x04\x03\x02\x01", 4));
  EncodeFixed64(b, 0x0102030405060708);
  EXPECT_EQ(std::string(b, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(DecodeFixed64(b), 0x0102030405060708u);
  EXPECT_EQ(DecodeFixed32(b), 0x05060708u);
  EXPECT_EQ(DecodeFixed16(b), 0x0708u);
  // Signed values through their unsigned type.
  EncodeFixed64(b, static_cast<uint64_t>(int64_t{-2}));
  EXPECT_EQ(std::string(b, 8), std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(static_cast<int64_t>(DecodeFixed64(b)), -2);
  std::string s = "x";
  PutFixed32(&s, 0xdeadbeef);
  PutFixed64(&s, UINT64_MAX);
  ASSERT_EQ(s.size(), 13u);
  EXPECT_EQ(DecodeFixed32(s.data() + 1), 0xdeadbeefu);
  EXPECT_EQ(DecodeFixed64(s.data() + 5), UINT64_MAX);
}

TEST(CodingTest, BigEndianSortsBytewiseInNumericOrder) {
  char b[8];
  EncodeBigEndian32(b, 0x01020304);
  EXPECT_EQ(std::string(b, 4), std::string("\x01\x02\x03\x04", 4));
  EXPECT_EQ(DecodeBigEndian32(b), 0x01020304u);
  EncodeBigEndian64(b, 0x0102030405060708);
  EXPECT_EQ(std::string(b, 8), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(DecodeBigEndian64(b), 0x0102030405060708u);
  char lo[8], hi[8];
  EncodeBigEndian64(lo, 255);
  EncodeBigEndian64(hi, 256);
  EXPECT_LT(std::string(lo, 8), std::string(hi, 8));
}

TEST(CodingTest, VarintsRoundTripAndRefuseWhatIsCutOrTooLong) {
  std::string s;
  PutVarint64(&s, 0);
  PutVarint64(&s, 127);
  PutVarint64(&s, 300);
  PutVarint64(&s, UINT64_MAX);
  EXPECT_EQ(s, std::string("\x00\x7f\xac\x02", 4) + std::string(9, '\xff') + '\x01');
  std::string_view in = s;
  for (uint64_t want : {uint64_t{0}, uint64_t{127}, uint64_t{300}, UINT64_MAX}) {
    uint64_t v = 1;
    ASSERT_TRUE(GetVarint64(&in, &v));
    EXPECT_EQ(v, want);
  }
  EXPECT_TRUE(in.empty());
  uint64_t v = 42;
  in = std::string_view("\xac", 1);  // Cut short.
  EXPECT_FALSE(GetVarint64(&in, &v));
  const std::string too_big = std::string(9, '\xff') + '\x02';  // 2^64.
  in = too_big;
  EXPECT_FALSE(GetVarint64(&in, &v));
  const std::string too_long = std::string(10, '\x80') + '\x00';
  in = too_long;
  EXPECT_FALSE(GetVarint64(&in, &v));
  EXPECT_EQ(v, 42u);
}

TEST(ParseSizeTest, DigitsAndBinarySuffixes) {
  const std::pair<const char*, uint64_t> ok[] = {{"0", 0},
                                                 {"4096", 4096},
                                                 {"7B", 7},
                                                 {"4K", 4 << 10},
                                                 {"4k", 4 << 10},
                                                 {"4KiB", 4 << 10},
                                                 {"64M", 64 << 20},
                                                 {"64MiB", 64 << 20},
                                                 {"2G", 2ull << 30},
                                                 {"1GiB", 1 << 30},
                                                 {"3T", 3ull << 40},
                                                 {"3TiB", 3ull << 40},
                                                 {"16777215T", 16777215ull << 40}};
  for (const auto& [text, want] : ok) {
    uint64_t got = 1;
    EXPECT_TRUE(ParseSize(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
}

TEST(ParseSizeTest, EverythingElseIsRefusedAndLeavesTheOutputAlone) {
  for (const char* text : {"", "M", "-1", "+4", " 4", "4 ", "4x", "4MB", "4m", "1.5G", "0x10",
                           "16777216T", "18446744073709551616", "99999999999999999999K"}) {
    uint64_t got = 42;
    EXPECT_FALSE(ParseSize(text, &got)) << text;
    EXPECT_EQ(got, 42u) << text;
  }
}

TEST(ParseDecimalTest, EveryUint64AndNothingElse) {
  EXPECT_EQ(ParseDecimal("0"), 0u);
  EXPECT_EQ(ParseDecimal("007"), 7u);
  EXPECT_EQ(ParseDecimal("9999999999999999999"), 9999999999999999999u);
  // 20 digits: uint64 has them (the copies this replaced stopped at 19).
  EXPECT_EQ(ParseDecimal("10000000000000000000"), 10000000000000000000u);
  EXPECT_EQ(ParseDecimal("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseDecimal("000000000000000000000000018446744073709551615"), UINT64_MAX);
  for (const char* text : {"", "18446744073709551616", "99999999999999999999", "-1", "+1", " 1",
                           "1 ", "1x", "0x10", "1.0", "1e3", "\xd9\xa1"}) {
    EXPECT_EQ(ParseDecimal(text), std::nullopt) << text;
  }
}

TEST(ParseCountTest, WholeNumbersInRangeOnly) {
  uint64_t n = 0;
  EXPECT_TRUE(ParseCount("0", 0, 10, &n));
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(ParseCount("10", 0, 10, &n));
  EXPECT_EQ(n, 10u);
  EXPECT_TRUE(ParseCount("4294967294", 0, UINT32_MAX - 1, &n));
  EXPECT_TRUE(ParseCount("18446744073709551615", 0, UINT64_MAX, &n));
  EXPECT_EQ(n, UINT64_MAX);
  for (const char* text : {"11", "", "4x", "+4", "-0", " 1", "1.0", "1e3"}) {
    EXPECT_FALSE(ParseCount(text, 0, 10, &n)) << text;
  }
  EXPECT_FALSE(ParseCount("0", 1, 10, &n));
}

TEST(ParseJobsTest, OneTo4096) {
  int jobs = 0;
  EXPECT_TRUE(ParseJobs("1", &jobs));
  EXPECT_EQ(jobs, 1);
  EXPECT_TRUE(ParseJobs("4096", &jobs));
  EXPECT_EQ(jobs, 4096);
  for (const char* text : {"0", "4097", "4x", "-2", "", "2.5"}) {
    EXPECT_FALSE(ParseJobs(text, &jobs)) << text;
  }
}

TEST(StringsTest, JoinPathLeavesTheRootOut) {
  EXPECT_EQ(JoinPath("", "a"), "a");
  EXPECT_EQ(JoinPath("a/b", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("a", ""), "a/");
}

TEST(StringsTest, Utf8IsWellFormedOnly) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain"));
  EXPECT_TRUE(IsUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));          // Overlong '/'.
  EXPECT_FALSE(IsUtf8("\xe0\x80\xaf"));      // Overlong, three bytes.
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));      // A surrogate.
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // Past U+10FFFF.
  EXPECT_FALSE(IsUtf8("\xc3"));              // Cut short.
  EXPECT_FALSE(
      IsUtf8("a\x80"
             "b"));  // A lone continuation byte.
  EXPECT_EQ(Utf8SequenceLength("\xe2\x82\xac", 0), 3u);
  EXPECT_EQ(Utf8SequenceLength("x\xe2\x82", 1), 0u);
}

TEST(PreadExactTest, ReadsWholeRangesAndNamesWhereAFileEnds) {
  testing::TempDir dir;
  const std::string path = dir / "f";
  testing::WriteFile(path, "0123456789");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  char buf[8] = {};
  ASSERT_TRUE(PreadExact(fd.get(), buf, 4, 3).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  Status s = PreadExact(fd.get(), buf, 8, 6);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("ends at byte 10, expected data up to byte 14"));
  EXPECT_EQ(PreadExact(-1, buf, 1, 0).code(), Status::Code::kIoError);
}

TEST(UniqueFdTest, ClosesOnceAndGivesUpOnRelease) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd a(raw);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // Closed by b.
  int kept = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  {
    UniqueFd c(kept);
    EXPECT_EQ(c.release(), kept);
  }
  EXPECT_NE(::fcntl(kept, F_GETFD), -1);  // Not closed.
  ::close(kept);
}

// The VmFlags line of the mapping that holds `p`, from /proc/self/smaps.
std::string VmFlagsOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find('-') < 17) {
      inside = from <= addr && addr < to;
    } else if (inside && line.starts_with("VmFlags:")) {
      return line;
    }
  }
  return "";
}

TEST(HugePagesTest, LargeBlocksAreAlignedZeroedAdvisedAndUnmapped) {
  constexpr size_t kBytes = kHugeBlockMin + 12345;
  auto* p = static_cast<unsigned char*>(AllocateHuge(kBytes));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u);
  size_t nonzero = 0;
  for (size_t i = 0; i < kBytes; i += 4096) nonzero += p[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  p[0] = 1;
  p[kBytes - 1] = 2;
  // The advice is what the kernel keeps as "hg"; a kernel built without
  // THP has no such directory and refuses the advice.
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    EXPECT_THAT(VmFlagsOf(p), HasSubstr(" hg"));
  }
  FreeHuge(p, kBytes);
  unsigned char resident = 0;
  EXPECT_EQ(::mincore(p, 4096, &resident), -1);  // Unmapped.
  EXPECT_EQ(errno, ENOMEM);
}

TEST(HugePagesTest, VectorsKeepTheirElementsAcrossTheThreshold) {
  HugeVector<uint64_t> v;
  const size_t n = 3 * kHugeBlockMin / sizeof(uint64_t);  // Grows from small blocks to huge ones.
  for (size_t i = 0; i < n; ++i) v.push_back(i * 2654435761u);
  ASSERT_EQ(v.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (size_t{2} << 20), 0u);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += v[i] != i * 2654435761u;
  EXPECT_EQ(wrong, 0u);
  HugeVector<uint64_t> small(16, 7);  // Below the threshold: the heap, as std::vector.
  EXPECT_EQ(small[15], 7u);
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(v.capacity(), 0u);
}

TEST(PathsTest, PathWithinComparesWholeComponents) {
  EXPECT_TRUE(PathWithin("/a/b", "/a/b"));
  EXPECT_TRUE(PathWithin("/a/b/c", "/a/b"));
  EXPECT_TRUE(PathWithin("/a/b/c", "/a/b/"));
  EXPECT_TRUE(PathWithin("/a", "/"));
  EXPECT_TRUE(PathWithin("/", "/"));
  EXPECT_FALSE(PathWithin("/a/bc", "/a/b"));
  EXPECT_FALSE(PathWithin("/a/b", "/a/bc"));
  EXPECT_FALSE(PathWithin("/a", "/a/b"));
  EXPECT_FALSE(PathWithin("/", "/a"));
  EXPECT_FALSE(PathWithin("/x/a/b", "/a/b"));
}

TEST(PathsTest, ResolvePathFollowsSymlinksOfWhatExists) {
  testing::TempDir dir;
  const std::string real = std::filesystem::canonical(dir.path());
  std::filesystem::create_directories(dir / "shards/sub");
  std::filesystem::create_directory_symlink(real + "/shards", dir / "link");
  EXPECT_EQ(*ResolvePath(dir / "link/sub"), real + "/shards/sub");
  EXPECT_EQ(*ResolvePath(dir / "link/sub/"), real + "/shards/sub");
  EXPECT_EQ(*ResolvePath(dir / "link/./new/../x"), real + "/shards/x");  // Missing tail.
  EXPECT_EQ(*ResolvePath("/"), "/");
  // The point of resolving: a shard named through a symlink is inside.
  EXPECT_TRUE(PathWithin(*ResolvePath(dir / "link/a.tar"), *ResolvePath(dir / "shards")));
  EXPECT_FALSE(PathWithin(*ResolvePath(dir / "shards"), *ResolvePath(dir / "link/sub")));
  const std::string rel = *ResolvePath("relative-name");
  EXPECT_EQ(rel.front(), '/');
}

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

TEST(PathsTest, IsEmptyDirectory) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "empty");
  std::filesystem::create_directory(dir / "full");
  testing::WriteFile(dir / "full/f", "x");
  std::filesystem::create_directory_symlink(dir / "empty", dir / "link");
  EXPECT_TRUE(IsEmptyDirectory(dir / "empty"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "full"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "full/f"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "link"));
  EXPECT_FALSE(IsEmptyDirectory(dir / "missing"));
}

// Both ways of replacing: the target holds the new directory after, the old
// one is where the result says, nothing else moved.
TEST(PathsTest, ReplaceDirectoryExchangesOrRenames) {
  for (auto replace : {&ReplaceDirectory, &ReplaceDirectoryByRenames}) {
    testing::TempDir dir;
    std::filesystem::create_directory(dir / "new");
    testing::WriteFile(dir / "new/f", "new");
    // Nothing at the target: a rename.
    Result<Replaced> r = replace(dir / "new", dir / "out");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->old_path, "");
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "new");
    EXPECT_FALSE(std::filesystem::exists(dir / "new"));
    // Over an existing directory: the old one is handed back.
    std::filesystem::create_directory(dir / "newer");
    testing::WriteFile(dir / "newer/f", "newer");
    r = replace(dir / "newer", dir / "out");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "newer");
    ASSERT_NE(r->old_path, "");
    EXPECT_EQ(testing::ReadFile(r->old_path + "/f"), "new");
    EXPECT_EQ(r->atomic, replace == &ReplaceDirectory);  // tmpfs and ext4 exchange.
    // A missing source fails, naming it, and moves nothing.
    r = replace(dir / "missing", dir / "out");
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(dir / "missing"));
    EXPECT_EQ(testing::ReadFile(dir / "out/f"), "newer");
  }
}

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

std::vector<std::string>* sunk = nullptr;
void TestSink(log::Level level, std::string_view message, const log::Fields& f) {
  sunk->push_back(
      fmt::format("{} {} [{}|{}|{}]", static_cast<int>(level), message, f.shard, f.path, f.reason));
}

TEST(LogTest, ASinkTakesEveryMessageWithItsFieldsAtOrAboveTheLevel) {
  std::vector<std::string> got;
  sunk = &got;
  log::SetSink(&TestSink);
  log::Debug("not {}", "shown");
  log::Warning("w {}", 1);
  log::ErrorAbout({.shard = "s.tar", .path = "a/b", .reason = "checksum"}, "e {}", 2);
  log::SetSink(nullptr);
  sunk = nullptr;
  EXPECT_THAT(got, ::testing::ElementsAre("2 w 1 [||]", "3 e 2 [s.tar|a/b|checksum]"));
}

}  // namespace
}  // namespace shardfs
