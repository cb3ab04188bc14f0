// The split of a view's samples into equal runs per rank
// (index/rank_partition.h), alone and as an index directory's reader
// applies it to a written index (index/db_reader.h, index/sample_walk.h).
#include "index/rank_partition.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/sample_walk.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

// For each rank (and `world` for the trimmed), the (shard, sample) pairs
// SampleSplit gives it, sample i of a shard at offset 1000 * i.
std::vector<std::set<std::pair<uint32_t, uint64_t>>> Owners(const std::vector<uint64_t>& counts,
                                                            uint32_t world, uint64_t seed) {
  Result<SampleSplit> split = SampleSplit::Make("idx", counts, world, seed);
  EXPECT_TRUE(split.ok()) << split.status().message();
  std::vector<std::set<std::pair<uint32_t, uint64_t>>> owners(world + 1);
  if (!split.ok()) return owners;
  for (uint32_t s = 0; s < counts.size(); ++s) {
    if (!split->NeedsKeys(s)) continue;
    std::vector<SampleKey> keys;
    for (uint64_t i = counts[s]; i-- > 0;) keys.push_back({1000 * i, 7});  // Any order.
    split->SetKeys(s, keys);
  }
  for (uint32_t s = 0; s < counts.size(); ++s) {
    for (uint64_t i = 0; i < counts[s]; ++i) {
      const uint32_t r = split->RankOf(s, {1000 * i, 7});
      EXPECT_LE(r, world);
      // A later member of the sample (adjacent in the shard) goes with it.
      EXPECT_EQ(split->RankOf(s, {1000 * i + 512, 9}), r);
      owners[r].emplace(s, i);
    }
  }
  return owners;
}

TEST(SampleSplitTest, EqualRunsTrimmedAndDisjoint) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {120, 80, 101, 97, 151}, {549, 451}, {1, 0, 3, 1000, 2}, {7, 7}};
  for (const auto& counts : layouts) {
    uint64_t n = 0;
    for (uint64_t c : counts) n += c;
    for (uint32_t world : {1u, 2u, 3u, 4u, 8u}) {
      for (uint64_t seed : {0ull, 5ull}) {
        SCOPED_TRACE(
            fmt::format("{} shards, {} samples, world {}, seed {}", counts.size(), n, world, seed));
        auto owners = Owners(counts, world, seed);
        uint64_t seen = 0;
        for (uint32_t r = 0; r < world; ++r) {
          EXPECT_EQ(owners[r].size(), n / world) << "rank " << r;
          seen += owners[r].size();
        }
        EXPECT_EQ(owners[world].size(), n % world);  // Trimmed.
        EXPECT_EQ(seen + owners[world].size(), n);   // Disjoint: every sample once.
        // A rank's run is contiguous in the shards' order: whole shards
        // between a first and a last, so over shards of about equal
        // samples it touches at most shards/world + 2.
        std::vector<uint32_t> order;
        for (uint32_t s : ShardOrder(counts.size(), seed)) {
          if (counts[s] != 0) order.push_back(s);
        }
        for (uint32_t r = 0; r < world; ++r) {
          std::map<uint32_t, uint64_t> mine;  // Shard -> its samples here.
          for (const auto& o : owners[r]) ++mine[o.first];
          std::vector<size_t> at;
          for (size_t i = 0; i < order.size(); ++i) {
            if (mine.count(order[i])) at.push_back(i);
          }
          ASSERT_FALSE(at.empty());
          EXPECT_EQ(at.back() - at.front() + 1, at.size()) << "rank " << r;
          for (size_t i = 1; i + 1 < at.size(); ++i) {
            EXPECT_EQ(mine[order[at[i]]], counts[order[at[i]]]) << "rank " << r;
          }
          if (counts.size() == 5 && counts[3] < 1000) {
            EXPECT_LE(mine.size(), counts.size() / world + 2) << "rank " << r;
          }
        }
        EXPECT_EQ(Owners(counts, world, seed), owners);  // Same on every node.
      }
    }
  }
}

TEST(SampleSplitTest, SeedsGiveRanksOtherShards) {
  const std::vector<uint64_t> counts(10, 100);
  EXPECT_NE(Owners(counts, 4, 1), Owners(counts, 4, 2));
  EXPECT_EQ(ShardOrder(10, 3), ShardOrder(10, 3));
}

TEST(SampleSplitTest, FewerSamplesThanRanksRefused) {
  Result<SampleSplit> s = SampleSplit::Make("/data/x.idx", {1, 0, 2}, 4, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find(
                "index /data/x.idx: 3 samples cannot give each of 4 ranks one; use world <= 3"),
            std::string::npos)
      << s.status().message();
  EXPECT_TRUE(SampleSplit::Make("/data/x.idx", {1, 0, 2}, 3, 0).ok());
}

TEST(SampleSplitTest, SampleKeyIsTheNameUpToItsFirstDot) {
  EXPECT_EQ(SampleKeyOf("n0001.jpg"), "n0001");
  EXPECT_EQ(SampleKeyOf("n0001.seg.png"), "n0001");
  EXPECT_EQ(SampleKeyOf("README"), "README");
  EXPECT_EQ(SampleKeyOf(".hidden"), "");
}

// An index of `shards` shards holding `samples` samples of two adjacent
// files each (cNN/sNNNN.jpg and .cls), dealt to the shards unevenly and
// spread over 3 class directories, plus a symlink.
class RankedIndexTest : public shardfs::testing::WriterFixture {
 protected:
  void Write(uint32_t shards, uint32_t samples) {
    IndexWriter w;
    for (uint32_t s = 0; s < shards; ++s) {
      ShardMeta meta;
      meta.path = fmt::format("{}/s{}.tar", dir_.path(), s);
      meta.size = 64 << 20;
      w.AddShard(meta);
    }
    std::vector<uint64_t> end(shards, 0);
    for (uint32_t i = 0; i < samples; ++i) {
      const uint32_t shard = (i * i + i / 3) % shards;
      const std::string stem = fmt::format("c{:02}/s{:04}", i % 3, i);
      for (const char* ext : {".cls", ".jpg"}) {
        MemberEntry m = shardfs::testing::FileMember(stem + ext, 100 + i % 7, 1, end[shard] + 512);
        m.shard = ShardId{shard};
        end[shard] += 1024;
        w.AddMember(m);
        sample_of_[stem + ext] = stem;
      }
    }
    w.AddMember(shardfs::testing::SymlinkMember("link", "c00/s0000.jpg"));
    idx_ = fmt::format("{}/idx{}-{}", dir_.path(), shards, samples);
    Result<WriteStats> r = w.Finish(idx_, WriteOptions{});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }

  // The files rank `rank` of `world` shows, by walking its tree.
  std::set<std::string> Files(uint32_t rank, uint32_t world, uint64_t seed) {
    ReaderOptions o;
    o.rank = rank;
    o.world = world;
    o.seed = seed;
    Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(idx_, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    std::set<std::string> files;
    if (!r.ok()) return files;
    std::vector<std::pair<InodeId, std::string>> stack{{kRootInode, ""}};
    while (!stack.empty()) {
      const InodeId dir = stack.back().first;
      const std::string prefix = std::move(stack.back().second);
      stack.pop_back();
      EXPECT_TRUE((*r)->ForEachChild(dir, "",
                                     [&](std::string_view name, const EntryRecord& rec) {
                                       const std::string path = prefix + std::string(name);
                                       if (rec.type == EntryType::kDir)
                                         stack.emplace_back(rec.inode, path + "/");
                                       if (rec.type == EntryType::kFile) files.insert(path);
                                       RecordHolder holder;
                                       EntryRecord again;
                                       EXPECT_TRUE((*r)->GetInode(rec.inode, &again, &holder).ok())
                                           << path;
                                       return true;
                                     })
                      .ok());
    }
    return files;
  }

  std::string idx_;
  std::map<std::string, std::string> sample_of_;
};

TEST_F(RankedIndexTest, EqualSampleCountsAndSamplesWhole) {
  for (uint32_t shards : {5u, 2u}) {
    Write(shards, 101);
    for (uint32_t world : {2u, 3u, 4u, 8u}) {
      for (uint64_t seed : {0ull, 3ull}) {
        SCOPED_TRACE(fmt::format("{} shards, world {}, seed {}", shards, world, seed));
        std::map<std::string, uint32_t> owner;  // Sample -> rank.
        std::set<std::string> seen;
        for (uint32_t k = 0; k < world; ++k) {
          std::set<std::string> files = Files(k, world, seed);
          std::set<std::string> samples;
          for (const std::string& f : files) {
            samples.insert(sample_of_[f]);
            auto [it, first] = owner.emplace(sample_of_[f], k);
            EXPECT_EQ(it->second, k) << f << ": its sample is split between ranks";
            EXPECT_TRUE(seen.insert(f).second) << f << " on two ranks";
          }
          EXPECT_EQ(samples.size(), 101u / world) << "rank " << k;
          EXPECT_EQ(files.size(), 2 * samples.size()) << "rank " << k;
          EXPECT_EQ(Files(k, world, seed), files) << "rank " << k << " again";
        }
        EXPECT_EQ(owner.size(), 101u - 101u % world);  // The rest are trimmed.
      }
    }
  }
}

TEST_F(RankedIndexTest, ALargeViewIsWalkedAgainForTheCutShardsKeys) {
  Write(5, 101);
  Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(idx_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const IndexReader& reader = **r;
  const ChildLister list = [&](InodeId dir, const auto& fn) {
    return reader.ForEachChild(dir, "", fn);
  };
  for (uint32_t world : {2u, 3u, 8u}) {
    Result<SampleSplit> kept = SplitSamples(reader, list, 5, world, 4);
    Result<SampleSplit> walked = SplitSamples(reader, list, 5, world, 4, /*kept_keys=*/10);
    ASSERT_TRUE(kept.ok() && walked.ok());
    EXPECT_EQ(walked->samples(), 101u);
    EXPECT_EQ(walked->per_rank(), 101u / world);
    // Every file's rank is the same either way.
    for (const auto& [path, sample] : sample_of_) {
      const EntryRecord rec = shardfs::testing::EntryAt(reader, path);
      const SampleKey key{rec.offset, rec.inode.value};
      EXPECT_EQ(walked->RankOf(rec.shard.value, key), kept->RankOf(rec.shard.value, key))
          << path << " of " << sample;
    }
  }
}

TEST_F(RankedIndexTest, FewerSamplesThanRanksRefusedAtOpen) {
  Write(2, 3);
  ReaderOptions o;
  o.rank = 0;
  o.world = 4;
  Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(idx_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  const std::string want =
      fmt::format("index {}: 3 samples cannot give each of 4 ranks one; use world <= 3", idx_);
  EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  o.world = 3;
  EXPECT_EQ(Files(2, 3, 0).size(), 2u);
}

}  // namespace
}  // namespace shardfs::index
