// src/archive/tar_writer.h: archives it writes, read back by libarchive and by
// Python's tarfile (never by src/archive/tar_scanner.h), plus the byte accounting
// the index relies on: data offsets, TarMemberBytes, padding, the trailer.
#include "src/archive/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/fd.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using ::shardfs::testing::TempDir;

// One member as libarchive reads it.
struct ReadMember {
  std::string path;
  char type = '?';  // '0' file, '1' hard link, '2' symlink, '5' directory.
  std::string link;
  uint32_t mode = 0;
  int64_t uid = 0;
  int64_t mtime_sec = 0;
  long mtime_nsec = 0;
  std::string data;
};

std::vector<ReadMember> ReadWithLibarchive(const std::string& path) {
  std::vector<ReadMember> out;
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 10240), ARCHIVE_OK)
      << archive_error_string(a);
  struct archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    ReadMember m;
    m.path = archive_entry_pathname(e);
    if (const char* h = archive_entry_hardlink(e)) {
      m.type = '1';
      m.link = h;
    } else if (archive_entry_filetype(e) == AE_IFLNK) {
      m.type = '2';
      m.link = archive_entry_symlink(e);
    } else if (archive_entry_filetype(e) == AE_IFDIR) {
      m.type = '5';
    } else {
      m.type = '0';
    }
    m.mode = archive_entry_perm(e);
    m.uid = archive_entry_uid(e);
    m.mtime_sec = archive_entry_mtime(e);
    m.mtime_nsec = archive_entry_mtime_nsec(e);
    char buf[8192];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;) m.data.append(buf, n);
    out.push_back(std::move(m));
  }
  archive_read_free(a);
  return out;
}

// Writes members to a fresh file and returns its path; data_offsets gets
// where each member's data begins as the writer reported it.
class TarWriterTest : public ::testing::Test {
 protected:
  std::string Write(const std::vector<std::pair<TarMember, std::string>>& members,
                    std::vector<uint64_t>* data_offsets = nullptr, std::string name = "t.tar") {
    std::string path = dir_ / name;
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    EXPECT_TRUE(fd.valid());
    TarWriter w(fd.get(), name);
    for (const auto& [m, data] : members) {
      uint64_t off = 0;
      EXPECT_TRUE(w.BeginMember(m, &off).ok());
      if (!data.empty()) {
        EXPECT_TRUE(w.Append(data.data(), data.size()).ok());
      }
      EXPECT_TRUE(w.EndMember().ok());
      if (data_offsets) data_offsets->push_back(off);
    }
    EXPECT_TRUE(w.Finish().ok());
    return path;
  }

  static TarMember File(std::string_view path, const std::string& data, int64_t mtime_ns = 0) {
    TarMember m;
    m.path = path;
    m.type = TarType::kFile;
    m.mode = 0644;
    m.mtime_ns = mtime_ns;
    m.size = data.size();
    return m;
  }

  TempDir dir_;
};

TEST_F(TarWriterTest, EveryKindReadsBackWithLibarchive) {
  std::string content = ::shardfs::testing::PseudoRandomBytes(1000, 7);
  TarMember root, d, f, sym, hard;
  root.type = d.type = TarType::kDir;
  root.mode = d.mode = 0755;
  d.path = "d";
  f = File("d/f.bin", content, 1700000000ll * 1000000000);
  sym.path = "d/s";
  sym.type = TarType::kSymlink;
  sym.mode = 0777;
  sym.link_target = "f.bin";
  hard.path = "d/h";
  hard.type = TarType::kHardlink;
  hard.mode = 0644;
  hard.link_target = "d/f.bin";
  std::vector<uint64_t> offsets;
  std::string path = Write({{root, ""}, {d, ""}, {f, content}, {sym, ""}, {hard, ""}}, &offsets);

  std::vector<ReadMember> got = ReadWithLibarchive(path);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].path, "./");
  EXPECT_EQ(got[0].type, '5');
  EXPECT_EQ(got[1].path, "d/");
  EXPECT_EQ(got[1].mode, 0755u);
  EXPECT_EQ(got[2].path, "d/f.bin");
  EXPECT_EQ(got[2].data, content);
  EXPECT_EQ(got[2].mode, 0644u);
  EXPECT_EQ(got[2].mtime_sec, 1700000000);
  EXPECT_EQ(got[3].type, '2');
  EXPECT_EQ(got[3].link, "f.bin");
  EXPECT_EQ(got[4].type, '1');
  EXPECT_EQ(got[4].link, "d/f.bin");

  // No pax header anywhere: one block per member, the file's data right
  // after its header, padded; then the two-block trailer.
  EXPECT_EQ(offsets[2], 3 * kTarBlock);
  std::string bytes = ::shardfs::testing::ReadFile(path);
  EXPECT_EQ(bytes.substr(offsets[2], content.size()), content);
  EXPECT_EQ(bytes.size(), 5 * kTarBlock + TarPadded(content.size()) + kTarTrailer);
  EXPECT_EQ(bytes.substr(bytes.size() - kTarTrailer), std::string(kTarTrailer, '\0'));
}

TEST_F(TarWriterTest, ByteCountsMatchWhatIsWritten) {
  std::string data(700, 'x');
  std::string long_name(300, 'n');  // No '/': only pax can hold it.
  std::string split = std::string(120, 'p') + "/" + std::string(90, 'q');  // ustar prefix + name.
  std::vector<TarMember> members = {File("short", data), File(long_name, data), File(split, data),
                                    File("frac", data, 1500000000123456789)};
  for (const TarMember& m : members) {
    std::string header;
    AppendTarHeader(m, &header);
    EXPECT_EQ(header.size(), TarHeaderBytes(m)) << m.path;
    std::vector<uint64_t> offsets;
    std::string path = Write({{m, data}}, &offsets, "one.tar");
    EXPECT_EQ(offsets[0], TarHeaderBytes(m)) << m.path;
    EXPECT_EQ(::shardfs::testing::ReadFile(path).size(), TarMemberBytes(m) + kTarTrailer) << m.path;
  }
  EXPECT_EQ(TarHeaderBytes(members[0]), kTarBlock);
  EXPECT_GT(TarHeaderBytes(members[1]), kTarBlock);
  EXPECT_EQ(TarHeaderBytes(members[2]), kTarBlock);
  EXPECT_GT(TarHeaderBytes(members[3]), kTarBlock);
}

TEST_F(TarWriterTest, LongNamesAndSubsecondMtimesReadBackExactly) {
  std::string long_name = "dir/" + std::string(250, 'a') + ".jpg";
  std::string split = std::string(120, 'p') + "/" + std::string(90, 'q');
  std::string target(200, 't');
  TarMember a = File(long_name, "A", 1500000000123456789);
  TarMember b = File(split, "B", -2000000000);  // Before 1970, whole seconds.
  TarMember s;
  s.path = "link";
  s.type = TarType::kSymlink;
  s.link_target = target;
  std::string path = Write({{a, "A"}, {b, "B"}, {s, ""}});
  std::vector<ReadMember> got = ReadWithLibarchive(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].path, long_name);
  EXPECT_EQ(got[0].data, "A");
  EXPECT_EQ(got[0].mtime_sec, 1500000000);
  EXPECT_EQ(got[0].mtime_nsec, 123456789);
  EXPECT_EQ(got[1].path, split);
  EXPECT_EQ(got[1].mtime_sec, -2);
  EXPECT_EQ(got[2].link, target);
}

TEST_F(TarWriterTest, PythonTarfileReadsTheSameMembers) {
  std::string long_name = std::string(150, 'x') + ".txt";
  std::string path =
      Write({{File("a.txt", "hello"), "hello"}, {File(long_name, "world"), "world"}});
  ::shardfs::testing::CommandResult r =
      ::shardfs::testing::Run({::shardfs::testing::Python3(), "-c",
                               "import sys, tarfile\n"
                               "with tarfile.open(sys.argv[1], 'r:') as t:\n"
                               "    for m in t.getmembers():\n"
                               "        print(m.name, m.size, t.extractfile(m).read().decode())\n",
                               path});
  ASSERT_TRUE(r.ok()) << r.describe;
  EXPECT_EQ(r.out, "a.txt 5 hello\n" + long_name + " 5 world\n");
}

TEST_F(TarWriterTest, ZerosBecomeAHoleAndReadBackAsZeros) {
  constexpr uint64_t kHole = 4 << 20;
  TarMember m = File("sparse.bin", std::string(kHole + 3, '\0'));
  std::string path = dir_ / "s.tar";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  TarWriter w(fd.get(), "s.tar");
  uint64_t off;
  ASSERT_TRUE(w.BeginMember(m, &off).ok());
  ASSERT_TRUE(w.Append("abc", 3).ok());
  ASSERT_TRUE(w.AppendZeros(kHole).ok());
  ASSERT_TRUE(w.EndMember().ok());
  ASSERT_TRUE(w.Finish().ok());
  struct stat st;
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), TarMemberBytes(m) + kTarTrailer);
  // Fewer blocks than bytes on filesystems with holes; never more.
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, static_cast<uint64_t>(st.st_size));
  std::vector<ReadMember> got = ReadWithLibarchive(path);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "abc" + std::string(kHole, '\0'));
}

TEST_F(TarWriterTest, RollbackDropsAnUnfinishedMember) {
  std::string path = dir_ / "r.tar";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  TarWriter w(fd.get(), "r.tar");
  uint64_t off;
  ASSERT_TRUE(w.BeginMember(File("keep", "1"), &off).ok());
  ASSERT_TRUE(w.Append("1", 1).ok());
  ASSERT_TRUE(w.EndMember().ok());
  const uint64_t boundary = w.offset();
  ASSERT_TRUE(w.BeginMember(File("drop", std::string(100000, 'd')), &off).ok());
  ASSERT_TRUE(w.Append(std::string(70000, 'd').data(), 70000).ok());
  ASSERT_TRUE(w.Rollback(boundary).ok());
  EXPECT_EQ(w.offset(), boundary);
  ASSERT_TRUE(w.BeginMember(File("next", "2"), &off).ok());
  ASSERT_TRUE(w.Append("2", 1).ok());
  ASSERT_TRUE(w.EndMember().ok());
  ASSERT_TRUE(w.Finish().ok());
  std::vector<ReadMember> got = ReadWithLibarchive(path);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].path, "keep");
  EXPECT_EQ(got[1].path, "next");
  EXPECT_EQ(got[1].data, "2");
}

TEST_F(TarWriterTest, DataOfTheWrongSizeIsRefused) {
  std::string path = dir_ / "w.tar";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  TarWriter w(fd.get(), "w.tar");
  uint64_t off;
  ASSERT_TRUE(w.BeginMember(File("f", "four"), &off).ok());
  ASSERT_TRUE(w.Append("abc", 3).ok());
  EXPECT_EQ(w.EndMember().code(), Status::Code::kCorruption);
}

TEST_F(TarWriterTest, SameMembersGiveTheSameBytes) {
  std::string data = ::shardfs::testing::PseudoRandomBytes(5000, 3);
  const std::string name(200, 'z');  // TarMember.path is a view: keep its bytes alive.
  TarMember m = File(name, data, 1234567890987654321);
  m.uid = 1u << 30;  // Past ustar's 7 octal digits: pax.
  std::string a = ::shardfs::testing::ReadFile(Write({{m, data}}, nullptr, "a.tar"));
  std::string b = ::shardfs::testing::ReadFile(Write({{m, data}}, nullptr, "b.tar"));
  EXPECT_EQ(a, b);
  std::vector<ReadMember> got = ReadWithLibarchive(dir_ / "a.tar");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].uid, int64_t{1} << 30);
  EXPECT_EQ(got[0].data, data);
}

}  // namespace
}  // namespace shardfs::archive
