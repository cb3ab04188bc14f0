// The bounded-memory build (index/bounded_build.h) against the in-memory
// one: the same members, one build with a budget so small that every
// possible cut is made, compared key for key, with the same report.
#include "index/bounded_build.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "index/external_sort.h"
#include "index/index_writer.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::DirMember;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::SymlinkMember;
using shardfs::testing::TempDir;

// A member and, if sparse, its extents.
struct Input {
  MemberEntry member;
  std::optional<std::vector<Extent>> extents;
};

using KeyDump = std::vector<std::pair<std::string, std::string>>;

KeyDump DumpKeys(const std::string& path) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options options;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &raw);
  EXPECT_TRUE(s.ok()) << path << ": " << s.ToString();
  if (!s.ok()) return {};
  std::unique_ptr<rocksdb::DB> db(raw);
  KeyDump out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  return out;
}

std::string Hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

class BoundedBuildTest : public ::testing::Test {
 protected:
  // Builds `inputs` (split over `shards` shards, in order) both ways and
  // expects the same keys and the same report. Returns the chunk count.
  size_t ExpectSame(const std::vector<Input>& inputs, int shards = 2, uint64_t memory = 1) {
    const std::string a = dir_.path() + "/mem", b = dir_.path() + "/bounded";
    fs::remove_all(a);
    fs::remove_all(b);
    WriteOptions wo;
    wo.build_options = "test";
    wo.created_by = "test";
    IndexWriter mem;
    auto bounded = BoundedIndexWriter::Create(b, memory, 1);
    EXPECT_TRUE(bounded.ok()) << bounded.status().message();
    if (!bounded.ok()) return 0;
    for (int s = 0; s < shards; ++s) {
      ShardMeta meta;
      meta.path = dir_.path() + fmt::format("/s{}.tar", s);
      meta.size = 1 << 20;
      mem.AddShard(meta);
      (*bounded)->AddShard(meta);
    }
    MemberSpiller* spiller = (*bounded)->spiller(0);
    int shard = -1;
    for (size_t i = 0; i < inputs.size(); ++i) {
      MemberEntry m = inputs[i].member;
      m.shard = ShardId{static_cast<uint32_t>(i * shards / std::max<size_t>(1, inputs.size()))};
      if (static_cast<int>(m.shard.value) != shard) {
        shard = static_cast<int>(m.shard.value);
        spiller->BeginShard(m.shard);
      }
      const std::vector<Extent>* extents = inputs[i].extents ? &*inputs[i].extents : nullptr;
      EXPECT_TRUE(spiller->Add(m, extents).ok());
      if (extents) {
        mem.AddSparseMember(m, *extents);
      } else {
        mem.AddMember(m);
      }
    }
    auto sm = mem.Finish(a, wo);
    auto sb = (*bounded)->Finish(b, wo);
    EXPECT_TRUE(sm.ok()) << sm.status().message();
    EXPECT_TRUE(sb.ok()) << sb.status().message();
    const size_t chunks = (*bounded)->chunks();
    bounded->reset();  // Removes the spill directory.
    if (!sm.ok() || !sb.ok()) return 0;
    const KeyDump ka = DumpKeys(a), kb = DumpKeys(b);
    EXPECT_EQ(ka.size(), kb.size());
    for (size_t i = 0; i < std::min(ka.size(), kb.size()); ++i) {
      EXPECT_EQ(Hex(ka[i].first), Hex(kb[i].first)) << "key " << i;
      EXPECT_EQ(Hex(ka[i].second), Hex(kb[i].second)) << "value of key " << Hex(ka[i].first);
      if (ka[i] != kb[i]) break;
    }
    EXPECT_EQ(sm->files, sb->files);
    EXPECT_EQ(sm->dirs, sb->dirs);
    EXPECT_EQ(sm->synthesized_dirs, sb->synthesized_dirs);
    EXPECT_EQ(sm->symlinks, sb->symlinks);
    EXPECT_EQ(sm->hardlinks, sb->hardlinks);
    EXPECT_EQ(sm->bytes, sb->bytes);
    EXPECT_EQ(sm->replaced, sb->replaced);
    EXPECT_EQ(sm->replaced_examples, sb->replaced_examples);
    EXPECT_EQ(sm->dropped, sb->dropped);
    EXPECT_EQ(sm->dropped_examples, sb->dropped_examples);
    // Nothing is left beside the indexes.
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir_.path())) {
      (void)e;
      ++entries;
    }
    EXPECT_EQ(entries, 2u);
    return chunks;
  }

  static std::vector<Input> Plain(const std::vector<MemberEntry>& members) {
    std::vector<Input> out;
    for (const MemberEntry& m : members) out.push_back(Input{m, std::nullopt});
    return out;
  }

  TempDir dir_;
};

// The cases of index_writer_semantics_test.cc and tree_builder_test.cc.
TEST_F(BoundedBuildTest, SemanticsCases) {
  const std::vector<std::vector<MemberEntry>> cases = {
      {FileMember("a", 3, 1, 1024), HardLinkMember("b", "a"), HardLinkMember("c", "b"),
       FileMember("a", 3, 1, 4096)},
      {SymlinkMember("s", "tgt"), HardLinkMember("h", "s")},
      {HardLinkMember("early", "a", 0), FileMember("a", 3, 1, 1024),
       HardLinkMember("none", "zz", 2048)},
      {DirMember("d", 77, 0700, 5), FileMember("d/x", 3, 1, 1024), FileMember("d", 3, 1, 2048),
       SymlinkMember("d", "t")},
      {FileMember("f", 1), DirMember("f"), FileMember("f/x", 1), DirMember("e"), FileMember("e", 2),
       SymlinkMember("e", "z"), DirMember("e", 5), HardLinkMember("g", "e")},
      {FileMember("x/y/z", 1, 50), DirMember("x", 9), FileMember("x/y/w", 1, -3), DirMember("", 4),
       DirMember("", 8), FileMember("", 1)},
      {FileMember("a/b", 1), FileMember("a", 1), FileMember("a/b/c", 1), HardLinkMember("a", "a/b"),
       HardLinkMember("q", "a/b"), FileMember("a/b", 2), HardLinkMember("r", "q")},
      {DirMember("d"), HardLinkMember("d", "f"), FileMember("f", 1), HardLinkMember("d", "f"),
       HardLinkMember("d", "f"), FileMember("d/x", 1)},
  };
  for (const auto& c : cases) ExpectSame(Plain(c));
}

// Random archives over a small set of paths, so that every rule meets
// every other: replacements, links (to files, symlinks, directories, later
// and missing paths), directories over files and back, implied
// directories, the root, sparse files, negative mtimes.
TEST_F(BoundedBuildTest, RandomArchives) {
  const std::vector<std::string> names = {"a", "b", "a.b", "a-"};
  std::vector<std::string> paths = {""};
  for (const auto& x : names) {
    paths.push_back(x);
    for (const auto& y : names) {
      paths.push_back(x + "/" + y);
      for (const auto& z : {"a", "z"}) paths.push_back(x + "/" + y + "/" + z);
    }
  }
  size_t multi_chunk = 0;
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    std::vector<Input> inputs;
    const size_t count = 20 + pick(seed % 3 == 0 ? 400 : 60);
    for (size_t i = 0; i < count; ++i) {
      const std::string& p = paths[1 + pick(paths.size() - 1)];
      const int64_t mtime = static_cast<int64_t>(pick(1000)) - 100;
      Input in;
      switch (pick(10)) {
        case 0:
        case 1:
          in.member = DirMember(p, mtime, 0700 + static_cast<uint32_t>(pick(8)),
                                static_cast<uint32_t>(pick(3)));
          break;
        case 2:
          in.member = SymlinkMember(p, "t" + std::to_string(i), mtime);
          break;
        case 3:
        case 4:
          in.member = HardLinkMember(p, paths[pick(paths.size())], i * 512);
          break;
        case 5:
          in.member = FileMember(p, 100, mtime, i * 1024);
          in.extents = std::vector<Extent>{{0, 10, i * 1024}, {50, 20, i * 1024 + 512}};
          break;
        case 6:
          in.member = DirMember("", mtime);
          if (pick(4) == 0) in.member = FileMember("", 1);
          break;
        default:
          in.member = FileMember(p, pick(5000), mtime, i * 1024);
          in.member.has_checksum = pick(20) != 0;
          break;
      }
      in.member.header_offset = i * 512;
      inputs.push_back(std::move(in));
    }
    SCOPED_TRACE(fmt::format("seed {}", seed));
    if (ExpectSame(inputs, 1 + static_cast<int>(pick(3))) > 1) ++multi_chunk;
    if (HasFailure()) break;
  }
  EXPECT_GT(multi_chunk, 20u);  // The cuts were exercised.
}

// A flat archive of many files: cut into many chunks, and a larger budget
// still gives the same keys.
TEST_F(BoundedBuildTest, ManyChunks) {
  std::vector<Input> inputs;
  for (int d = 0; d < 20; ++d) {
    for (int f = 0; f < 50; ++f) {
      inputs.push_back(Input{FileMember(fmt::format("d{}/s{}/f{}", d % 7, d, f), f, f), {}});
    }
  }
  EXPECT_GT(ExpectSame(inputs, 3), 100u);
  EXPECT_GE(ExpectSame(inputs, 3, 64 << 20), 1u);
}

}  // namespace
}  // namespace shardfs::index

namespace shardfs::index {
namespace {

// Runs from two writers, merged through several levels (a fan-in of 3):
// every record once, in key order, equal keys in the order of the runs.
TEST(ExternalSortTest, MergesManyRunsInKeyOrder) {
  shardfs::testing::TempDir dir;
  std::atomic<uint64_t> counter{0};
  RunWriter a(dir.path(), "a", 1, &counter), b(dir.path(), "b", 1, &counter);
  std::vector<std::pair<std::string, std::string>> want;
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const std::string key = fmt::format("k{:05d}", rng() % 2000);
    const std::string value(rng() % 300, static_cast<char>('a' + i % 26));
    ASSERT_TRUE((i % 2 ? a : b).Add(key, value).ok());
    want.emplace_back(key, value);
  }
  ASSERT_TRUE(a.Flush().ok());
  ASSERT_TRUE(b.Flush().ok());
  std::vector<std::string> runs = a.runs();
  runs.insert(runs.end(), b.runs().begin(), b.runs().end());
  EXPECT_GT(runs.size(), 9u);
  std::vector<std::pair<std::string, std::string>> got;
  ASSERT_TRUE(MergeRuns(
                  runs,
                  [&](std::string_view k, std::string_view v) {
                    got.emplace_back(k, v);
                    return Status::Ok();
                  },
                  4096, dir.path(), "m", 3)
                  .ok());
  std::sort(want.begin(), want.end());
  std::vector<std::pair<std::string, std::string>> got_sorted = got;
  std::sort(got_sorted.begin(), got_sorted.end());
  EXPECT_EQ(got_sorted, want);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end(),
                             [](const auto& x, const auto& y) { return x.first < y.first; }));
  // A damaged run is an error naming it, not a short merge.
  const std::string bad = dir.path() + "/bad";
  {
    std::FILE* f = std::fopen(bad.c_str(), "wb");
    std::fputs("\x05\x05k", f);
    std::fclose(f);
  }
  Status s = MergeRuns(
      {bad}, [](std::string_view, std::string_view) { return Status::Ok(); }, 4096, dir.path(),
      "m");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad"), std::string::npos);
}

}  // namespace
}  // namespace shardfs::index
