// Helpers for the unit tests of index/ and the libraries above it: archive
// members made by hand, small indexes written with index/index_writer.h and
// opened, and what a test asks of an opened index.
#ifndef SHARDFS_TESTS_UNIT_INDEX_INDEX_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_INDEX_INDEX_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "tests/unit/test_util.h"

// Archive members made by hand.
// Files are in shard 0 with a checksum (0x1234 + size), uid 1000, gid 100.
namespace shardfs::testing {

index::MemberEntry FileMember(std::string path, uint64_t size, int64_t mtime_ns = 1,
                              uint64_t offset = 512, uint32_t mode = 0644);
index::MemberEntry DirMember(std::string path, int64_t mtime_ns = 1, uint32_t mode = 0755,
                             uint32_t uid = 0);
index::MemberEntry SymlinkMember(std::string path, std::string target, int64_t mtime_ns = 7);
// Its size and mtime are junk: a hard link's data fields are ignored.
index::MemberEntry HardLinkMember(std::string path, std::string target, uint64_t header_offset = 0);

// Writes `members` as an index at `dir`/idx, with one shard `dir`/s.tar of
// 1 MiB, and opens it. On failure records a test failure and returns nullptr.
std::unique_ptr<index::IndexReader> BuildAndOpen(const std::string& dir,
                                                 const std::vector<index::MemberEntry>& members,
                                                 index::WriteStats* stats = nullptr);
// The record at `path` (a test failure if there is none); its target is
// cleared, as the bytes it pointed into are gone.
index::EntryRecord EntryAt(const index::IndexReader& r, std::string_view path);

// A fixture whose tests write members into a temporary folder of their own
// and open the index (BuildAndOpen).
class WriterFixture : public ::testing::Test {
 protected:
  std::unique_ptr<index::IndexReader> Build(const std::vector<index::MemberEntry>& members,
                                            index::WriteStats* stats = nullptr) {
    return BuildAndOpen(dir_.path(), members, stats);
  }
  TempDir dir_;
};
bool PathExists(const index::IndexReader& r, std::string_view path);

// Writes at `idx` an index of a/, a/f, b and l -> a/f (in shard `dir`/s.tar
// of 4 KiB) whose directory a also lists the root, as 'up': damage, or a hand
// edit (index_surgery.h). A walk of the tree that followed it would list a,
// a/up, a/up/a, ... without end. Records a test failure if it cannot.
void WriteIndexWithALoop(const std::string& dir, const std::string& idx);
// The names in directory `dir` after `start_after`, in readdir order.
std::vector<std::string> ChildNames(const index::IndexReader& r, index::InodeId dir,
                                    std::string_view start_after = "");

}  // namespace shardfs::testing

#endif  // SHARDFS_TESTS_UNIT_INDEX_INDEX_TEST_UTIL_H_
