// index/index_writer.h -> index/index_reader.h with hand-built members: the
// tree the writer assembles is checked against trees worked out by hand.
#include "index/index_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "index/db_options.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::ChildNames;
using shardfs::testing::DirMember;
using shardfs::testing::EntryAt;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::PathExists;
using shardfs::testing::SymlinkMember;
using shardfs::testing::TempDir;
using ::testing::HasSubstr;

class IndexWriterTest : public shardfs::testing::WriterFixture {
 protected:
  // Depth-first preorder of the tree as the reader shows it, name order.
  static void Preorder(const IndexReader& r, InodeId dir, const std::string& prefix,
                       std::vector<std::pair<std::string, uint64_t>>* out) {
    std::vector<std::pair<std::string, EntryRecord>> kids;
    Status s = r.ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& rec) {
      kids.emplace_back(std::string(name), rec);
      return true;
    });
    ASSERT_TRUE(s.ok()) << s.message();
    for (const auto& [name, rec] : kids) {
      std::string path = prefix.empty() ? name : prefix + "/" + name;
      out->emplace_back(path, rec.inode.value);
      if (rec.type == EntryType::kDir) Preorder(r, rec.inode, path, out);
    }
  }
};

TEST_F(IndexWriterTest, InodesAreDenseInTreeOrderWithRootOne) {
  WriteStats stats;
  auto r = Build({FileMember("b/file2", 2, 10), DirMember("a", 20), FileMember("a/x", 3, 30),
                  FileMember("c/d/e", 4, 40), FileMember("a.b", 5, 50), FileMember("a0", 6, 60)},
                 &stats);
  ASSERT_TRUE(r);
  // Worked out by hand: depth-first, siblings by bytes, '/' before all.
  const std::vector<std::string> want = {"a",       "a/x", "a.b", "a0",   "b",
                                         "b/file2", "c",   "c/d", "c/d/e"};
  std::vector<std::pair<std::string, uint64_t>> got;
  Preorder(*r, kRootInode, "", &got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i]);
    EXPECT_EQ(got[i].second, i + 2) << want[i];  // Root is 1.
  }
  EXPECT_EQ(EntryAt(*r, "").inode, kRootInode);
  EXPECT_EQ(EntryAt(*r, "").parent, kRootInode);
  EXPECT_EQ(r->MetaNumber(kMetaMaxInode), 10u);
  EXPECT_EQ(r->MetaNumber(kMetaFiles), 5u);
  EXPECT_EQ(r->MetaNumber(kMetaDirs), 5u);  // root, a, b, c, c/d
  EXPECT_EQ(r->MetaNumber(kMetaBytes), 2u + 3 + 4 + 5 + 6);
  EXPECT_EQ(r->Meta(kMetaChecksums), "xxh3");
  EXPECT_EQ(r->Meta(kMetaSchemaVersion), std::to_string(kSchemaVersion));
  EXPECT_EQ(stats.files, 5u);
  EXPECT_EQ(stats.dirs, 5u);
  for (uint64_t i = 1; i <= 10; ++i) {
    EntryRecord rec;
    RecordHolder holder;
    ASSERT_TRUE(r->GetInode(InodeId{i}, &rec, &holder).ok()) << i;
    EXPECT_EQ(rec.inode.value, i);
  }
  EntryRecord rec;
  RecordHolder holder;
  EXPECT_EQ(r->GetInode(InodeId{11}, &rec, &holder).code(), Status::Code::kNotFound);
  EXPECT_EQ(r->GetInode(InodeId{0}, &rec, &holder).code(), Status::Code::kNotFound);
  // Parents are the inodes of the containing directories.
  EXPECT_EQ(EntryAt(*r, "c/d/e").parent, EntryAt(*r, "c/d").inode);
  EXPECT_EQ(EntryAt(*r, "a/x").parent, EntryAt(*r, "a").inode);
  EXPECT_EQ(EntryAt(*r, "a0").parent, kRootInode);
}

TEST_F(IndexWriterTest, FileRecordsCarryTheMemberFields) {
  MemberEntry f = FileMember("d/f.bin", 12345, -1500000000, 4096, 04751);
  f.uid = 4000000000u;
  f.gid = 77;
  MemberEntry g = FileMember("d/nosum", 1, 2, 9999, 0600);
  g.has_checksum = false;
  g.mode = 0170600;  // Type bits from the member are ignored.
  auto r = Build({f, g, SymlinkMember("d/l", "../some where/\xff")});
  ASSERT_TRUE(r);
  EntryRecord rec = EntryAt(*r, "d/f.bin");
  EXPECT_EQ(rec.type, EntryType::kFile);
  EXPECT_EQ(rec.mode, static_cast<uint32_t>(S_IFREG | 04751));
  EXPECT_EQ(rec.uid, 4000000000u);
  EXPECT_EQ(rec.gid, 77u);
  EXPECT_EQ(rec.size, 12345u);
  EXPECT_EQ(rec.mtime_ns, -1500000000);
  EXPECT_EQ(rec.offset, 4096u);
  EXPECT_EQ(rec.shard.value, 0u);
  EXPECT_TRUE(rec.has_checksum());
  EXPECT_EQ(rec.xxh3, 0x1234u + 12345);
  EXPECT_EQ(rec.nlink, 1u);
  EntryRecord nosum = EntryAt(*r, "d/nosum");
  EXPECT_FALSE(nosum.has_checksum());
  EXPECT_EQ(nosum.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(r->Meta(kMetaChecksums), "none");

  EntryRecord link;
  RecordHolder holder;
  ASSERT_TRUE(r->LookupPath("d/l", &link, &holder).ok());
  EXPECT_EQ(link.type, EntryType::kSymlink);
  EXPECT_EQ(link.mode, static_cast<uint32_t>(S_IFLNK | 0777));
  EXPECT_EQ(link.target, "../some where/\xff");
  EXPECT_EQ(link.size, link.target.size());
}

TEST_F(IndexWriterTest, LaterMemberOfTheSamePathWins) {
  WriteStats stats;
  auto r =
      Build({FileMember("f", 1, 10, 100), DirMember("d", 5), FileMember("f", 2, 20, 200),
             FileMember("g", 7, 1), FileMember("d", 3, 30, 300), SymlinkMember("f", "target-3")},
            &stats);
  ASSERT_TRUE(r);
  EntryRecord f;
  RecordHolder holder;
  ASSERT_TRUE(r->LookupPath("f", &f, &holder).ok());
  EXPECT_EQ(f.type, EntryType::kSymlink);
  EXPECT_EQ(f.target, "target-3");
  EntryRecord d = EntryAt(*r, "d");
  EXPECT_EQ(d.type, EntryType::kFile);
  EXPECT_EQ(d.offset, 300u);
  EXPECT_EQ(d.size, 3u);
  EXPECT_EQ(ChildNames(*r, kRootInode), (std::vector<std::string>{"d", "f", "g"}));
  EXPECT_EQ(stats.replaced, 3u);
  EXPECT_THAT(stats.replaced_examples, ::testing::UnorderedElementsAre("d", "f"));
}

// Enough members, out of order, that the sort runs on two threads; every
// path is added twice, the copies far apart, and the later copy must win.
TEST_F(IndexWriterTest, LaterMemberWinsInALargeUnsortedInput) {
  constexpr int kFiles = 40000;
  std::vector<MemberEntry> members;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = kFiles; i-- > 0;) {
      members.push_back(
          FileMember(fmt::format("d{}/f{}", i % 7, i), 1 + pass, 1, 512 + 1024 * pass));
    }
  }
  WriteStats stats;
  auto r = Build(members, &stats);
  ASSERT_TRUE(r);
  EXPECT_EQ(stats.files, static_cast<uint64_t>(kFiles));
  EXPECT_EQ(stats.replaced, static_cast<uint64_t>(kFiles));
  for (int i : {0, 1, kFiles / 2, kFiles - 1}) {
    EntryRecord f = EntryAt(*r, fmt::format("d{}/f{}", i % 7, i));
    EXPECT_EQ(f.size, 2u) << i;
    EXPECT_EQ(f.offset, 1536u) << i;
  }
  EXPECT_EQ(ChildNames(*r, kRootInode).size(), 7u);
}

// Only the root: there are no directory entries at all, only 'I' and 'M'.
TEST_F(IndexWriterTest, RootAlone) {
  WriteStats stats;
  auto r = Build({DirMember("", 42, 0700)}, &stats);
  ASSERT_TRUE(r);
  EntryRecord root = EntryAt(*r, "");
  EXPECT_EQ(root.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  EXPECT_EQ(root.mtime_ns, 42);
  EXPECT_TRUE(ChildNames(*r, kRootInode).empty());
  EXPECT_EQ(stats.dirs, 1u);
}

TEST_F(IndexWriterTest, MissingParentsAreSynthesized) {
  WriteStats stats;
  auto r = Build({DirMember("", 42, 0700), FileMember("x/y/z", 1, 500), FileMember("x/y/w", 1, 900),
                  FileMember("x/q", 1, 300), SymlinkMember("x/s", "q", 100)},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord x = EntryAt(*r, "x");
  EntryRecord y = EntryAt(*r, "x/y");
  EXPECT_EQ(x.type, EntryType::kDir);
  EXPECT_EQ(x.mode, static_cast<uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(y.mode, static_cast<uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(y.mtime_ns, 900);  // Newest child.
  EXPECT_EQ(x.mtime_ns, 900);  // Newest child, y, itself synthesized.
  EXPECT_EQ(x.uid, 0u);
  // The root was a member: its own mode and mtime stay.
  EntryRecord root = EntryAt(*r, "");
  EXPECT_EQ(root.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  EXPECT_EQ(root.mtime_ns, 42);
  EXPECT_EQ(stats.synthesized_dirs, 2u);
  EXPECT_EQ(stats.dirs, 3u);
  EXPECT_EQ(stats.files, 3u);
  EXPECT_EQ(stats.symlinks, 1u);
}

TEST_F(IndexWriterTest, SynthesizedRootTakesNewestChild) {
  auto r =
      Build({FileMember("old", 1, 100), DirMember("new", 5000), FileMember("new/inner", 1, 90000)});
  ASSERT_TRUE(r);
  EntryRecord root = EntryAt(*r, "");
  EXPECT_EQ(root.mode, static_cast<uint32_t>(S_IFDIR | 0755));
  // "new" is a member (mtime 5000), so the root's newest child is 5000,
  // not the grandchild.
  EXPECT_EQ(root.mtime_ns, 5000);
}

TEST_F(IndexWriterTest, DirectoryLinkCountIsTwoPlusSubdirectories) {
  auto r = Build({DirMember("p", 1), DirMember("p/s1", 1), FileMember("p/f", 1, 1),
                  FileMember("p/s2/deep/f", 1, 1), FileMember("top", 1, 1),
                  SymlinkMember("p/link", "s1")});
  ASSERT_TRUE(r);
  EXPECT_EQ(EntryAt(*r, "").nlink, 3u);   // p
  EXPECT_EQ(EntryAt(*r, "p").nlink, 4u);  // s1, s2
  EXPECT_EQ(EntryAt(*r, "p/s1").nlink, 2u);
  EXPECT_EQ(EntryAt(*r, "p/s2").nlink, 3u);  // deep
  EXPECT_EQ(EntryAt(*r, "p/s2/deep").nlink, 2u);
  EXPECT_EQ(EntryAt(*r, "p/f").nlink, 1u);
  EXPECT_EQ(EntryAt(*r, "p/link").nlink, 1u);
}

TEST_F(IndexWriterTest, HardLinksShareOneInode) {
  WriteStats stats;
  // A link may come before its target in tree order ("a/..." < "data/...").
  auto r = Build({FileMember("data/f", 100, 77, 4096), HardLinkMember("links/h1", "data/f"),
                  HardLinkMember("a/h0", "data/f"), HardLinkMember("links/h2", "links/h1")},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord f = EntryAt(*r, "data/f");
  for (const char* p : {"links/h1", "a/h0", "links/h2"}) {
    EntryRecord h = EntryAt(*r, p);
    EXPECT_EQ(h.inode, f.inode) << p;
    EXPECT_EQ(h.size, 100u) << p;
    EXPECT_EQ(h.offset, 4096u) << p;
    EXPECT_EQ(h.mtime_ns, 77) << p;
    EXPECT_EQ(h.nlink, 4u) << p;
  }
  EXPECT_EQ(f.nlink, 4u);
  EXPECT_EQ(stats.hardlinks, 3u);
  EXPECT_EQ(stats.files, 1u);
  EXPECT_EQ(r->MetaNumber(kMetaBytes), 100u);  // Each inode once.
  EXPECT_EQ(r->MetaNumber(kMetaFiles), 1u);
  // Inodes: root, a, data, data/f, links -> 5; no inode for a link name.
  EXPECT_EQ(r->MetaNumber(kMetaMaxInode), 5u);
}

TEST_F(IndexWriterTest, BadHardLinksAreDropped) {
  WriteStats stats;
  auto r = Build({FileMember("f", 1, 1), DirMember("d", 1), HardLinkMember("to-missing", "nowhere"),
                  HardLinkMember("to-dir", "d"), HardLinkMember("ok", "f")},
                 &stats);
  ASSERT_TRUE(r);
  EXPECT_FALSE(PathExists(*r, "to-missing"));
  EXPECT_FALSE(PathExists(*r, "to-dir"));
  EXPECT_EQ(EntryAt(*r, "ok").inode, EntryAt(*r, "f").inode);
  EXPECT_EQ(EntryAt(*r, "f").nlink, 2u);
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_THAT(stats.dropped_examples,
              ::testing::UnorderedElementsAre(HasSubstr("to-missing"), HasSubstr("to-dir")));
  EXPECT_EQ(ChildNames(*r, kRootInode), (std::vector<std::string>{"d", "f", "ok"}));
}

// As in tar: nothing is created below a file or a symlink ("Not a
// directory"); the file or symlink stays.
TEST_F(IndexWriterTest, NothingIsPlacedBelowANonDirectory) {
  WriteStats stats;
  auto r = Build({FileMember("n", 5, 1), FileMember("n/child", 1, 2), SymlinkMember("s", "x"),
                  DirMember("s/inner", 3), FileMember("plain", 1, 1)},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord n = EntryAt(*r, "n");
  EXPECT_EQ(n.type, EntryType::kFile);
  EXPECT_EQ(n.size, 5u);
  EXPECT_FALSE(PathExists(*r, "n/child"));
  EXPECT_EQ(EntryAt(*r, "s").type, EntryType::kSymlink);
  EXPECT_FALSE(PathExists(*r, "s/inner"));
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_THAT(stats.dropped_examples,
              ::testing::UnorderedElementsAre(HasSubstr("'n/child' at byte"),
                                              HasSubstr("'s/inner' at byte")));
  EXPECT_EQ(r->MetaNumber(kMetaFiles), 2u);  // n, plain
}

TEST_F(IndexWriterTest, RootMustBeADirectory) {
  WriteStats stats;
  auto r = Build({FileMember("", 1, 1), FileMember("a", 1, 1)}, &stats);
  ASSERT_TRUE(r);
  EXPECT_EQ(EntryAt(*r, "").type, EntryType::kDir);
  EXPECT_EQ(stats.dropped, 1u);
}

TEST_F(IndexWriterTest, LookupForEachChildAndResolve) {
  std::vector<MemberEntry> ms;
  // "dir/a" is implied here; the file "dir/a" that comes later cannot replace
  // it, as it has an entry (tar: "File exists").
  ms.push_back(FileMember("dir/a/deeper", 9, 1));
  for (std::string name : {"b", "a b", "A", "\xff", "a", "a\n", "aa"}) {
    ms.push_back(FileMember("dir/" + name, name.size(), 1));
  }
  ms.push_back(FileMember("file", 1, 1));
  auto r = Build(ms);
  ASSERT_TRUE(r);
  InodeId dir = EntryAt(*r, "dir").inode;
  const std::vector<std::string> all = {"A", "a", "a\n", "a b", "aa", "b", "\xff"};
  EXPECT_EQ(ChildNames(*r, dir), all);
  EXPECT_EQ(ChildNames(*r, dir, "a"), (std::vector<std::string>{"a\n", "a b", "aa", "b", "\xff"}));
  EXPECT_EQ(ChildNames(*r, dir, "ab"), (std::vector<std::string>{"b", "\xff"}));  // Not a name.
  EXPECT_EQ(ChildNames(*r, dir, "\xff"), std::vector<std::string>{});
  EXPECT_EQ(ChildNames(*r, EntryAt(*r, "file").inode), std::vector<std::string>{});
  // The callback can stop early.
  int calls = 0;
  ASSERT_TRUE(r->ForEachChild(dir, "", [&](std::string_view, const EntryRecord&) {
                 return ++calls < 3;
               }).ok());
  EXPECT_EQ(calls, 3);
  // Children carry their own records.
  ASSERT_TRUE(r->ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& rec) {
                 if (name != "a") {
                   EXPECT_EQ(rec.size, name.size()) << name;
                 }
                 EXPECT_EQ(rec.parent, dir);
                 return true;
               }).ok());

  EntryRecord rec;
  RecordHolder holder;
  ASSERT_TRUE(r->Lookup(dir, "a b", &rec, &holder).ok());
  EXPECT_EQ(rec.size, 3u);
  EXPECT_EQ(r->Lookup(dir, "a c", &rec, &holder).code(), Status::Code::kNotFound);
  EXPECT_EQ(r->Lookup(dir, std::string(300, 'x'), &rec, &holder).code(), Status::Code::kNotFound);
  EXPECT_EQ(r->Lookup(kRootInode, "a b", &rec, &holder).code(), Status::Code::kNotFound);
  ASSERT_TRUE(r->LookupPath("./dir//a/./deeper", &rec, &holder).ok());
  EXPECT_EQ(rec.size, 9u);
  ASSERT_TRUE(r->LookupPath("", &rec, &holder).ok());
  EXPECT_EQ(rec.inode, kRootInode);
  EXPECT_EQ(r->LookupPath("dir/nope", &rec, &holder).code(), Status::Code::kNotFound);
  EXPECT_EQ(r->LookupPath("file/x", &rec, &holder).code(), Status::Code::kNotFound);
}

TEST_F(IndexWriterTest, ShardPathRelativeUnderTheIndexParentAbsoluteElsewhere) {
  TempDir elsewhere;
  const std::string home = dir_ / "home";
  fs::create_directories(home + "/shards/sub");
  IndexWriter w;
  ShardMeta inside;
  inside.path = home + "/shards/sub/../a.tar";
  w.AddShard(inside);
  ShardMeta beside;
  beside.path = home + "/b.tar";
  w.AddShard(beside);
  ShardMeta outside;
  outside.path = elsewhere / "c.tar";
  w.AddShard(outside);
  w.AddMember(FileMember("f", 1, 1));
  Result<WriteStats> stats = w.Finish(home + "/idx", WriteOptions{});
  ASSERT_TRUE(stats.ok()) << stats.status().message();

  {
    auto r = IndexReader::Open(home + "/idx");
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto& shards = (*r)->shards();
    ASSERT_EQ(shards.size(), 3u);
    EXPECT_EQ(shards[0].path, "shards/a.tar");
    EXPECT_TRUE(shards[0].flags & kShardPathRelative);
    EXPECT_EQ(shards[1].path, "b.tar");
    EXPECT_TRUE(shards[1].flags & kShardPathRelative);
    EXPECT_EQ(shards[2].path, elsewhere / "c.tar");
    EXPECT_FALSE(shards[2].flags & kShardPathRelative);
    EXPECT_EQ(fs::path((*r)->ShardPath(ShardId{0})).lexically_normal(),
              fs::path(home + "/shards/a.tar"));
    EXPECT_EQ((*r)->ShardPath(ShardId{2}), elsewhere / "c.tar");
  }
  // Move the index with its shards: relative paths follow, absolute stay.
  const std::string moved = dir_ / "moved";
  fs::rename(home, moved);
  auto r = IndexReader::Open(moved + "/idx/");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(fs::path((*r)->ShardPath(ShardId{0})).lexically_normal(),
            fs::path(moved + "/shards/a.tar"));
  EXPECT_EQ(fs::path((*r)->ShardPath(ShardId{1})).lexically_normal(), fs::path(moved + "/b.tar"));
  EXPECT_EQ((*r)->ShardPath(ShardId{2}), elsewhere / "c.tar");
}

TEST_F(IndexWriterTest, FinishRefusesExistingOutputUnlessForced) {
  const std::string out = dir_ / "idx";
  {
    IndexWriter w;
    w.AddMember(FileMember("first", 1, 1));
    ASSERT_TRUE(w.Finish(out, WriteOptions{}).ok());
  }
  {
    IndexWriter w;
    w.AddMember(FileMember("second", 1, 1));
    Result<WriteStats> again = w.Finish(out, WriteOptions{});
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists);
    EXPECT_THAT(again.status().message(), HasSubstr(out));
    auto r = IndexReader::Open(out);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(PathExists(**r, "first"));
  }
  {
    IndexWriter w;
    w.AddMember(FileMember("second", 1, 1));
    WriteOptions force;
    force.force = true;
    Result<WriteStats> replaced = w.Finish(out, force);
    ASSERT_TRUE(replaced.ok()) << replaced.status().message();
    auto r = IndexReader::Open(out);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(PathExists(**r, "first"));
    EXPECT_TRUE(PathExists(**r, "second"));
  }
  // A plain file in the way is refused, with force too: it is no index.
  testing::WriteFile(dir_ / "plain", "not an index");
  {
    IndexWriter w;
    EXPECT_EQ(w.Finish(dir_ / "plain", WriteOptions{}).status().code(),
              Status::Code::kAlreadyExists);
    WriteOptions force;
    force.force = true;
    Result<WriteStats> refused = w.Finish(dir_ / "plain", force);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), HasSubstr(dir_ / "plain"));
    EXPECT_THAT(refused.status().message(), HasSubstr("is a file"));
    EXPECT_EQ(testing::ReadFile(dir_ / "plain"), "not an index");
  }
  // Nothing temporary is left beside the outputs.
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    std::string name = e.path().filename();
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    EXPECT_EQ(name.find(".old-"), std::string::npos) << name;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 2);
}

TEST_F(IndexWriterTest, FinishIntoAMissingDirectoryFailsAndLeavesNothing) {
  IndexWriter w;
  w.AddMember(FileMember("f", 1, 1));
  Result<WriteStats> r = w.Finish(dir_ / "no/such/dir/idx", WriteOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(dir_ / "no/such/dir/idx"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 0);
}

// A RocksDB database written directly, with the given meta entries.
void WriteRawDb(const std::string& path, const std::map<std::string, std::string>& kvs);

// What --force may replace: a shardfs index (of any schema version) or an
// empty directory; what it replaces is gone afterwards and nothing is left
// beside it. Anything else stays as it was, byte for byte.
TEST_F(IndexWriterTest, ForceReplacesOnlyAnIndexOrAnEmptyDirectory) {
  WriteOptions force;
  force.force = true;
  auto build = [&](const std::string& out) {
    IndexWriter w;
    w.AddMember(FileMember("new", 1, 1));
    return w.Finish(out, force);
  };
  auto is_new_index = [](const std::string& out) {
    auto r = IndexReader::Open(out);
    return r.ok() && PathExists(**r, "new");
  };
  fs::create_directory(dir_ / "empty");
  ASSERT_TRUE(build(dir_ / "empty").ok());
  EXPECT_TRUE(is_new_index(dir_ / "empty"));
  // An index of a schema this build does not read is still an index.
  WriteRawDb(dir_ / "future", {{EncodeMetaKey(kMetaSchemaVersion), "999"}});
  EXPECT_TRUE(IsShardfsIndex(dir_ / "future"));
  ASSERT_TRUE(build(dir_ / "future").ok());
  EXPECT_TRUE(is_new_index(dir_ / "future"));

  // Refused: a directory with files, a RocksDB database without the meta
  // key, a symlink (even to an index).
  fs::create_directory(dir_ / "data");
  testing::WriteFile(dir_ / "data/README", "mine");
  WriteRawDb(dir_ / "other-db", {{EncodeMetaKey(kMetaFiles), "1"}});
  fs::create_directory_symlink(dir_ / "empty", dir_ / "link");
  for (const char* name : {"data", "other-db", "link"}) {
    const std::string out = dir_ / name;
    EXPECT_FALSE(IsShardfsIndex(out)) << name;
    Result<WriteStats> r = build(out);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << name;
    EXPECT_THAT(r.status().message(), HasSubstr(out));
    EXPECT_THAT(r.status().message(), HasSubstr("--force replaces only a shardfs index"));
  }
  EXPECT_EQ(testing::ReadFile(dir_ / "data/README"), "mine");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_TRUE(is_new_index(dir_ / "link"));  // The index it names is untouched.
  EXPECT_FALSE(IsShardfsIndex(dir_ / "missing"));
  EXPECT_FALSE(IsShardfsIndex(dir_ / "data/README"));
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    const std::string name = e.path().filename();
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
  }
}

// A RocksDB database written directly, with the given meta entries.
void WriteRawDb(const std::string& path, const std::map<std::string, std::string>& kvs) {
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [k, v] : kvs) ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, v).ok());
  ASSERT_TRUE(db->Close().ok());
}

TEST_F(IndexWriterTest, OpenRejectsWhatIsNotAnIndex) {
  auto missing = IndexReader::Open(dir_ / "missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound) << missing.status().message();
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ / "missing"));

  fs::create_directory(dir_ / "plain-dir");
  auto plain = IndexReader::Open(dir_ / "plain-dir");
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(plain.status().message(), HasSubstr(dir_ / "plain-dir"));

  testing::WriteFile(dir_ / "file", "x");
  auto file = IndexReader::Open(dir_ / "file");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Status::Code::kInvalidArgument);

  WriteRawDb(dir_ / "no-version", {{EncodeMetaKey(kMetaFiles), "1"}});
  auto no_version = IndexReader::Open(dir_ / "no-version");
  ASSERT_FALSE(no_version.ok());
  EXPECT_EQ(no_version.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(no_version.status().message(), HasSubstr("schema"));

  WriteRawDb(dir_ / "future", {{EncodeMetaKey(kMetaSchemaVersion), "999"}});
  auto future = IndexReader::Open(dir_ / "future");
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.status().code(), Status::Code::kNotSupported);
  EXPECT_THAT(future.status().message(), HasSubstr("999"));

  WriteRawDb(dir_ / "garbled", {{EncodeMetaKey(kMetaSchemaVersion), "one"}});
  auto garbled = IndexReader::Open(dir_ / "garbled");
  ASSERT_FALSE(garbled.ok());
  EXPECT_EQ(garbled.status().code(), Status::Code::kCorruption);

  // The current version, written by hand, opens.
  WriteRawDb(dir_ / "current",
             {{EncodeMetaKey(kMetaSchemaVersion), std::to_string(kSchemaVersion)}});
  EXPECT_TRUE(IndexReader::Open(dir_ / "current").ok());
}

}  // namespace
}  // namespace shardfs::index
