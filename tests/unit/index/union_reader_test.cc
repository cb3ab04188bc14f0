// index/union_reader.h: a manifest of two partitions written by the real
// writer, read as one tree. The expected union is worked out here from the
// members each partition was given and the rules of index/manifest.h ("The
// union"): a directory both hold is one directory with both's entries, and
// a file of the later partition replaces one of the same path.
#include "index/union_reader.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/manifest.h"
#include "index/manifest_builder.h"
#include "index/schema.h"
#include "tests/unit/index/index_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::index {
namespace {

using shardfs::testing::TempDir;

MemberEntry Dir(std::string path) { return shardfs::testing::DirMember(std::move(path)); }
MemberEntry File(std::string path, uint64_t size, uint64_t offset) {
  return shardfs::testing::FileMember(std::move(path), size, /*mtime_ns=*/1, offset);
}

constexpr uint64_t kShardSize = 4096;
// Partition b's shard is a compressed tar: its offsets are in the decoded
// stream, which is longer than the shard.
constexpr uint64_t kDecodedSize = 8192;

// A file of the union as the test expects it: its size, and the partition
// whose member it is.
struct Expected {
  uint64_t size;
  uint32_t partition;
};

class UnionReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Equal bytes in both partitions (400 each), so that two ranks get one
    // partition each.
    WritePartition(0, {Dir("a"), File("a/x", 200, 512), Dir("shared"),
                       File("shared/one", 100, 1024), File("shared/dup", 100, 2048)});
    WritePartition(1, {Dir("b"), File("b/y", 100, 512), Dir("shared"),
                       File("shared/two", 100, 1024), File("shared/dup", 200, 5000)});
    Manifest m;
    std::vector<std::unique_ptr<IndexReader>> parts;
    std::vector<const IndexReader*> raw;
    for (uint32_t p = 0; p < 2; ++p) {
      Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(PartitionPath(p));
      ASSERT_TRUE(r.ok()) << r.status().message();
      ManifestPartition& mp = m.partitions.emplace_back();
      mp.ref = PartitionPath(p);
      mp.db_identity = (*r)->db_identity();
      mp.shard_count = static_cast<uint32_t>((*r)->shards().size());
      raw.push_back(r->get());
      parts.push_back(std::move(*r));
    }
    Result<ManifestTree> tree = BuildUnionTree(raw, {PartitionPath(0), PartitionPath(1)});
    ASSERT_TRUE(tree.ok()) << tree.status().message();
    m.trees.push_back(std::move(*tree));
    shardfs::testing::WriteFile(manifest_, EncodeManifest(m));
  }

  std::string PartitionPath(uint32_t p) const { return dir_ / (p == 0 ? "pa" : "pb"); }
  std::string ShardFile(uint32_t p) const { return dir_ / (p == 0 ? "a.tar" : "b.tar"); }

  void WritePartition(uint32_t p, const std::vector<MemberEntry>& members) {
    IndexWriter w;
    ShardMeta shard;
    shard.path = ShardFile(p);
    shard.size = kShardSize;
    if (p == 1) {
      shard.set_codec(Codec::kGzip);
      SeekTable table;
      table.decoded_size = kDecodedSize;
      table.points.push_back(SeekPoint{});
      std::string value;
      EncodeSeekTable(table, &value);
      w.AddSeekKeys({{EncodeSeekTableKey(ShardId{0}), value}});
    }
    w.AddShard(shard);
    for (const MemberEntry& m : members) w.AddMember(m);
    Result<WriteStats> stats = w.Finish(PartitionPath(p), WriteOptions{});
    ASSERT_TRUE(stats.ok()) << stats.status().message();
  }

  std::unique_ptr<IndexReader> OpenUnion(const ReaderOptions& options = {}) {
    Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(manifest_, options);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : nullptr;
  }

  // Every path of the tree below the root, with its record, by a walk of
  // ForEachChild from the root.
  static std::map<std::string, EntryRecord> Walk(const IndexReader& r) {
    std::map<std::string, EntryRecord> out;
    std::vector<std::pair<std::string, InodeId>> todo = {{"", kRootInode}};
    while (!todo.empty()) {
      // Not a structured binding: clang (the sanitizer build) does not let
      // the lambda below capture one.
      const std::string dir = todo.back().first;
      const InodeId inode = todo.back().second;
      todo.pop_back();
      Status s = r.ForEachChild(inode, "", [&](std::string_view name, const EntryRecord& rec) {
        std::string path = dir.empty() ? std::string(name) : dir + "/" + std::string(name);
        EntryRecord copy = rec;
        copy.target = {};
        out[path] = copy;
        if (rec.type == EntryType::kDir) todo.emplace_back(path, rec.inode);
        return true;
      });
      EXPECT_TRUE(s.ok()) << s.message();
    }
    return out;
  }

  // The union the members above make (index/manifest.h, "The union").
  const std::map<std::string, Expected> kFiles = {
      {"a/x", {200, 0}},        {"b/y", {100, 1}},        {"shared/one", {100, 0}},
      {"shared/two", {100, 1}}, {"shared/dup", {200, 1}},
  };
  const std::set<std::string> kDirs = {"a", "b", "shared"};

  TempDir dir_;
  std::string manifest_ = dir_ / "m.manifest";
};

TEST_F(UnionReaderTest, OpenChoosesTheReaderOnce) {
  std::unique_ptr<IndexReader> u = OpenUnion();
  ASSERT_NE(u, nullptr);
  EXPECT_NE(dynamic_cast<const UnionReader*>(u.get()), nullptr);
  ASSERT_NE(u->manifest(), nullptr);
  EXPECT_EQ(u->manifest()->partitions.size(), 2u);
  ASSERT_EQ(u->partitions().size(), 2u);
  for (const IndexReader* part : u->partitions()) {
    ASSERT_NE(part, nullptr);
    EXPECT_EQ(dynamic_cast<const UnionReader*>(part), nullptr);
    EXPECT_EQ(part->manifest(), nullptr);
    EXPECT_TRUE(part->partitions().empty());
  }
  EXPECT_EQ(u->partitions()[0]->path(), PartitionPath(0));
  EXPECT_EQ(u->partitions()[1]->path(), PartitionPath(1));
  EXPECT_EQ(u->path(), manifest_);
  EXPECT_EQ(u->db_identity().rfind("manifest-", 0), 0u) << u->db_identity();
  EXPECT_EQ(u->version().label(), "default@1");
  EXPECT_EQ(u->version_sets(), nullptr);
  // The union's shard table: the partitions' tables one after the other.
  ASSERT_EQ(u->shards().size(), 2u);
  EXPECT_EQ(u->ShardPath(ShardId{0}), ShardFile(0));
  EXPECT_EQ(u->ShardPath(ShardId{1}), ShardFile(1));
  EXPECT_EQ(u->ShardPath(ShardId{2}), "");
  EXPECT_EQ(u->Meta("partitions"), "2");
  // The union's counts: its files and directories (the root too), as a
  // single build of both partitions' members would count them.
  EXPECT_EQ(u->MetaNumber(kMetaFiles), kFiles.size());
  EXPECT_EQ(u->MetaNumber(kMetaDirs), kDirs.size() + 1);
  EXPECT_EQ(u->max_inode(), u->partitions()[0]->max_inode() + u->partitions()[1]->max_inode());
  EXPECT_GT(u->DiskBytes(), u->partitions()[0]->DiskBytes() + u->partitions()[1]->DiskBytes());
}

TEST_F(UnionReaderTest, TreeIsTheUnionOfThePartitions) {
  std::unique_ptr<IndexReader> u = OpenUnion();
  ASSERT_NE(u, nullptr);
  std::map<std::string, EntryRecord> tree = Walk(*u);
  std::set<std::string> dirs;
  std::map<std::string, Expected> files;
  for (const auto& [path, rec] : tree) {
    if (rec.type == EntryType::kDir) {
      dirs.insert(path);
      continue;
    }
    ASSERT_EQ(rec.type, EntryType::kFile) << path;
    files[path] = {rec.size, rec.shard.value};  // Shard i is partition i's only shard.
  }
  EXPECT_EQ(dirs, kDirs);
  ASSERT_EQ(files.size(), kFiles.size());
  for (const auto& [path, want] : kFiles) {
    ASSERT_TRUE(files.contains(path)) << path;
    EXPECT_EQ(files[path].size, want.size) << path;
    EXPECT_EQ(files[path].partition, want.partition) << path;
  }
  // A union directory lists both partitions' names, in name order.
  std::vector<std::string> names;
  ASSERT_TRUE(
      u->ForEachChild(tree["shared"].inode, "", [&](std::string_view n, const EntryRecord&) {
         names.emplace_back(n);
         return true;
       }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"dup", "one", "two"}));
  names.clear();
  ASSERT_TRUE(
      u->ForEachChild(tree["shared"].inode, "dup", [&](std::string_view n, const EntryRecord&) {
         names.emplace_back(n);
         return true;
       }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"one", "two"}));
}

TEST_F(UnionReaderTest, EveryQuestionAgreesOnOneRecord) {
  std::unique_ptr<IndexReader> u = OpenUnion();
  ASSERT_NE(u, nullptr);
  std::map<std::string, EntryRecord> tree = Walk(*u);
  std::map<uint64_t, EntryRecord> by_inode;
  ASSERT_TRUE(u->ForEachInode(InodeId{1}, [&](const EntryRecord& rec) {
                 by_inode[rec.inode.value] = rec;
                 return true;
               }).ok());
  EXPECT_EQ(by_inode.size(), tree.size() + 1);  // And the root.
  for (const auto& [path, walked] : tree) {
    SCOPED_TRACE(path);
    EntryRecord looked_up, got;
    RecordHolder h1, h2;
    ASSERT_TRUE(u->LookupPath(path, &looked_up, &h1).ok());
    ASSERT_TRUE(u->GetInode(walked.inode, &got, &h2).ok());
    EXPECT_EQ(looked_up.inode, walked.inode);
    EXPECT_EQ(got.inode, walked.inode);
    EXPECT_EQ(got.parent, walked.parent);
    EXPECT_EQ(got.size, walked.size);
    EXPECT_EQ(got.shard, walked.shard);
    EXPECT_EQ(got.offset, walked.offset);
    ASSERT_TRUE(by_inode.contains(walked.inode.value));
    EXPECT_EQ(by_inode[walked.inode.value].parent, walked.parent);
    std::string back;
    ASSERT_TRUE(u->PathOf(walked.inode, &back).ok());
    EXPECT_EQ(back, path);
    EXPECT_TRUE(u->CheckFileRange(got).ok());
  }
  // Names and inodes outside the union.
  EntryRecord rec;
  RecordHolder holder;
  EXPECT_EQ(u->LookupPath("shared/nothing", &rec, &holder).code(), Status::Code::kNotFound);
  EXPECT_EQ(u->GetInode(InodeId{u->max_inode() + 1}, &rec, &holder).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(u->GetInode(InodeId{0}, &rec, &holder).code(), Status::Code::kNotFound);
}

TEST_F(UnionReaderTest, SeekKeysAreThePartitionsOwn) {
  std::unique_ptr<IndexReader> u = OpenUnion();
  ASSERT_NE(u, nullptr);
  // shared/dup lies past the compressed shard's size, inside its decoded
  // stream: the union checks it against the seek table of partition b,
  // which it reads from b as union shard 1.
  EntryRecord dup;
  RecordHolder holder;
  ASSERT_TRUE(u->LookupPath("shared/dup", &dup, &holder).ok());
  EXPECT_EQ(dup.shard.value, 1u);
  EXPECT_GT(dup.offset, kShardSize);
  EXPECT_TRUE(u->CheckFileRange(dup).ok());
  EntryRecord beyond = dup;
  beyond.offset = kDecodedSize;
  EXPECT_EQ(u->CheckFileRange(beyond).code(), Status::Code::kCorruption);

  std::string via_union, via_part;
  ASSERT_TRUE(u->GetSeekValue(ShardId{1}, false, 0, &via_union).ok());
  ASSERT_TRUE(u->partitions()[1]->GetSeekValue(ShardId{0}, false, 0, &via_part).ok());
  EXPECT_EQ(via_union, via_part);
  EXPECT_EQ(u->GetSeekValue(ShardId{0}, false, 0, &via_union).code(), Status::Code::kNotFound);
  EXPECT_EQ(u->GetSeekValue(ShardId{2}, false, 0, &via_union).code(), Status::Code::kNotFound);
  size_t keys = 0;
  ASSERT_TRUE(u->ForEachSeekKey(ShardId{1}, [&](std::string_view, std::string_view) {
                 ++keys;
                 return true;
               }).ok());
  EXPECT_EQ(keys, 1u);
  Result<std::vector<uint64_t>> bytes = u->ShardBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, (std::vector<uint64_t>{400, 400}));
}

// A rank of a manifest is a run of the union's samples, as an index
// directory's: every rank as many (n // world, the rest trimmed), split
// inside a shard where the partitions hold fewer shards than ranks; each
// file on one rank at most, and every question agrees with the listing.
TEST_F(UnionReaderTest, RanksSplitTheUnionsSamples) {
  const uint64_t n = kFiles.size();  // One sample per file: no two share a key.
  for (uint32_t world : {2u, 3u, 5u}) {
    std::map<std::string, uint32_t> owner;
    for (uint32_t rank = 0; rank < world; ++rank) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank << " of " << world);
      ReaderOptions o;
      o.rank = rank;
      o.world = world;
      o.seed = 3;
      std::unique_ptr<IndexReader> u = OpenUnion(o);
      ASSERT_NE(u, nullptr);
      ASSERT_EQ(u->shard_ranks().size(), 2u);
      size_t files = 0;
      for (const auto& [path, rec] : Walk(*u)) {
        if (rec.type != EntryType::kFile) continue;
        ++files;
        EXPECT_TRUE(kFiles.contains(path)) << path;
        EXPECT_TRUE(owner.emplace(path, rank).second) << path << " on two ranks";
        EntryRecord got;
        RecordHolder holder;
        ASSERT_TRUE(u->LookupPath(path, &got, &holder).ok()) << path;
        EXPECT_EQ(got.inode, rec.inode) << path;
        ASSERT_TRUE(u->GetInode(rec.inode, &got, &holder).ok()) << path;
        const uint32_t shard_rank = u->shard_ranks()[rec.shard.value];
        EXPECT_TRUE(shard_rank == rank || shard_rank == world) << path;
      }
      EXPECT_EQ(files, n / world);
      // Another rank's file is not there, by path or by inode.
      for (const auto& [path, want] : kFiles) {
        if (owner.contains(path) && owner.at(path) == rank) continue;
        EntryRecord got;
        RecordHolder holder;
        Status s = u->LookupPath(path, &got, &holder);
        EXPECT_EQ(s.code(), Status::Code::kNotFound) << path;
      }
      size_t inodes = 0;
      ASSERT_TRUE(u->ForEachInode(InodeId{1}, [&](const EntryRecord& rec) {
                     inodes += rec.type == EntryType::kFile;
                     return true;
                   }).ok());
      EXPECT_EQ(inodes, n / world);
    }
    EXPECT_EQ(owner.size(), n - n % world) << "world " << world;
  }
  ReaderOptions o;
  o.world = 6;
  Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(manifest_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("5 samples cannot give each of 6 ranks one"),
            std::string::npos)
      << r.status().message();
}

// One reader shared by threads and by a forked child, as the mount and the
// Python package hold it: the partitions it owns stay valid for its life.
TEST_F(UnionReaderTest, SharedAcrossThreadsAndFork) {
  std::unique_ptr<IndexReader> u = OpenUnion();
  ASSERT_NE(u, nullptr);
  const std::map<std::string, EntryRecord> tree = Walk(*u);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        for (const auto& [path, walked] : tree) {
          EntryRecord rec;
          RecordHolder holder;
          if (!u->LookupPath(path, &rec, &holder).ok() || rec.inode != walked.inode) ++bad;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int wrong = 0;
    for (const auto& [path, walked] : tree) {
      EntryRecord rec;
      RecordHolder holder;
      if (!u->LookupPath(path, &rec, &holder).ok() || rec.inode != walked.inode) ++wrong;
    }
    ::_exit(wrong == 0 && Walk(*u).size() == tree.size() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(UnionReaderTest, AChangedPartitionIsRefused) {
  // Partition b rebuilt (a new database) after the manifest was made.
  std::filesystem::remove_all(PartitionPath(1));
  WritePartition(1, {Dir("b"), File("b/y", 100, 512)});
  Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(manifest_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("changed since the manifest was made"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(PartitionPath(1)), std::string::npos);
}

}  // namespace
}  // namespace shardfs::index
