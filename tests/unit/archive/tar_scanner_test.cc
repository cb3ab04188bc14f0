// src/archive/tar_scanner.h on archives written by real tools: GNU tar in five
// formats, bsdtar in four, busybox tar, and Python's tarfile in three.
//
// Truth: the source tree on disk (content, size, mode, mtime, link targets,
// inode identity for hard links), Python's tarfile view of the same archive
// (header and data offsets, pax mtime strings) and `tar -tf` (member count).
#include "src/archive/tar_scanner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <clocale>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using testing::CommandResult;
using testing::TempDir;
using testing::TreeFlavor;

// Python's tarfile view of an archive, one line per member, tab-separated:
// name(hex) type(hex) offset offset_data size mtime(int) pax-mtime|- linkname(hex) mode uid gid
constexpr const char* kPyList = R"PY(
import os, sys, tarfile
with tarfile.open(sys.argv[1], "r:") as t:
    for m in t:
        print("\t".join([os.fsencode(m.name).hex(), m.type.hex(), str(m.offset),
                         str(m.offset_data), str(m.size), str(int(m.mtime)),
                         m.pax_headers.get("mtime", "-"), os.fsencode(m.linkname).hex(),
                         str(m.mode), str(m.uid), str(m.gid)]))
)PY";

// Writes argv[2] from the names directly in argv[3], in format argv[1].
constexpr const char* kPyWrite = R"PY(
import os, sys, tarfile
fmt, out, src = getattr(tarfile, sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
os.chdir(src)
with tarfile.open(out, "w", format=fmt) as t:
    for name in sorted(os.listdir(".")):
        t.add(name)
)PY";

struct PyMember {
  std::string name;
  std::string type;
  uint64_t offset = 0;
  uint64_t offset_data = 0;
  uint64_t size = 0;
  int64_t mtime = 0;
  std::string pax_mtime;
  std::string linkname;
  uint32_t mode = 0;
  int64_t uid = 0, gid = 0;
};

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t tab = line.find('\t', pos);
    out.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
    if (tab == std::string::npos) return out;
    pos = tab + 1;
  }
}

std::vector<PyMember> PythonList(const std::string& archive) {
  CommandResult r = testing::Run({testing::Python3(), "-c", kPyList, archive});
  EXPECT_TRUE(r.ok()) << r.describe;
  std::vector<PyMember> out;
  size_t pos = 0;
  while (pos < r.out.size()) {
    size_t nl = r.out.find('\n', pos);
    std::vector<std::string> f = SplitTabs(r.out.substr(pos, nl - pos));
    pos = nl + 1;
    if (f.size() != 11) {
      ADD_FAILURE() << "bad python listing line";
      continue;
    }
    PyMember m;
    m.name = Unhex(f[0]);
    m.type = Unhex(f[1]);
    m.offset = std::stoull(f[2]);
    m.offset_data = std::stoull(f[3]);
    m.size = std::stoull(f[4]);
    m.mtime = std::stoll(f[5]);
    m.pax_mtime = f[6];
    m.linkname = Unhex(f[7]);
    m.mode = static_cast<uint32_t>(std::stoul(f[8]));
    m.uid = std::stoll(f[9]);
    m.gid = std::stoll(f[10]);
    out.push_back(m);
  }
  return out;
}

// "1500000000.123456789" -> nanoseconds, truncating past 9 digits.
int64_t DecimalToNs(const std::string& s) {
  size_t dot = s.find('.');
  int64_t sec = std::stoll(s.substr(0, dot));
  std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  frac = (frac + "000000000").substr(0, 9);
  return sec * 1000000000 + std::stoll(frac);
}

std::string StripTrailingSlashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

size_t TarListCount(const std::string& archive) {
  CommandResult r = testing::Run({"tar", "-tf", archive});
  EXPECT_TRUE(r.ok()) << r.describe;
  size_t lines = 0;
  for (char c : r.out) lines += c == '\n';
  return lines;
}

struct WriterCase {
  std::string name;
  TreeFlavor flavor;
  // argv for writing archive `out` from the top-level `names` of `src`.
  std::function<std::vector<std::string>(const std::string& out, const std::string& src,
                                         const std::vector<std::string>& names)>
      argv;
};

void PrintTo(const WriterCase& c, std::ostream* os) { *os << c.name; }

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

auto GnuTar(std::string format) {
  return [format](const std::string& out, const std::string& src,
                  const std::vector<std::string>& names) {
    return Concat({"tar", "--format=" + format, "-C", src, "-cf", out}, names);
  };
}

auto BsdTar(std::vector<std::string> extra) {
  return [extra](const std::string& out, const std::string& src,
                 const std::vector<std::string>& names) {
    return Concat(Concat(Concat({"bsdtar", "-c", "-f", out}, extra), {"-C", src}), names);
  };
}

auto PyTar(std::string format) {
  return [format](const std::string& out, const std::string& src, const std::vector<std::string>&) {
    return std::vector<std::string>{testing::Python3(), "-c", kPyWrite, format, out, src};
  };
}

std::vector<WriterCase> AllWriters() {
  return {
      {"gnutar_gnu", TreeFlavor::kFull, GnuTar("gnu")},
      {"gnutar_posix", TreeFlavor::kFull, GnuTar("posix")},
      {"gnutar_ustar", TreeFlavor::kUstar, GnuTar("ustar")},
      {"gnutar_v7", TreeFlavor::kV7, GnuTar("v7")},
      {"gnutar_oldgnu", TreeFlavor::kFull, GnuTar("oldgnu")},
      {"bsdtar_default", TreeFlavor::kFull, BsdTar({})},
      {"bsdtar_pax", TreeFlavor::kFull, BsdTar({"--format", "pax"})},
      {"bsdtar_gnutar", TreeFlavor::kFull, BsdTar({"--format", "gnutar"})},
      {"bsdtar_ustar", TreeFlavor::kUstar, BsdTar({"--format", "ustar"})},
      {"busybox", TreeFlavor::kFull,
       [](const std::string& out, const std::string& src, const std::vector<std::string>& names) {
         return Concat({"busybox", "tar", "-c", "-f", out, "-C", src}, names);
       }},
      {"python_gnu", TreeFlavor::kFull, PyTar("GNU_FORMAT")},
      {"python_pax", TreeFlavor::kFull, PyTar("PAX_FORMAT")},
      {"python_ustar", TreeFlavor::kUstar, PyTar("USTAR_FORMAT")},
  };
}

class OtherToolsArchiveTest : public ::testing::TestWithParam<WriterCase> {
 protected:
  static void SetUpTestSuite() {
    // As the shardfs CLI does (tools/cli/main.cc): names are bytes, and in the "C"
    // locale libarchive passes pax UTF-8 names through as stored (a UTF-8
    // locale would normalise them to NFC).
    std::setlocale(LC_ALL, "C");
    trees_ = new TempDir();
    testing::BuildSourceTree(*trees_ / "full", TreeFlavor::kFull);
    testing::BuildSourceTree(*trees_ / "ustar", TreeFlavor::kUstar);
    testing::BuildSourceTree(*trees_ / "v7", TreeFlavor::kV7);
  }
  static void TearDownTestSuite() {
    delete trees_;
    trees_ = nullptr;
  }
  static std::string TreeOf(TreeFlavor f) {
    switch (f) {
      case TreeFlavor::kFull:
        return *trees_ / "full";
      case TreeFlavor::kUstar:
        return *trees_ / "ustar";
      default:
        return *trees_ / "v7";
    }
  }
  static TempDir* trees_;
  TempDir work_;
};
TempDir* OtherToolsArchiveTest::trees_ = nullptr;

TEST_P(OtherToolsArchiveTest, EveryMemberMatchesTheSourceTree) {
  const WriterCase& wc = GetParam();
  const std::string src = TreeOf(wc.flavor);
  const std::string shard = work_ / (wc.name + ".tar");
  CommandResult made = testing::Run(wc.argv(shard, src, testing::TopLevelNames(src)));
  ASSERT_TRUE(made.ok()) << made.describe;
  const std::string bytes = testing::ReadFile(shard);

  std::vector<PyMember> py = PythonList(shard);
  std::map<std::string, PyMember> py_by_name;
  for (const PyMember& m : py) {
    EXPECT_TRUE(py_by_name.emplace(StripTrailingSlashes(m.name), m).second)
        << "python lists '" << m.name << "' twice";
  }
  std::vector<std::string> tree = testing::WalkTree(src);

  std::vector<ScannedMember> members;
  ShardInfo info;
  Status s = ScanTar(
      shard, ScanOptions{},
      [&](ScannedMember&& m) {
        members.push_back(std::move(m));
        return Status::Ok();
      },
      &info);
  ASSERT_TRUE(s.ok()) << s.message();

  // Counts: the scanner, GNU tar's listing, Python, the source tree.
  EXPECT_EQ(members.size(), TarListCount(shard));
  EXPECT_EQ(members.size(), py.size());
  EXPECT_EQ(members.size(), tree.size());
  EXPECT_EQ(info.members, members.size());
  EXPECT_EQ(info.size, bytes.size());

  std::set<std::string> seen;
  std::set<std::string> files_with_data;
  uint64_t data_bytes = 0;
  for (const ScannedMember& m : members) {
    const std::string key = StripTrailingSlashes(m.path);
    SCOPED_TRACE("member '" + m.path + "'");
    EXPECT_TRUE(seen.insert(key).second) << "reported twice";
    auto pit = py_by_name.find(key);
    ASSERT_NE(pit, py_by_name.end()) << "not in Python's listing";
    const PyMember& p = pit->second;
    EXPECT_EQ(m.header_offset, p.offset);

    const std::string at = src + "/" + key;
    struct stat st = testing::Lstat(at);
    EXPECT_EQ(m.uid, static_cast<int64_t>(st.st_uid));
    EXPECT_EQ(m.gid, static_cast<int64_t>(st.st_gid));

    // mtime: exact where the archive stores sub-seconds (a pax mtime
    // record, as Python reads it), whole seconds otherwise.
    const int64_t src_ns = testing::MtimeNs(st);
    if (p.pax_mtime != "-") {
      EXPECT_EQ(m.mtime_ns, DecimalToNs(p.pax_mtime)) << "pax mtime " << p.pax_mtime;
      EXPECT_LE(std::abs(m.mtime_ns - src_ns), 1000) << "source mtime " << src_ns;
    } else {
      EXPECT_EQ(m.mtime_ns, src_ns / 1000000000 * 1000000000);
      EXPECT_EQ(m.mtime_ns, p.mtime * 1000000000);
    }

    if (S_ISDIR(st.st_mode)) {
      EXPECT_EQ(m.kind, MemberKind::kDir);
      EXPECT_EQ(m.mode, st.st_mode & 07777);
    } else if (S_ISLNK(st.st_mode)) {
      EXPECT_EQ(m.kind, MemberKind::kSymlink);
      std::string target(4096, '\0');
      ssize_t n = ::readlink(at.c_str(), target.data(), target.size());
      ASSERT_GT(n, 0);
      target.resize(static_cast<size_t>(n));
      EXPECT_EQ(m.link_target, target);
    } else if (m.kind == MemberKind::kHardlink) {
      ASSERT_TRUE(S_ISREG(st.st_mode));
      EXPECT_EQ(p.type, "1");
      EXPECT_EQ(m.link_target, p.linkname);
      EXPECT_EQ(m.size, 0u);
      const std::string target_key = StripTrailingSlashes(m.link_target);
      EXPECT_TRUE(files_with_data.count(target_key))
          << "link to '" << m.link_target << "', which came not before as a file";
      struct stat tst = testing::Lstat(src + "/" + target_key);
      EXPECT_EQ(tst.st_ino, st.st_ino) << "not the same file on disk";
    } else {
      ASSERT_TRUE(S_ISREG(st.st_mode));
      ASSERT_EQ(m.kind, MemberKind::kFile);
      files_with_data.insert(key);
      EXPECT_EQ(m.mode, st.st_mode & 07777);
      const std::string content = testing::ReadFile(at);
      ASSERT_EQ(m.size, content.size());
      data_bytes += m.size;
      if (!content.empty()) {
        EXPECT_EQ(m.data_offset, p.offset_data);
      }
      ASSERT_LE(m.data_offset + m.size, bytes.size());
      EXPECT_TRUE(bytes.compare(m.data_offset, m.size, content) == 0)
          << "bytes at " << m.data_offset << " differ from the source file";
      EXPECT_TRUE(m.has_checksum);
      EXPECT_EQ(m.xxh3, XXH3_64bits(content.data(), content.size()));
    }
  }
  EXPECT_EQ(std::set<std::string>(tree.begin(), tree.end()), seen);
  EXPECT_EQ(info.data_bytes, data_bytes);

  // Without checksums: the same members at the same places, no hashes.
  size_t i = 0;
  s = ScanTar(
      shard,
      ScanOptions{.checksum = false,
                  .walker = true,
                  .restart = {},
                  .on_bytes = {},
                  .on_directory_read = {}},
      [&](ScannedMember&& m) {
        if (i >= members.size()) return Status::Corruption("more members than before");
        EXPECT_EQ(m.path, members[i].path);
        EXPECT_EQ(m.data_offset, members[i].data_offset);
        EXPECT_EQ(m.size, members[i].size);
        EXPECT_FALSE(m.has_checksum);
        ++i;
        return Status::Ok();
      },
      &info);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(i, members.size());
}

INSTANTIATE_TEST_SUITE_P(Writers, OtherToolsArchiveTest, ::testing::ValuesIn(AllWriters()),
                         [](const auto& info) { return info.param.name; });

// A callback's error stops the scan and comes back unchanged.
TEST(TarScannerTest, CallbackErrorStopsTheScan) {
  TempDir dir;
  testing::WriteFile(dir / "a", "a");
  testing::WriteFile(dir / "b", "b");
  CommandResult r =
      testing::Run({"tar", "--format=gnu", "-C", dir.path(), "-cf", dir / "s.tar", "a", "b"});
  ASSERT_TRUE(r.ok()) << r.describe;
  int calls = 0;
  ShardInfo info;
  Status s = ScanTar(
      dir / "s.tar", ScanOptions{},
      [&](ScannedMember&&) {
        ++calls;
        return Status::AlreadyExists("stop here");
      },
      &info);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(s.message(), "stop here");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace shardfs::archive
