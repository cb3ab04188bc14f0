// The writer's tree rules (index/index_writer.h), each as GNU tar 1.34
// extraction behaves; tests/integration/test_tar_semantics.py checks the same
// rules end to end against a real `tar -x`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "tests/unit/test_util.h"

namespace shardfs::index {
namespace {

using shardfs::testing::TempDir;
using ::testing::HasSubstr;

MemberEntry Member(std::string path, EntryType type, uint32_t mode = 0644, int64_t mtime = 1) {
  MemberEntry m;
  m.path = std::move(path);
  m.type = type;
  m.mode = mode;
  m.mtime_ns = mtime;
  return m;
}
MemberEntry File(std::string path, uint64_t offset, uint64_t size = 3) {
  MemberEntry m = Member(std::move(path), EntryType::kFile);
  m.offset = offset;
  m.size = size;
  m.header_offset = offset - 512;
  return m;
}
MemberEntry Dir(std::string path, uint32_t mode, uint32_t uid, int64_t mtime) {
  MemberEntry m = Member(std::move(path), EntryType::kDir, mode, mtime);
  m.uid = uid;
  return m;
}
MemberEntry Link(std::string path, std::string target, uint64_t header_offset = 0) {
  MemberEntry m = Member(std::move(path), EntryType::kFile);
  m.is_hardlink = true;
  m.link_target = std::move(target);
  m.header_offset = header_offset;
  return m;
}
MemberEntry Symlink(std::string path, std::string target) {
  MemberEntry m = Member(std::move(path), EntryType::kSymlink, 0777);
  m.link_target = std::move(target);
  return m;
}

class WriterSemanticsTest : public ::testing::Test {
 protected:
  std::unique_ptr<IndexReader> Build(const std::vector<MemberEntry>& members,
                                     WriteStats* stats = nullptr) {
    IndexWriter w;
    ShardMeta meta;
    meta.path = dir_ / "s.tar";
    w.AddShard(meta);
    for (const MemberEntry& m : members) w.AddMember(m);
    Result<WriteStats> r = w.Finish(dir_ / "idx", WriteOptions{});
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return nullptr;
    if (stats) *stats = r.value();
    Result<std::unique_ptr<IndexReader>> reader = IndexReader::Open(dir_ / "idx");
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    return reader.ok() ? std::move(reader).value() : nullptr;
  }
  static EntryRecord At(const IndexReader& r, std::string_view path) {
    EntryRecord rec;
    RecordHolder holder;
    Status s = r.Resolve(path, &rec, &holder);
    EXPECT_TRUE(s.ok()) << "'" << path << "': " << s.message();
    rec.target = {};
    return rec;
  }
  static bool Exists(const IndexReader& r, std::string_view path) {
    EntryRecord rec;
    RecordHolder holder;
    return r.Resolve(path, &rec, &holder).ok();
  }
  TempDir dir_;
};

TEST_F(WriterSemanticsTest, HardLinkNamesTheInodeItsTargetHadWhenMet) {
  auto r = Build({File("a", 1024), Link("b", "a"), Link("c", "b"), File("a", 4096)});
  ASSERT_TRUE(r);
  EntryRecord a = At(*r, "a"), b = At(*r, "b"), c = At(*r, "c");
  EXPECT_EQ(a.offset, 4096u);
  EXPECT_EQ(a.nlink, 1u);
  EXPECT_EQ(b.offset, 1024u);  // The old content.
  EXPECT_EQ(b.inode, c.inode);
  EXPECT_NE(a.inode, b.inode);
  EXPECT_EQ(b.nlink, 2u);
}

TEST_F(WriterSemanticsTest, HardLinkToASymlinkIsASecondNameOfIt) {
  auto r = Build({Symlink("s", "tgt"), Link("h", "s")});
  ASSERT_TRUE(r);
  EntryRecord s = At(*r, "s"), h = At(*r, "h");
  EXPECT_EQ(h.type, EntryType::kSymlink);
  EXPECT_EQ(h.inode, s.inode);
  EXPECT_EQ(h.nlink, 2u);
}

TEST_F(WriterSemanticsTest, HardLinkToALaterOrMissingMemberIsRefused) {
  WriteStats stats;
  auto r = Build({Link("early", "a", 0), File("a", 1024), Link("none", "zz", 2048)}, &stats);
  ASSERT_TRUE(r);
  EXPECT_FALSE(Exists(*r, "early"));
  EXPECT_FALSE(Exists(*r, "none"));
  EXPECT_EQ(At(*r, "a").nlink, 1u);
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_THAT(stats.dropped_examples,
              ::testing::ElementsAre(HasSubstr("member 'early' at byte 0: hard link to 'a'"),
                                     HasSubstr("member 'none' at byte 2048")));
  EXPECT_THAT(stats.dropped_examples[0], HasSubstr("s.tar"));
}

TEST_F(WriterSemanticsTest, NonDirectoryCannotReplaceADirectoryWithEntries) {
  WriteStats stats;
  auto r = Build({Dir("d", 0700, 5, 77), File("d/x", 1024), File("d", 2048), Symlink("d", "t")},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord d = At(*r, "d");
  EXPECT_EQ(d.type, EntryType::kDir);
  EXPECT_EQ(d.mode, static_cast<uint32_t>(S_IFDIR | 0700));  // Not a made-up 0755.
  EXPECT_EQ(d.uid, 5u);
  EXPECT_EQ(d.mtime_ns, 77);
  EXPECT_TRUE(Exists(*r, "d/x"));
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_EQ(stats.synthesized_dirs, 1u);  // The root only.
}

TEST_F(WriterSemanticsTest, ReplacementsTarMakes) {
  auto r = Build({Dir("e", 0700, 0, 1), File("e", 1024), File("g", 2048), Dir("g", 0750, 0, 2),
                  Dir("k", 0700, 5, 3), File("k/x", 3072), Dir("k", 0751, 6, 4)});
  ASSERT_TRUE(r);
  EXPECT_EQ(At(*r, "e").type, EntryType::kFile);  // Over an empty directory.
  EXPECT_EQ(At(*r, "g").type, EntryType::kDir);
  EntryRecord k = At(*r, "k");  // The later member's metadata; entries stay.
  EXPECT_EQ(k.mode, static_cast<uint32_t>(S_IFDIR | 0751));
  EXPECT_EQ(k.uid, 6u);
  EXPECT_EQ(k.mtime_ns, 4);
  EXPECT_TRUE(Exists(*r, "k/x"));
}

TEST_F(WriterSemanticsTest, MadeUpDirectoriesOnlyWhereNoMemberDescribesOne) {
  WriteStats stats;
  auto r = Build({File("d/x", 1024), Dir("d", 0700, 9, 5), File("n", 2048), File("n/c", 3072)},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord d = At(*r, "d");
  EXPECT_EQ(d.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  EXPECT_EQ(d.uid, 9u);
  EXPECT_EQ(At(*r, "n").type, EntryType::kFile);
  EXPECT_FALSE(Exists(*r, "n/c"));
  EXPECT_EQ(stats.synthesized_dirs, 1u);  // The root only.
  EXPECT_EQ(stats.dropped, 1u);
}

}  // namespace
}  // namespace shardfs::index
