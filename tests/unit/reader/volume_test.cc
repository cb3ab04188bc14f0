// src/reader/volume.h as a second frontend sees it: open an index, look paths
// up, stat, list, read ranges, without FUSE; and a forked child that opens
// its own volume from the parent's location() and options() and reads,
// while the parent goes on reading from its own.
#include "src/reader/volume.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

using shardfs::testing::TempDir;

class VolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string src = dir_ / "src";
    std::filesystem::create_directories(src + "/d");
    files_ = {{"d/one.txt", "the first file\n"},
              {"d/two.bin", shardfs::testing::PseudoRandomBytes(300000, 5)},
              {"top.txt", "at the top\n"}};
    for (const auto& [path, data] : files_) shardfs::testing::WriteFile(src + "/" + path, data);
    ASSERT_EQ(::symlink("d/one.txt", (src + "/link").c_str()), 0);
    reader_testing::IndexShards(
        {reader_testing::WriteShard(src, dir_ / "s.tar",
                                    {"d", "d/one.txt", "d/two.bin", "top.txt", "link"})},
        dir_ / "idx");
  }

  std::unique_ptr<Volume> Open() {
    IndexLocation where;
    where.path = dir_ / "idx";
    where.shown = "idx";
    VolumeOptions o;
    o.storage = StorageMode::kLocal;
    o.fs.verify = VerifyMode::kFirst;
    auto v = Volume::Open(where, o);
    EXPECT_TRUE(v.ok()) << v.status().message();
    return v.ok() ? std::move(v).value() : nullptr;
  }

  // Every file of the tree read whole through `v`, and one range; true if
  // all match.
  bool ReadsRight(Volume& v) {
    for (const auto& [path, data] : files_) {
      std::string buf(data.size() + 10, '\0');
      Result<size_t> n = v.Read(path, 0, buf.size(), buf.data());
      if (!n.ok() || buf.substr(0, *n) != data) return false;
    }
    std::string part(100, '\0');
    Result<size_t> n = v.Read(std::string_view("d/two.bin"), 1000, 100, part.data());
    return n.ok() && *n == 100 && part == files_.at("d/two.bin").substr(1000, 100);
  }

  TempDir dir_;
  std::map<std::string, std::string> files_;
};

TEST_F(VolumeTest, LooksUpStatsListsAndReadsWithoutFuse) {
  auto v = Open();
  ASSERT_TRUE(v);
  EXPECT_TRUE(ReadsRight(*v));
  struct stat st;
  ASSERT_TRUE(v->Stat("d/two.bin", true, &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 300000);
  ASSERT_TRUE(v->Stat("link", false, &st).ok());
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_TRUE(v->Stat("link", true, &st).ok());
  EXPECT_EQ(st.st_size, static_cast<off_t>(files_["d/one.txt"].size()));
  Result<std::string> target = v->ReadLink("link");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "d/one.txt");
  std::vector<std::string> names;
  ASSERT_TRUE(v->ListDir("d", [&](std::string_view name, const index::EntryRecord&) {
                 names.emplace_back(name);
                 return true;
               }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"one.txt", "two.bin"}));
  // A read past the end is empty; errors name the path.
  char c;
  Result<size_t> n = v->Read(std::string_view("top.txt"), 1000, 1, &c);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(v->Read(std::string_view("d"), 0, 1, &c).status().code(), Status::Code::kIsADirectory);
  Status s =
      v->ListDir("top.txt", [](std::string_view, const index::EntryRecord&) { return true; });
  EXPECT_EQ(s.code(), Status::Code::kNotADirectory);
  EXPECT_NE(s.message().find("top.txt"), std::string::npos) << s.message();
  EXPECT_EQ(v->Read(std::string_view("nope"), 0, 1, &c).status().code(), Status::Code::kNotFound);
}

// A child after fork() uses nothing of the parent's volume: it opens its own
// from location() and options(), and reads every file right; the parent's
// volume still reads after the child is gone.
TEST_F(VolumeTest, AForkedChildReadsFromAVolumeOfItsOwn) {
  auto v = Open();
  ASSERT_TRUE(v);
  ASSERT_TRUE(ReadsRight(*v));  // The parent's volume has open shards and state.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // No gtest assertions here: the exit code says how it went. _exit, not
    // exit: the parent's static state (RocksDB's) is not the child's to tear
    // down.
    int code = 0;
    {
      Result<std::unique_ptr<Volume>> mine = Volume::Open(v->location(), v->options());
      if (!mine.ok()) {
        code = 2;
      } else if (!ReadsRight(**mine)) {
        code = 3;
      }
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: the child could not open, 3: it read wrong bytes";
  EXPECT_TRUE(ReadsRight(*v));
}

}  // namespace
}  // namespace shardfs::reader
