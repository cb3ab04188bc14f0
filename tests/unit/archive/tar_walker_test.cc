// src/archive/tar_walker.h against libarchive: on every archive of tests/corpus,
// on archives GNU tar, bsdtar, Python's tarfile and the project's own tar
// writer make, and on each header case built byte for byte, the walker
// either declines or reports exactly the members the libarchive scan
// reports. Truth here is the libarchive path (itself tested against the
// source tree and other tools in tar_scanner_test.cc).
#include "src/archive/tar_walker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "src/archive/tar_scanner.h"
#include "src/archive/tar_writer.h"
#include "tests/unit/test_util.h"

namespace shardfs::archive {
namespace {

using testing::TempDir;

struct LibScan {
  Status status;
  std::vector<ScannedMember> members;
};

LibScan Libarchive(std::string_view bytes) {
  LibScan out;
  ScanOptions options;
  options.walker = false;
  ShardInfo info;
  out.status = ScanTarBytes(
      "t.tar", bytes.data(), bytes.size(), options,
      [&](ScannedMember&& m) {
        out.members.push_back(std::move(m));
        return Status::Ok();
      },
      &info);
  return out;
}

std::string Describe(const ScannedMember& m) {
  return fmt::format(
      "'{}' kind={} mode={:o} uid={} gid={} mtime_ns={} size={} header={} data={} "
      "sparse={} checksum={}:{:x} link='{}'",
      m.path, static_cast<int>(m.kind), m.mode, m.uid, m.gid, m.mtime_ns, m.size, m.header_offset,
      m.data_offset, m.sparse, m.has_checksum, m.xxh3, m.link_target);
}

// Runs both paths over `bytes`. Returns whether the walker accepted; where
// it did, every field of every member must be libarchive's.
bool ExpectSameOrDeclined(std::string_view bytes, const std::string& what) {
  ScanOptions options;
  std::vector<ScannedMember> walked;
  if (!WalkTar(bytes.data(), bytes.size(), options, &walked)) return false;
  LibScan lib = Libarchive(bytes);
  EXPECT_TRUE(lib.status.ok()) << what << ": walker accepted, libarchive: " << lib.status.message();
  EXPECT_EQ(walked.size(), lib.members.size()) << what;
  for (size_t i = 0; i < std::min(walked.size(), lib.members.size()); ++i) {
    EXPECT_EQ(Describe(walked[i]), Describe(lib.members[i])) << what << ": member " << i;
    EXPECT_STREQ(walked[i].other_type, lib.members[i].other_type) << what;
    EXPECT_TRUE(walked[i].extents.empty() && lib.members[i].extents.empty()) << what;
  }
  return true;
}

std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string SourceRoot() {
  const char* root = std::getenv("SHARDFS_SOURCE_ROOT");
  // Never skip: the meson test environment sets it.
  EXPECT_NE(root, nullptr) << "SHARDFS_SOURCE_ROOT is not set (run through meson test)";
  return root ? root : ".";
}

TEST(TarWalkerTest, EveryCorpusArchiveIdenticalOrDeclined) {
  size_t files = 0, accepted = 0;
  for (const std::string& dir :
       {SourceRoot() + "/tests/corpus/archives", SourceRoot() + "/tests/fuzz/corpus/tar_scanner",
        SourceRoot() + "/tests/fuzz/corpus/tar_walker"}) {
    for (const std::string& f : FilesUnder(dir)) {
      ++files;
      if (ExpectSameOrDeclined(testing::ReadFile(f), f)) ++accepted;
    }
  }
  EXPECT_GT(files, 60u);
  // The plain GNU, pax and ustar archives in there are the walker's.
  EXPECT_GE(accepted, 15u) << "of " << files;
}

// Archives real tools write from a tree of the common kinds: files (empty,
// one block, several), directories, symlinks, a hard link, names past 100
// bytes, link targets past 100 bytes. The walker must take every one.
TEST(TarWalkerTest, RealToolArchivesAreWalkedAndIdentical) {
  TempDir dir;
  const std::string src = dir / "src";
  std::filesystem::create_directories(src + "/d/" + std::string(120, 'n') + "/e");
  testing::WriteFile(src + "/empty", "");
  testing::WriteFile(src + "/d/one", "x");
  testing::WriteFile(src + "/d/many", testing::PseudoRandomBytes(5000, 1));
  const std::string long_file = "d/" + std::string(120, 'n') + "/e/" + std::string(90, 'f');
  testing::WriteFile(src + "/" + long_file, "long");
  std::filesystem::create_symlink("one", src + "/d/link");
  std::filesystem::create_symlink(std::string(150, 't'), src + "/d/longlink");
  std::filesystem::create_hard_link(src + "/d/one", src + "/d/hard");
  std::filesystem::create_hard_link(src + "/" + long_file, src + "/d/hardlong");

  struct Tool {
    std::string name;
    std::vector<std::string> argv;
  };
  const std::string out = dir / "a.tar";
  std::vector<Tool> tools;
  for (const char* format : {"gnu", "posix", "oldgnu"}) {
    tools.push_back(
        {std::string("tar ") + format,
         {"tar", std::string("--format=") + format, "-C", src, "-cf", out, "d", "empty"}});
  }
  for (const char* format : {"pax", "gnutar"}) {
    tools.push_back({std::string("bsdtar ") + format,
                     {"bsdtar", "--format", format, "-C", src, "-cf", out, "d", "empty"}});
  }
  for (const char* format : {"GNU_FORMAT", "PAX_FORMAT"}) {
    tools.push_back(
        {std::string("tarfile ") + format,
         {testing::Python3(), "-c",
          "import sys, tarfile\n"
          "with tarfile.open(sys.argv[2], 'w', format=getattr(tarfile, sys.argv[1])) as t:\n"
          "    t.add(sys.argv[3] + '/d', 'd'); t.add(sys.argv[3] + '/empty', 'empty')\n",
          format, out, src}});
  }
  for (const Tool& tool : tools) {
    std::filesystem::remove(out);
    testing::CommandResult r = testing::Run(tool.argv);
    ASSERT_TRUE(r.ok()) << r.describe;
    const std::string bytes = testing::ReadFile(out);
    EXPECT_TRUE(ExpectSameOrDeclined(bytes, tool.name)) << tool.name << ": walker declined";
    EXPECT_EQ(Libarchive(bytes).members.size(), 11u) << tool.name;
  }
}

// What `shardfs pack` writes (src/archive/tar_writer.h): ustar headers with pax
// records for long names, long targets, big ids and sub-second times.
TEST(TarWalkerTest, PackOutputIsWalkedAndIdentical) {
  const std::string long_path = "a/" + std::string(200, 'p');
  const std::string long_target = std::string(300, 'q');
  auto member = [](std::string_view path, TarType type, uint32_t mode, uint64_t uid,
                   int64_t mtime_ns, uint64_t size, std::string_view link) {
    TarMember m;
    m.path = path;
    m.type = type;
    m.mode = mode;
    m.uid = uid;
    m.gid = uid / 2;
    m.mtime_ns = mtime_ns;
    m.size = size;
    m.link_target = link;
    return m;
  };
  const std::vector<TarMember> ms = {
      member("", TarType::kDir, 0755, 0, 0, 0, ""),
      member("a", TarType::kDir, 0700, 0, 1700000000123456789, 0, ""),
      member("a/f", TarType::kFile, 0644, 1000, 1, 3, ""),
      member(long_path, TarType::kFile, 0600, 1u << 30, -1500000000, 1000, ""),
      member("a/empty", TarType::kFile, 0444, 0, 0, 0, ""),
      member("a/s", TarType::kSymlink, 0777, 0, 0, 0, long_target),
      member("a/h", TarType::kHardlink, 0644, 0, 0, 0, "a/f"),
  };
  std::string tar;
  for (const TarMember& m : ms) {
    AppendTarHeader(m, &tar);
    if (m.type == TarType::kFile) {
      tar += testing::PseudoRandomBytes(m.size, m.size);
      tar.resize(TarPadded(tar.size()), '\0');
    }
  }
  tar.append(kTarTrailer, '\0');
  EXPECT_TRUE(ExpectSameOrDeclined(tar, "pack output")) << "walker declined pack output";
}

// ---- Header cases built byte for byte. ----

// One 512-byte header with a valid checksum. `magic` is 8 bytes.
std::string Header(std::string_view name, char type, uint64_t size, std::string_view link = "",
                   std::string_view magic = {"ustar\0"
                                             "00",
                                             8}) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(h.data() + 100, 8, "%07o", 0640);
  std::snprintf(h.data() + 108, 8, "%07o", 1001);
  std::snprintf(h.data() + 116, 8, "%07o", 1002);
  std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h.data() + 136, 12, "%011o", 1000000000);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(h.data() + 257, magic.data(), 8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}

std::string Reseal(std::string h) {
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h.substr(0, 512)) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}

std::string Pad(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

std::string Record(std::string_view key, std::string_view value) {
  size_t body = key.size() + value.size() + 3;
  size_t len = body + std::to_string(body).size();
  if (std::to_string(len).size() != std::to_string(body).size()) ++len;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

std::string Member(std::string_view name, char type, std::string_view data) {
  return Header(name, type, data.size()) + Pad(std::string(data));
}

std::string Ext(char type, std::string_view body) {
  return Header("././@Ext", type, body.size()) + Pad(std::string(body));
}

const std::string kEnd(1024, '\0');
constexpr std::string_view kGnu{"ustar  \0", 8};

struct Case {
  const char* name;
  std::string tar;
  bool walked;  // Whether the walker must take it (else it must decline).
};

std::vector<Case> Cases() {
  const std::string file = Member("f", '0', "hello");
  const std::string l100(150, 'L');
  std::vector<Case> c = {
      {"regular", file + kEnd, true},
      {"regular NUL type", Member("f", '\0', "abc") + kEnd, true},
      {"empty file", Member("e", '0', "") + kEnd, true},
      {"multi-block file", Member("m", '0', std::string(1500, 'm')) + kEnd, true},
      {"no end blocks", file, true},
      {"one end block", file + std::string(512, '\0'), true},
      {"garbage after the end", file + kEnd + "garbage", true},
      {"only end blocks", kEnd, true},
      {"directory", Header("d/", '5', 0) + kEnd, true},
      {"symlink", Header("s", '2', 0, "target") + kEnd, true},
      {"hard link", file + Header("h", '1', 0, "f") + kEnd, true},
      {"GNU header", Header("g", '0', 0, "", kGnu) + kEnd, true},
      {"ustar prefix",
       [] {
         std::string h = Header("name", '0', 0);
         std::memcpy(h.data() + 345, "pre/fix", 7);
         return Reseal(h) + kEnd;
       }(),
       true},
      {"ustar prefix ending in /",
       [] {
         std::string h = Header("name", '0', 0);
         std::memcpy(h.data() + 345, "pre/", 4);
         return Reseal(h) + kEnd;
       }(),
       true},
      {"GNU long name",
       Ext('L', l100 + '\0') + Header("short", '0', 2, "", kGnu) + Pad("ab") + kEnd, true},
      {"GNU long link", Ext('K', l100 + '\0') + Header("s", '2', 0, "short", kGnu) + kEnd, true},
      {"GNU long name and link",
       Ext('L', l100) + Ext('K', l100 + "k") + Header("h", '1', 0, "x", kGnu) + kEnd, true},
      {"pax path", Ext('x', Record("path", l100)) + Member("p", '0', "data") + kEnd, true},
      {"pax empty path", Ext('x', Record("path", "")) + Member("p", '0', "data") + kEnd, true},
      {"pax linkpath", Ext('x', Record("linkpath", l100)) + Header("s", '2', 0, "t") + kEnd, true},
      {"pax size", Ext('x', Record("size", "3")) + Header("z", '0', 077777) + Pad("abc") + kEnd,
       true},
      {"pax mtime", Ext('x', Record("mtime", "-1.25")) + file + kEnd, true},
      {"pax uid gid", Ext('x', Record("uid", "4000000000") + Record("gid", " 7x")) + file + kEnd,
       true},
      {"pax ignored keys",
       Ext('x',
           Record("atime", "1.5") + Record("uname", "u") + Record("SCHILY.xattr.user.a", "b")) +
           file + kEnd,
       true},
      {"pax last record wins", Ext('x', Record("path", "a") + Record("path", "b")) + file + kEnd,
       true},
      {"pax path over GNU long name",
       Ext('L', l100) + Ext('x', Record("path", "pax")) + Header("n", '0', 0, "", kGnu) + kEnd,
       true},
      {"GNU long name after pax path",
       Ext('x', Record("path", "pax")) + Ext('L', l100) + Header("n", '0', 0, "", kGnu) + kEnd,
       true},
      {"pax linkpath over GNU long link",
       Ext('K', l100) + Ext('x', Record("linkpath", "pl")) + Header("s", '2', 0, "t", kGnu) + kEnd,
       true},
      {"mtime past 64-bit nanoseconds",
       [] {
         std::string h = Header("m", '0', 0);
         std::memcpy(h.data() + 136, "777777777777", 12);
         return Reseal(h) + kEnd;
       }(),
       true},
      {"global header", Ext('g', Record("comment", "c")) + file + kEnd, true},
      // Declined: libarchive reads these, or they are damaged.
      {"bad checksum",
       [&] {
         std::string t = file + kEnd;
         t[0] = 'g';
         return t;
       }(),
       false},
      {"v7 header", Header("v", '0', 0, "", std::string(8, '\0')) + kEnd, false},
      {"GNU sparse type", Header("s", 'S', 0, "", kGnu) + kEnd, false},
      {"fifo", Header("p", '6', 0) + kEnd, false},
      {"contiguous type", Header("c", '7', 0) + kEnd, false},
      {"GNU old sparse map",
       [] {
         std::string h = Header("s", '0', 0, "", kGnu);
         h[386] = '1';
         return Reseal(h) + kEnd;
       }(),
       false},
      {"base-256 size",
       [] {
         std::string h = Header("b", '0', 0);
         std::memset(h.data() + 124, 0, 12);
         h[124] = static_cast<char>(0x80);
         return Reseal(h) + kEnd;
       }(),
       false},
      {"pax GNU.sparse key", Ext('x', Record("GNU.sparse.major", "1")) + file + kEnd, false},
      {"pax hdrcharset", Ext('x', Record("hdrcharset", "BINARY")) + file + kEnd, false},
      {"pax charset", Ext('x', Record("charset", "ISO-IR 646 1990")) + file + kEnd, false},
      {"pax non-ASCII path", Ext('x', Record("path", "caf\xc3\xa9")) + file + kEnd, false},
      {"pax malformed record", Ext('x', "8 path=a\n") + file + kEnd, false},
      {"two pax headers",
       Ext('x', Record("path", "a")) + Ext('x', Record("path", "b")) + file + kEnd, false},
      {"two GNU long names", Ext('L', "a") + Ext('L', "b") + Header("n", '0', 0, "", kGnu) + kEnd,
       false},
      {"long link on a file", Ext('K', "a") + Header("n", '0', 0, "", kGnu) + kEnd, false},
      {"regular name ending in /", Member("d/", '0', "") + kEnd, false},
      {"directory with a size", Header("d", '5', 512) + Pad("x") + kEnd, false},
      {"hard link with a size", file + Header("h", '1', 3, "f") + Pad("abc") + kEnd, false},
      {"symlink without a target", Header("s", '2', 0) + kEnd, false},
      {"truncated data", Header("t", '0', 1000) + std::string(600, 'x'), false},
      {"data without padding", Header("t", '0', 3) + "abc", false},
      {"short block", file + std::string(100, 'x'), false},
      {"end mark after a long name", Ext('L', "a") + kEnd, false},
      {"tiny file", std::string(100, '\0'), false},
  };
  return c;
}

TEST(TarWalkerTest, EachHeaderCase) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const bool walked = ExpectSameOrDeclined(c.tar, c.name);
    EXPECT_EQ(walked, c.walked) << c.name;
  }
}

TEST(TarWalkerTest, PaxAndLongNamePrecedence) {
  const std::string l(150, 'L');
  const std::string t = Ext('L', l) + Ext('x', Record("path", "pax") + Record("mtime", "-1.25")) +
                        Header("n", '0', 0, "", kGnu) + kEnd;
  std::vector<ScannedMember> m;
  ASSERT_TRUE(WalkTar(t.data(), t.size(), ScanOptions{}, &m));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].path, "pax");  // As GNU tar extracts it.
  EXPECT_EQ(m[0].mtime_ns, -1250000000);
  EXPECT_EQ(m[0].header_offset, 0u);
}

// A shard the walker declines goes to libarchive, which still names the
// shard and the reason.
TEST(TarWalkerTest, DeclinedShardsKeepLibarchiveErrors) {
  std::string t = Member("f", '0', "hello") + kEnd;
  t[0] = 'g';
  ShardInfo info;
  Status s = ScanTarBytes(
      "bad.tar", t.data(), t.size(), ScanOptions{}, [](ScannedMember&&) { return Status::Ok(); },
      &info);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard bad.tar"), std::string::npos) << s.message();
}

// With ScanOptions::restart the walker reads a shard once. A shard it
// declines only after some members (here at a FIFO) is restarted through
// libarchive, and the caller, dropping what came before the restart, ends
// with exactly libarchive's members; a shard the walker takes never restarts.
TEST(TarWalkerTest, OnePassScanRestartsWhenTheWalkerDeclinesLate) {
  const std::string late = Member("a", '0', "one") + Member("b", '0', "two") +
                           Header("fifo", '6', 0) + Member("c", '0', "three") + kEnd;
  const std::string taken = Member("a", '0', "one") + Member("b", '0', "two") + kEnd;
  for (const std::string* t : {&late, &taken}) {
    SCOPED_TRACE(t == &late ? "declined late" : "taken");
    std::vector<ScannedMember> got;
    int restarts = 0;
    ScanOptions options;
    options.restart = [&] {
      ++restarts;
      got.clear();
    };
    ShardInfo info;
    Status s = ScanTarBytes(
        "t.tar", t->data(), t->size(), options,
        [&](ScannedMember&& m) {
          got.push_back(std::move(m));
          return Status::Ok();
        },
        &info);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(restarts, t == &late ? 1 : 0);
    LibScan lib = Libarchive(*t);
    ASSERT_TRUE(lib.status.ok()) << lib.status.message();
    ASSERT_EQ(got.size(), lib.members.size());
    EXPECT_EQ(info.members, lib.members.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(Describe(got[i]), Describe(lib.members[i])) << "member " << i;
    }
  }
}

// A member the caller refuses stops a one-pass scan as it stops a two-pass
// one: the same error, also when the walker would have declined the shard
// further on (the refusal then comes from libarchive's pass).
TEST(TarWalkerTest, OnePassScanStopsAtARefusedMemberLikeTwoPasses) {
  const std::string late =
      Member("a", '0', "one") + Member("b", '0', "two") + Header("fifo", '6', 0) + kEnd;
  const std::string taken = Member("a", '0', "one") + Member("b", '0', "two") + kEnd;
  for (const std::string* t : {&late, &taken}) {
    SCOPED_TRACE(t == &late ? "declined late" : "taken");
    std::string results[2];
    for (int one_pass = 0; one_pass < 2; ++one_pass) {
      ScanOptions options;
      int restarts = 0;
      if (one_pass) options.restart = [&] { ++restarts; };
      std::vector<std::string> seen;
      ShardInfo info;
      Status s = ScanTarBytes(
          "t.tar", t->data(), t->size(), options,
          [&](ScannedMember&& m) {
            seen.push_back(m.path);
            return m.path == "b" ? Status::InvalidArgument("refused b") : Status::Ok();
          },
          &info);
      ASSERT_FALSE(s.ok());
      results[one_pass] = fmt::format("{} after {}", s.message(), fmt::join(seen, ","));
      if (one_pass) {
        EXPECT_EQ(restarts, t == &late ? 1 : 0);
      }
    }
    EXPECT_NE(results[0].find("refused b"), std::string::npos) << results[0];
    // Two passes report a, b; one pass that restarts reports a, b, then a, b again.
    EXPECT_EQ(results[1], t == &late ? fmt::format("{} after a,b,a,b",
                                                   results[0].substr(0, results[0].find(" after ")))
                                     : results[0]);
  }
}

}  // namespace
}  // namespace shardfs::archive
