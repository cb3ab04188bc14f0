// The steps of an index build, each alone: the tree builder fed member lists
// directly (no RocksDB), the emitter's keys collected in memory, and the
// publish step on hand-made key sets. Trees are worked out by hand.
#include "index/tree_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "index/index_publish.h"
#include "index/index_reader.h"
#include "index/member_path.h"
#include "index/tree_emitter.h"
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

namespace fs = std::filesystem;
using shardfs::testing::DirMember;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::SymlinkMember;
using shardfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The node at `path`; fails the test if there is none.
const TreeNode& NodeAt(const Tree& tree, std::string_view path) {
  for (const TreeNode& n : tree.nodes) {
    if (n.path == path) return n;
  }
  ADD_FAILURE() << "no node '" << path << "'";
  static const TreeNode kNone;
  return kNone;
}

// The node holding the inode of `path` (itself, or what its hard link names).
const TreeNode& InodeNodeAt(const Tree& tree, std::string_view path) {
  const TreeNode& n = NodeAt(tree, path);
  return n.hardlink ? tree.nodes[n.link_node] : n;
}

std::vector<std::string> Paths(const Tree& tree) {
  std::vector<std::string> paths;
  for (const TreeNode& n : tree.nodes) paths.emplace_back(n.path);
  return paths;
}

TEST(TreeBuilderTest, InodesAreDenseInTreeOrderWithLinkCounts) {
  std::vector<MemberEntry> members = {FileMember("b/f", 2, 10), DirMember("a", 20),
                                      FileMember("a/x", 3, 30), FileMember("a.b", 5, 50),
                                      DirMember("a/s", 1),      SymlinkMember("l", "a")};
  Tree tree = BuildTree(members);
  EXPECT_THAT(Paths(tree), ElementsAre("", "a", "a/s", "a/x", "a.b", "b", "b/f", "l"));
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    EXPECT_EQ(tree.nodes[i].inode, i + 1) << tree.nodes[i].path;
    EXPECT_FALSE(tree.nodes[i].hardlink);
  }
  EXPECT_EQ(NodeAt(tree, "").nlink, 4u);   // a, b
  EXPECT_EQ(NodeAt(tree, "a").nlink, 3u);  // s
  EXPECT_EQ(NodeAt(tree, "a/s").nlink, 2u);
  EXPECT_EQ(NodeAt(tree, "b/f").nlink, 1u);
  EXPECT_EQ(NodeAt(tree, "l").nlink, 1u);
  EXPECT_EQ(NodeAt(tree, "a/x").parent_node, 1u);
  EXPECT_EQ(NodeAt(tree, "a/x").member, 2);
  EXPECT_EQ(tree.counts.files, 3u);
  EXPECT_EQ(tree.counts.dirs, 4u);
  EXPECT_EQ(tree.counts.implied_dirs, 2u);  // The root and b.
  EXPECT_EQ(tree.counts.symlinks, 1u);
  EXPECT_EQ(tree.counts.bytes, 2u + 3 + 5);
  EXPECT_EQ(tree.counts.max_inode, 8u);
  EXPECT_TRUE(tree.report.refusals.empty());
  EXPECT_EQ(tree.report.replaced, 0u);
}

TEST(TreeBuilderTest, ImpliedDirectoriesTakeTheirNewestChildsMtime) {
  std::vector<MemberEntry> members = {FileMember("x/y/z", 1, 500), FileMember("x/q", 1, 300),
                                      DirMember("e", 0, 0700)};
  Tree tree = BuildTree(members);
  EXPECT_THAT(Paths(tree), ElementsAre("", "e", "x", "x/q", "x/y", "x/y/z"));
  EXPECT_EQ(NodeAt(tree, "x/y").member, kImplied);
  EXPECT_EQ(NodeAt(tree, "x/y").mtime_ns, 500);
  EXPECT_EQ(NodeAt(tree, "x").mtime_ns, 500);
  EXPECT_EQ(NodeAt(tree, "").mtime_ns, 500);
  EXPECT_EQ(NodeAt(tree, "e").mtime_ns, 0);  // A member's own, even 0.
  EXPECT_EQ(tree.counts.implied_dirs, 3u);

  // Without children an implied directory has mtime 0: only the root can be
  // one.
  Tree empty = BuildTree({});
  ASSERT_EQ(empty.nodes.size(), 1u);
  EXPECT_EQ(empty.nodes[0].mtime_ns, 0);
  EXPECT_EQ(empty.nodes[0].nlink, 2u);
  EXPECT_EQ(empty.counts.max_inode, 1u);
}

TEST(TreeBuilderTest, HardLinkToALaterOverwrittenFileKeepsTheOldInode) {
  std::vector<MemberEntry> members = {FileMember("a", 1024), HardLinkMember("b", "a"),
                                      FileMember("a", 4096)};
  Tree tree = BuildTree(members);
  EXPECT_THAT(Paths(tree), ElementsAre("", "a", "b"));
  const TreeNode& a = NodeAt(tree, "a");
  const TreeNode& b = NodeAt(tree, "b");
  EXPECT_EQ(a.member, 2);
  EXPECT_EQ(b.member, 0);    // The old content.
  EXPECT_FALSE(b.hardlink);  // The only name left of its inode.
  EXPECT_NE(a.inode, b.inode);
  EXPECT_EQ(a.nlink, 1u);
  EXPECT_EQ(b.nlink, 1u);
  EXPECT_EQ(tree.counts.files, 2u);
  EXPECT_EQ(tree.counts.hardlinks, 0u);
  EXPECT_EQ(tree.report.replaced, 1u);
  EXPECT_THAT(tree.report.replaced_examples, ElementsAre("a"));
}

TEST(TreeBuilderTest, LinkChainsAreOneInodeCarriedByTheFirstNameInTreeOrder) {
  // "z" is the file, but "a" comes first in tree order and carries the inode.
  std::vector<MemberEntry> members = {FileMember("z", 7), HardLinkMember("m", "z"),
                                      HardLinkMember("a", "m"), HardLinkMember("z", "a")};
  Tree tree = BuildTree(members);
  EXPECT_THAT(Paths(tree), ElementsAre("", "a", "m", "z"));
  const TreeNode& a = NodeAt(tree, "a");
  EXPECT_FALSE(a.hardlink);
  EXPECT_EQ(a.member, 0);
  EXPECT_EQ(a.nlink, 3u);
  EXPECT_EQ(a.inode, 2u);
  for (const char* p : {"m", "z"}) {
    EXPECT_TRUE(NodeAt(tree, p).hardlink) << p;
    EXPECT_EQ(NodeAt(tree, p).link_node, 1u) << p;
    EXPECT_EQ(&InodeNodeAt(tree, p), &a) << p;
  }
  EXPECT_EQ(tree.counts.max_inode, 2u);
  EXPECT_EQ(tree.counts.hardlinks, 2u);
  EXPECT_EQ(tree.counts.bytes, 7u);
  // A link over a name of the same inode changes nothing.
  EXPECT_EQ(tree.report.replaced, 0u);
}

TEST(TreeBuilderTest, FileOverANonEmptyDirectoryIsRefused) {
  std::vector<MemberEntry> members = {
      DirMember("d", 77, 0700),   FileMember("d/x", 1), FileMember("d", 2), SymlinkMember("d", "t"),
      HardLinkMember("d", "d/x"), DirMember("e"),       FileMember("e", 3)};
  Tree tree = BuildTree(members);
  ASSERT_EQ(tree.report.refusals.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tree.report.refusals[i].member, i + 2);
    EXPECT_THAT(tree.report.refusals[i].reason, HasSubstr("'d', which has entries (File exists)"));
  }
  EXPECT_EQ(NodeAt(tree, "d").type, EntryType::kDir);
  EXPECT_EQ(NodeAt(tree, "d").member, 0);
  EXPECT_EQ(NodeAt(tree, "d/x").nlink, 1u);             // The refused link added no name.
  EXPECT_EQ(NodeAt(tree, "e").type, EntryType::kFile);  // Over an empty directory.
  EXPECT_EQ(tree.report.replaced, 1u);
}

TEST(TreeBuilderTest, RefusalsNameTheMemberAndTheReason) {
  std::vector<MemberEntry> members = {FileMember("", 1),         FileMember("n", 1),
                                      FileMember("n/c/deep", 1), HardLinkMember("h", "later"),
                                      FileMember("later", 1),    DirMember("d"),
                                      HardLinkMember("hd", "d"), DirMember("", 5, 0700),
                                      DirMember("", 6, 0750)};
  ReplayedTree replayed = ReplayMembers(members);
  const std::vector<Refusal>& r = replayed.report.refusals;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].member, 0u);
  EXPECT_EQ(r[0].reason, "the root must be a directory");
  EXPECT_EQ(r[1].member, 2u);
  EXPECT_EQ(r[1].reason, "'n' is not a directory");
  EXPECT_EQ(r[2].member, 3u);
  EXPECT_THAT(r[2].reason, HasSubstr("hard link to 'later', which is not in the tree"));
  EXPECT_EQ(r[3].member, 6u);
  EXPECT_EQ(r[3].reason, "hard link to 'd', a directory");
  // The root, described twice: the later member's metadata.
  EXPECT_EQ(replayed.objects[0].member, 8);
  EXPECT_EQ(replayed.report.replaced, 1u);
  EXPECT_THAT(replayed.report.replaced_examples, ElementsAre("/"));
}

TEST(TreeBuilderTest, StepsAlone) {
  std::vector<MemberEntry> members = {FileMember("q/f", 1), FileMember("a", 1),
                                      FileMember("q/f", 2), HardLinkMember("b", "a")};
  ReplayedTree replayed = ReplayMembers(members);
  // root, q (implied), q/f (dead), a, q/f, b.
  ASSERT_EQ(replayed.names.size(), 6u);
  EXPECT_EQ(replayed.names[1].path, "q");
  EXPECT_TRUE(replayed.names[1].has_children);
  EXPECT_EQ(replayed.objects[replayed.names[1].object].member, kImplied);
  EXPECT_FALSE(replayed.names[2].alive);
  EXPECT_EQ(replayed.names[5].object, replayed.names[3].object);  // b is a's inode.
  EXPECT_EQ(replayed.live_names, 5u);

  std::vector<uint32_t> order = SortLiveNames(replayed);
  EXPECT_THAT(order, ElementsAre(0u, 3u, 5u, 1u, 4u));  // "", a, b, q, q/f

  HugeVector<TreeNode> nodes = LinkNodes(replayed, order);
  ASSERT_EQ(nodes.size(), 5u);
  EXPECT_TRUE(nodes[2].hardlink);
  EXPECT_EQ(nodes[2].link_node, 1u);
  EXPECT_EQ(nodes[4].parent_node, 3u);
  EXPECT_EQ(nodes[4].member, 2);
  EXPECT_EQ(nodes[4].inode, 0u);  // Not yet numbered.

  TreeCounts counts = AssignInodes(members, &nodes);
  EXPECT_EQ(counts.max_inode, 4u);
  EXPECT_EQ(counts.hardlinks, 1u);
  EXPECT_EQ(nodes[1].nlink, 2u);
  EXPECT_EQ(nodes[2].inode, 0u);  // A hard link has no inode of its own.
  EXPECT_EQ(nodes[4].inode, 4u);
}

// What an emitter put into a sink, in order.
KeyValues Collect(const std::function<Status(const KvSink&)>& emit) {
  KeyValues kvs;
  Status s = emit([&](std::string_view k, std::string_view v) {
    kvs.emplace_back(std::string(k), std::string(v));
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return kvs;
}

TEST(TreeEmitterTest, DirentKeysByParentInodeThenName) {
  std::vector<MemberEntry> members = {FileMember("b/f", 4, 9, 4096), FileMember("a", 1),
                                      HardLinkMember("b/h", "a"), SymlinkMember("c", "t\xff")};
  Tree tree = BuildTree(members);
  SparseExtents no_extents;
  TreeEmitter emitter(tree, members, no_extents);
  KeyValues kvs = Collect([&](const KvSink& put) { return emitter.EmitDirents(put); });
  // Inodes: root 1, a 2, b 3, b/f 4, c 5; b/h names 2.
  const std::vector<std::pair<uint64_t, std::string>> want = {
      {1, "a"}, {1, "b"}, {1, "c"}, {3, "f"}, {3, "h"}};
  ASSERT_EQ(kvs.size(), want.size());
  std::vector<uint64_t> inodes;
  for (size_t i = 0; i < kvs.size(); ++i) {
    ViewId view;
    InodeId parent;
    std::string_view name;
    ASSERT_TRUE(DecodeDirentKey(kvs[i].first, &view, &parent, &name));
    EXPECT_EQ(view.value, kDefaultView.value);
    EXPECT_EQ(parent.value, want[i].first);
    EXPECT_EQ(name, want[i].second);
    if (i > 0) {
      EXPECT_LT(kvs[i - 1].first, kvs[i].first);
    }
    EntryRecord rec;
    ASSERT_TRUE(DecodeEntry(kvs[i].second, &rec).ok());
    inodes.push_back(rec.inode.value);
  }
  EXPECT_THAT(inodes, ElementsAre(2u, 3u, 5u, 4u, 2u));
  EntryRecord h;
  ASSERT_TRUE(DecodeEntry(kvs[4].second, &h).ok());
  EXPECT_EQ(h.nlink, 2u);
  EXPECT_EQ(h.parent.value, 1u);  // The first directory that names it.
  EntryRecord c;
  ASSERT_TRUE(DecodeEntry(kvs[2].second, &c).ok());
  EXPECT_EQ(c.target, "t\xff");
  EXPECT_EQ(c.mode, static_cast<uint32_t>(S_IFLNK | 0777));
}

TEST(TreeEmitterTest, InodeKeysInOrderWithoutHardLinks) {
  std::vector<MemberEntry> members = {FileMember("d/f", 4, 9, 4096), HardLinkMember("g", "d/f")};
  Tree tree = BuildTree(members);
  SparseExtents no_extents;
  TreeEmitter emitter(tree, members, no_extents);
  KeyValues kvs = Collect([&](const KvSink& put) { return emitter.EmitInodes(put); });
  ASSERT_EQ(kvs.size(), 3u);  // root, d, d/f
  for (uint64_t i = 0; i < kvs.size(); ++i) {
    ViewId view;
    InodeId inode;
    ASSERT_TRUE(DecodeInodeKey(kvs[i].first, &view, &inode));
    EXPECT_EQ(inode.value, i + 1);
    EntryRecord rec;
    ASSERT_TRUE(DecodeEntry(kvs[i].second, &rec).ok());
    EXPECT_EQ(rec.inode.value, i + 1);
  }
  EntryRecord f;
  ASSERT_TRUE(DecodeEntry(kvs[2].second, &f).ok());
  EXPECT_EQ(f.nlink, 2u);
  EXPECT_EQ(f.offset, 4096u);
  EXPECT_EQ(f.uid, 1000u);
  EXPECT_TRUE(f.has_checksum());
  EntryRecord d;
  ASSERT_TRUE(DecodeEntry(kvs[1].second, &d).ok());
  EXPECT_EQ(d.mode, static_cast<uint32_t>(S_IFDIR | 0755));  // Implied.
  EXPECT_EQ(d.mtime_ns, 9);

  // A sink's error stops the emission.
  int calls = 0;
  Status s = emitter.EmitInodes([&](std::string_view, std::string_view) {
    ++calls;
    return Status::IoError("full");
  });
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(calls, 1);
}

TEST(TreeEmitterTest, MetaKeysSortedWithVersionAndCounts) {
  std::vector<MemberEntry> members = {FileMember("f", 10), FileMember("s", 100)};
  members[0].has_checksum = false;
  Tree tree = BuildTree(members);
  SparseExtents extents;
  TreeEmitter plain(tree, members, extents);
  KeyValues meta = plain.MetaKeys(MetaText{"--opts", "me"});
  EXPECT_TRUE(std::is_sorted(meta.begin(), meta.end()));
  auto value = [&](const KeyValues& kvs, std::string_view name) {
    for (const auto& [k, v] : kvs) {
      if (k == EncodeMetaKey(name)) return v;
    }
    return std::string("<absent>");
  };
  EXPECT_EQ(meta.size(), 9u);
  EXPECT_EQ(value(meta, kMetaSchemaVersion), std::to_string(kSchemaVersion));
  EXPECT_EQ(value(meta, kMetaFiles), "2");
  EXPECT_EQ(value(meta, kMetaDirs), "1");
  EXPECT_EQ(value(meta, kMetaBytes), "110");
  EXPECT_EQ(value(meta, kMetaMaxInode), "3");
  EXPECT_EQ(value(meta, kMetaChecksums), "none");
  EXPECT_EQ(value(meta, kMetaBuildOptions), "--opts");
  EXPECT_EQ(value(meta, kMetaCreatedBy), "me");

  // A sparse file in the tree: schema version 2, and its record says so.
  AppendExtent(Extent{0, 10, 1024}, &extents[1]);
  TreeEmitter sparse(tree, members, extents);
  EXPECT_TRUE(sparse.AnySparse());
  EXPECT_EQ(value(sparse.MetaKeys({}), kMetaSchemaVersion), std::to_string(kSparseSchemaVersion));
  EntryRecord rec = sparse.Record(NodeAt(tree, "s"));
  EXPECT_TRUE(rec.sparse());
  EXPECT_EQ(ExtentCount(rec), 1u);
  EXPECT_FALSE(sparse.Record(NodeAt(tree, "f")).sparse());
}

TEST(TreeEmitterTest, ShardPathsRelativeUnderTheBaseAbsoluteElsewhere) {
  std::vector<ShardMeta> shards(3);
  shards[0].path = "/data/idx-home/shards/../a.tar";
  shards[1].path = "/data/elsewhere/b.tar";
  shards[2].path = "/data/idx-home/sub/c.tar";
  shards[2].size = 77;
  Result<KeyValues> kvs = ShardKeys(shards, "/data/idx-home");
  ASSERT_TRUE(kvs.ok()) << kvs.status().message();
  ASSERT_EQ(kvs->size(), 3u);
  std::vector<std::string> paths;
  for (uint32_t i = 0; i < 3; ++i) {
    ShardId id;
    ASSERT_TRUE(DecodeShardKey((*kvs)[i].first, &id));
    EXPECT_EQ(id.value, i);
    ShardMeta meta;
    ASSERT_TRUE(DecodeShardMeta((*kvs)[i].second, &meta).ok());
    paths.push_back(meta.path);
    EXPECT_EQ(static_cast<bool>(meta.flags & kShardPathRelative), i != 1) << i;
    if (i == 2) {
      EXPECT_EQ(meta.size, 77u);
    }
  }
  EXPECT_THAT(paths, ElementsAre("a.tar", "/data/elsewhere/b.tar", "sub/c.tar"));
}

TEST(IndexPublishTest, PublishesReplacesAndLeavesNothingOnFailure) {
  TempDir dir;
  const std::string out = dir / "idx";
  Result<fs::path> out_abs = AbsoluteIndexPath(out + "/");
  ASSERT_TRUE(out_abs.ok());
  EXPECT_EQ(*out_abs, fs::path(out));
  auto meta_part = [](std::string version) {
    return TablePart{"meta.sst", false, [version](const KvSink& put) {
                       return put(EncodeMetaKey(kMetaSchemaVersion), version);
                     }};
  };
  const TablePart empty{"empty.sst", true, [](const KvSink&) { return Status::Ok(); }};
  const TablePart first[] = {empty, meta_part("1")};
  Result<uint64_t> bytes = PublishIndex(out, *out_abs, first);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_GT(*bytes, 0u);
  EXPECT_FALSE(fs::exists(out + "/empty.sst"));
  {
    auto r = IndexReader::Open(out);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)->Meta(kMetaSchemaVersion), "1");
  }
  // Over an existing index: replaced whole.
  const TablePart second[] = {meta_part("2")};
  ASSERT_TRUE(PublishIndex(out, *out_abs, second).ok());
  {
    auto r = IndexReader::Open(out);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)->Meta(kMetaSchemaVersion), "2");
  }
  // A failing part: the old index stays, nothing temporary is left.
  const TablePart failing[] = {meta_part("1"), {"bad.sst", true, [](const KvSink&) {
                                                  return Status::IoError("disk on fire");
                                                }}};
  Result<uint64_t> failed = PublishIndex(out, *out_abs, failing);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("disk on fire"));
  EXPECT_THAT(failed.status().message(), HasSubstr(out));
  auto r = IndexReader::Open(out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->Meta(kMetaSchemaVersion), "2");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // Whatever its caller decided, a publish replaces no directory that is
  // not an index: refused, the directory as it was, nothing left beside.
  const std::string data = dir / "data";
  fs::create_directory(data);
  testing::WriteFile(data + "/notes", "mine");
  Result<uint64_t> refused = PublishIndex(data, fs::path(data), second);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(data + ": is a directory that holds no"));
  EXPECT_EQ(testing::ReadFile(data + "/notes"), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(data), fs::directory_iterator()), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
}

}  // namespace
}  // namespace shardfs::index
