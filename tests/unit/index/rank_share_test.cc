// A rank's share of a view (index/rank_share.h) over an unranked reader's
// listing: one shard of ten one-file samples in three directories and a
// symlink, so that every rank's run is cut inside the shard.
#include "index/rank_share.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/rank_partition.h"
#include "index/sample_walk.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

using shardfs::testing::DirMember;
using shardfs::testing::EntryAt;
using shardfs::testing::FileMember;
using shardfs::testing::SymlinkMember;

class RankShareTest : public shardfs::testing::WriterFixture {
 protected:
  void SetUp() override {
    std::vector<MemberEntry> members = {DirMember("d0"), DirMember("d1"), DirMember("d2"),
                                        DirMember("empty")};
    for (int i = 0; i < 10; ++i) {
      const std::string path = "d" + std::to_string(i % 3) + "/f" + std::to_string(i) + ".jpg";
      members.push_back(FileMember(path, 100, 1, 512 + 1024 * static_cast<uint64_t>(i)));
      files_.push_back(path);
    }
    members.push_back(SymlinkMember("link", "d0/f0.jpg"));
    reader_ = Build(members);
    ASSERT_NE(reader_, nullptr);
  }

  Result<std::unique_ptr<RankShare>> Share(uint32_t rank, uint32_t world, bool keep_dirs) const {
    const IndexReader* r = reader_.get();
    ReaderOptions o;
    o.rank = rank;
    o.world = world;
    o.seed = 5;
    o.rank_keep_dirs = keep_dirs;
    return RankShare::Make(
        *r, [r](InodeId dir, const auto& fn) { return r->ForEachChild(dir, "", fn); }, 1, o);
  }

  std::unique_ptr<IndexReader> reader_;
  std::vector<std::string> files_;
};

// Each file on one rank at most, as many on each, the rest trimmed; a
// symlink by RankOfSymlink; a directory where something below it is of the
// rank or nothing is below it at all (every directory with rank_keep_dirs).
TEST_F(RankShareTest, DecidesEveryRecord) {
  const EntryRecord link = EntryAt(*reader_, "link");
  const uint32_t world = 4;
  std::map<std::string, uint32_t> owner;
  for (uint32_t k = 0; k < world; ++k) {
    SCOPED_TRACE(k);
    Result<std::unique_ptr<RankShare>> share = Share(k, world, false);
    ASSERT_TRUE(share.ok()) << share.status().message();
    // The shard's samples are split between ranks: it has no one rank.
    EXPECT_EQ((*share)->ShardRanks(), std::vector<uint32_t>{world});
    std::map<std::string, bool> dir_holds;
    size_t files = 0;
    for (const std::string& path : files_) {
      if (!(*share)->Holds(EntryAt(*reader_, path))) continue;
      ++files;
      EXPECT_TRUE(owner.emplace(path, k).second) << path << " on two ranks";
      dir_holds[path.substr(0, 2)] = true;
    }
    EXPECT_EQ(files, 10u / world);
    for (const char* dir : {"d0", "d1", "d2"}) {
      EXPECT_EQ((*share)->Holds(EntryAt(*reader_, dir)), dir_holds[dir]) << dir;
    }
    EXPECT_TRUE((*share)->Holds(EntryAt(*reader_, "empty")));
    EXPECT_EQ((*share)->Holds(link), RankOfSymlink(link.inode.value, world, 5) == k);
    share = Share(k, world, true);
    ASSERT_TRUE(share.ok()) << share.status().message();
    for (const char* dir : {"d0", "d1", "d2"}) {
      EXPECT_TRUE((*share)->Holds(EntryAt(*reader_, dir))) << dir;
    }
  }
  EXPECT_EQ(owner.size(), 10u - 10u % world);
}

TEST_F(RankShareTest, ARankOutsideTheWorldAndTooFewSamplesAreRefused) {
  EXPECT_EQ(Share(4, 4, false).status().code(), Status::Code::kInvalidArgument);
  Result<std::unique_ptr<RankShare>> s = Share(0, 11, false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("10 samples cannot give each of 11 ranks one"),
            std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace shardfs::index
