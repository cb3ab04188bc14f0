// Helpers for the unit tests of reader/ (Filesystem, PushAhead, ShardFiles):
// index real tar shards and open them as a Filesystem, no FUSE.
#ifndef SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "builder/index_build.h"
#include "index/index_reader.h"
#include "reader/filesystem.h"
#include "tests/unit/test_util.h"

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

}  // namespace shardfs::reader_testing

#endif  // SHARDFS_TESTS_UNIT_READER_TEST_UTIL_H_
