// Helpers for the unit tests of src/reader/ and src/mount/ (Filesystem, PushAhead, ShardFiles):
// index real tar shards and open them as a Filesystem, no FUSE.
#ifndef SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "index/index_reader.h"
#include "src/reader/filesystem.h"
#include "tests/unit/test_util.h"
#include "tools/builder/index_build.h"

namespace shardfs::reader_testing {
using reader::EntryRecord;
using reader::Filesystem;
using reader::FilesystemOptions;
using reader::InodeId;

// Indexes `shards` at `idx`.
inline void IndexShards(const std::vector<std::string>& shards, const std::string& idx,
                        bool checksum = true) {
  builder::IndexBuildOptions o;
  o.inputs = shards;
  o.out = idx;
  o.jobs = 1;
  o.quiet = true;
  o.checksum = checksum;
  Result<builder::IndexBuildReport> built = builder::BuildIndex(o);
  ASSERT_TRUE(built.ok()) << built.status().message();
}

// Archives `names` (relative to `src`, in the order given, no recursion)
// into `shard` with GNU tar.
inline void Tar(const std::string& src, const std::string& shard,
                const std::vector<std::string>& names, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {"tar", "--format=gnu", "--no-recursion", "-C", src};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("-cf");
  argv.push_back(shard);
  argv.insert(argv.end(), names.begin(), names.end());
  shardfs::testing::CommandResult r = shardfs::testing::Run(argv);
  ASSERT_TRUE(r.ok()) << r.describe;
}

// Pages of [from, to) of `path` in the page cache with their bytes read, out
// of its pages. `from` must be a multiple of the page size.
inline std::pair<size_t, size_t> ResidentPages(const std::string& path, uint64_t from,
                                               uint64_t to) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  long page = ::sysconf(_SC_PAGESIZE);
  size_t len = static_cast<size_t>(to - from);
  void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(from));
  EXPECT_NE(m, MAP_FAILED);
  std::vector<unsigned char> vec((len + page - 1) / page);
  EXPECT_EQ(::mincore(m, len, vec.data()), 0);
  ::munmap(m, len);
  ::close(fd);
  size_t in = 0;
  for (unsigned char v : vec) in += v & 1;
  return {in, vec.size()};
}

// How many times any process dropped the page cache since boot
// (/proc/vmstat): a test that counts cached pages repeats a case during
// which another process (a test running beside it) dropped them.
inline uint64_t CacheDrops() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  uint64_t value = 0, n = 0;
  while (in >> key >> value) {
    if (key == "drop_pagecache") n += value;
  }
  return n;
}

inline std::unique_ptr<Filesystem> OpenFs(const std::string& idx, FilesystemOptions options = {}) {
  auto r = index::IndexReader::Open(idx);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return nullptr;
  return std::make_unique<Filesystem>(std::move(r).value(), options);
}

inline InodeId InodeOf(const Filesystem& fs, std::string_view path) {
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = fs.reader().LookupPath(path, &rec, &holder);
  EXPECT_TRUE(s.ok()) << path << ": " << s.message();
  return rec.inode;
}

// Whether file `path` of `fs` would be checked before its bytes are served.
inline bool WouldVerify(const Filesystem& fs, std::string_view path) {
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = fs.reader().LookupPath(path, &rec, &holder);
  EXPECT_TRUE(s.ok()) << path << ": " << s.message();
  return fs.WouldVerify(rec.inode, rec.shard);
}

}  // namespace shardfs::reader_testing

#endif  // SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_
