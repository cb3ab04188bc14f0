// ReaderOptions::preload (index/index_reader.h): an open with it asks the
// kernel for the table files, which end up in the page cache although the
// open itself reads only a few blocks of them; an open without it leaves
// them out. Residency is asked of the kernel with mincore(2), after the
// files were written back and dropped from the page cache.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "index/index_reader.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::testing {
namespace {

namespace fs = std::filesystem;

// The table files of the index at `dir`.
std::vector<std::string> Tables(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") out.push_back(e.path().string());
  }
  return out;
}

// Pages of `path` in the page cache and pages in all; {-1, -1} on an error.
std::pair<long, long> Resident(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {-1, -1};
  struct stat st;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::pair<long, long> out{-1, -1};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const long pages = (st.st_size + page - 1) / page;
      std::vector<unsigned char> vec(static_cast<size_t>(pages));
      if (::mincore(map, static_cast<size_t>(st.st_size), vec.data()) == 0) {
        long in = 0;
        for (unsigned char v : vec) in += v & 1;
        out = {in, pages};
      }
      ::munmap(map, static_cast<size_t>(st.st_size));
    }
  }
  ::close(fd);
  return out;
}

// Writes the file back and drops it from the page cache.
void Evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::fdatasync(fd), 0) << path;
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
  ::close(fd);
}

class PreloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Some 60,000 entries: tables of over a MB, so that what an open reads of
    // them (footers, indexes, a few blocks) is a small part.
    std::vector<index::MemberEntry> members;
    for (int d = 0; d < 60; ++d) {
      const std::string dir = "d" + std::to_string(d);
      members.push_back(DirMember(dir));
      for (int f = 0; f < 1000; ++f) {
        members.push_back(FileMember(dir + "/file-" + std::to_string(f) + ".jpg", 1000 + f, 1,
                                     512 + uint64_t{512} * (uint64_t(d) * 1000 + f)));
      }
    }
    ASSERT_NE(BuildAndOpen(dir_.path(), members), nullptr);
    idx_ = dir_.path() + "/idx";
    uint64_t largest = 0;
    for (const std::string& t : Tables(idx_))
      largest = std::max<uint64_t>(largest, fs::file_size(t));
    ASSERT_GT(largest, uint64_t{1} << 20) << "the tables should be larger than what an open reads";
    for (const std::string& t : Tables(idx_)) {
      ASSERT_NO_FATAL_FAILURE(Evict(t));
      // A precondition: the test means nothing if the kernel kept them.
      ASSERT_EQ(Resident(t).first, 0) << t << " stayed in the page cache";
    }
  }
  // Pages of all tables resident, pages in all.
  std::pair<long, long> TablesResident() const {
    std::pair<long, long> sum{0, 0};
    for (const std::string& t : Tables(idx_)) {
      auto [in, pages] = Resident(t);
      sum.first += in;
      sum.second += pages;
    }
    return sum;
  }
  TempDir dir_;
  std::string idx_;
};

TEST_F(PreloadTest, AnOpenWithPreloadBringsEveryTableIntoThePageCache) {
  index::ReaderOptions o;
  o.preload = true;
  auto r = index::IndexReader::Open(idx_, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // The preload runs on after Open returns: wait for it (it reads a few MB).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::pair<long, long> got = TablesResident();
  while (got.first < got.second && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    got = TablesResident();
  }
  EXPECT_EQ(got.first, got.second) << "pages of the tables in the page cache";
}

TEST_F(PreloadTest, AnOpenWithoutPreloadReadsOnlyWhatItNeeds) {
  auto r = index::IndexReader::Open(idx_, index::ReaderOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::pair<long, long> got = TablesResident();
  EXPECT_LT(got.first * 2, got.second) << "pages of the tables in the page cache";
}

}  // namespace
}  // namespace shardfs::testing
