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
#include "tests/unit/index/index_test_util.h"

namespace shardfs::index {
namespace {

using shardfs::testing::DirMember;
using shardfs::testing::EntryAt;
using shardfs::testing::FileMember;
using shardfs::testing::HardLinkMember;
using shardfs::testing::PathExists;
using shardfs::testing::SymlinkMember;
using ::testing::HasSubstr;

class WriterSemanticsTest : public shardfs::testing::WriterFixture {};

TEST_F(WriterSemanticsTest, HardLinkNamesTheInodeItsTargetHadWhenMet) {
  auto r = Build({FileMember("a", 3, 1, 1024), HardLinkMember("b", "a"), HardLinkMember("c", "b"),
                  FileMember("a", 3, 1, 4096)});
  ASSERT_TRUE(r);
  EntryRecord a = EntryAt(*r, "a"), b = EntryAt(*r, "b"), c = EntryAt(*r, "c");
  EXPECT_EQ(a.offset, 4096u);
  EXPECT_EQ(a.nlink, 1u);
  EXPECT_EQ(b.offset, 1024u);  // The old content.
  EXPECT_EQ(b.inode, c.inode);
  EXPECT_NE(a.inode, b.inode);
  EXPECT_EQ(b.nlink, 2u);
}

TEST_F(WriterSemanticsTest, HardLinkToASymlinkIsASecondNameOfIt) {
  auto r = Build({SymlinkMember("s", "tgt"), HardLinkMember("h", "s")});
  ASSERT_TRUE(r);
  EntryRecord s = EntryAt(*r, "s"), h = EntryAt(*r, "h");
  EXPECT_EQ(h.type, EntryType::kSymlink);
  EXPECT_EQ(h.inode, s.inode);
  EXPECT_EQ(h.nlink, 2u);
}

TEST_F(WriterSemanticsTest, HardLinkToALaterOrMissingMemberIsRefused) {
  WriteStats stats;
  auto r = Build({HardLinkMember("early", "a", 0), FileMember("a", 3, 1, 1024),
                  HardLinkMember("none", "zz", 2048)},
                 &stats);
  ASSERT_TRUE(r);
  EXPECT_FALSE(PathExists(*r, "early"));
  EXPECT_FALSE(PathExists(*r, "none"));
  EXPECT_EQ(EntryAt(*r, "a").nlink, 1u);
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_THAT(stats.dropped_examples,
              ::testing::ElementsAre(HasSubstr("member 'early' at byte 0: hard link to 'a'"),
                                     HasSubstr("member 'none' at byte 2048")));
  EXPECT_THAT(stats.dropped_examples[0], HasSubstr("s.tar"));
}

TEST_F(WriterSemanticsTest, NonDirectoryCannotReplaceADirectoryWithEntries) {
  WriteStats stats;
  auto r = Build({DirMember("d", 77, 0700, 5), FileMember("d/x", 3, 1, 1024),
                  FileMember("d", 3, 1, 2048), SymlinkMember("d", "t")},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord d = EntryAt(*r, "d");
  EXPECT_EQ(d.type, EntryType::kDir);
  EXPECT_EQ(d.mode, static_cast<uint32_t>(S_IFDIR | 0700));  // Not a made-up 0755.
  EXPECT_EQ(d.uid, 5u);
  EXPECT_EQ(d.mtime_ns, 77);
  EXPECT_TRUE(PathExists(*r, "d/x"));
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_EQ(stats.synthesized_dirs, 1u);  // The root only.
}

TEST_F(WriterSemanticsTest, ReplacementsTarMakes) {
  auto r =
      Build({DirMember("e", 1, 0700, 0), FileMember("e", 3, 1, 1024), FileMember("g", 3, 1, 2048),
             DirMember("g", 2, 0750, 0), DirMember("k", 3, 0700, 5), FileMember("k/x", 3, 1, 3072),
             DirMember("k", 4, 0751, 6)});
  ASSERT_TRUE(r);
  EXPECT_EQ(EntryAt(*r, "e").type, EntryType::kFile);  // Over an empty directory.
  EXPECT_EQ(EntryAt(*r, "g").type, EntryType::kDir);
  EntryRecord k = EntryAt(*r, "k");  // The later member's metadata; entries stay.
  EXPECT_EQ(k.mode, static_cast<uint32_t>(S_IFDIR | 0751));
  EXPECT_EQ(k.uid, 6u);
  EXPECT_EQ(k.mtime_ns, 4);
  EXPECT_TRUE(PathExists(*r, "k/x"));
}

TEST_F(WriterSemanticsTest, MadeUpDirectoriesOnlyWhereNoMemberDescribesOne) {
  WriteStats stats;
  auto r = Build({FileMember("d/x", 3, 1, 1024), DirMember("d", 5, 0700, 9),
                  FileMember("n", 3, 1, 2048), FileMember("n/c", 3, 1, 3072)},
                 &stats);
  ASSERT_TRUE(r);
  EntryRecord d = EntryAt(*r, "d");
  EXPECT_EQ(d.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  EXPECT_EQ(d.uid, 9u);
  EXPECT_EQ(EntryAt(*r, "n").type, EntryType::kFile);
  EXPECT_FALSE(PathExists(*r, "n/c"));
  EXPECT_EQ(stats.synthesized_dirs, 1u);  // The root only.
  EXPECT_EQ(stats.dropped, 1u);
}

}  // namespace
}  // namespace shardfs::index
