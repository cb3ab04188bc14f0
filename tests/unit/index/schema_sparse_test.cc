// index/schema.h on sparse files: the extent list of a file record, round
// trip and helpers, and every kind of damage refused as Corruption.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "index/schema.h"

namespace shardfs {
namespace {

using index::EntryRecord;
using index::EntryType;
using index::Extent;

EntryRecord SparseFile(uint64_t size, const std::vector<Extent>& extents, std::string* holder) {
  holder->clear();
  for (const Extent& e : extents) index::AppendExtent(e, holder);
  EntryRecord rec;
  rec.type = EntryType::kFile;
  rec.flags = index::kEntrySparse | index::kEntryHasChecksum;
  rec.mode = S_IFREG | 0644;
  rec.inode = index::InodeId{2};
  rec.parent = index::kRootInode;
  rec.size = size;
  rec.offset = extents.empty() ? 0 : extents[0].physical;
  rec.extents = *holder;
  return rec;
}

TEST(SparseSchemaTest, RoundTripAndHelpers) {
  std::string ext, value;
  const std::vector<Extent> extents = {
      {0, 4096, 1536}, {uint64_t{4} << 30, 4096, 5632}, {(uint64_t{17} << 29), 4096, 9728}};
  EntryRecord rec = SparseFile((uint64_t{17} << 29) + 4096, extents, &ext);
  index::EncodeEntry(rec, &value);
  EXPECT_EQ(value.size(), index::kEntryFixedSize + 3 * index::kExtentSize);
  EntryRecord got;
  ASSERT_TRUE(index::DecodeEntry(value, &got).ok());
  EXPECT_TRUE(got.sparse());
  EXPECT_TRUE(got.target.empty());
  ASSERT_EQ(index::ExtentCount(got), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(index::GetExtent(got, i), extents[i]);
  EXPECT_EQ(index::StoredBytes(got), 3 * 4096u);
  EXPECT_EQ(index::FindExtent(got, 0), 0u);
  EXPECT_EQ(index::FindExtent(got, 4095), 0u);
  EXPECT_EQ(index::FindExtent(got, 4096), 1u);
  EXPECT_EQ(index::FindExtent(got, uint64_t{4} << 30), 1u);
  EXPECT_EQ(index::FindExtent(got, (uint64_t{4} << 30) + 4096), 2u);
  EXPECT_EQ(index::FindExtent(got, got.size), 3u);
  std::string again;
  index::EncodeEntry(got, &again);
  EXPECT_EQ(again, value);

  // No extents at all: a file of holes.
  EntryRecord holes = SparseFile(70000, {}, &ext);
  index::EncodeEntry(holes, &value);
  ASSERT_TRUE(index::DecodeEntry(value, &got).ok());
  EXPECT_EQ(index::ExtentCount(got), 0u);
  EXPECT_EQ(index::StoredBytes(got), 0u);
}

TEST(SparseSchemaTest, MalformedExtentListsAreCorruption) {
  struct Case {
    const char* what;
    uint64_t size;
    std::vector<Extent> extents;
  };
  const Case cases[] = {
      {"unsorted", 100000, {{5000, 10, 1024}, {0, 10, 2048}}},
      {"overlapping", 100000, {{0, 5000, 1024}, {4999, 10, 8192}}},
      {"empty extent", 100000, {{0, 0, 1024}}},
      {"past the size", 100000, {{99990, 11, 1024}}},
      {"logical overflow", 100000, {{UINT64_MAX - 1, 10, 1024}}},
      {"physical overflow", 100000, {{0, 10, UINT64_MAX - 3}}},
  };
  std::string ext, value;
  for (const Case& c : cases) {
    EntryRecord rec = SparseFile(c.size, c.extents, &ext);
    index::EncodeEntry(rec, &value);
    EntryRecord got;
    EXPECT_EQ(index::DecodeEntry(value, &got).code(), Status::Code::kCorruption) << c.what;
  }
  // A list that is not whole extents; the flag on a directory.
  EntryRecord rec = SparseFile(100000, {{0, 10, 1024}}, &ext);
  index::EncodeEntry(rec, &value);
  EntryRecord got;
  EXPECT_EQ(index::DecodeEntry(value + "x", &got).code(), Status::Code::kCorruption);
  rec = SparseFile(0, {}, &ext);
  rec.type = EntryType::kDir;
  rec.mode = S_IFDIR | 0755;
  index::EncodeEntry(rec, &value);
  EXPECT_EQ(index::DecodeEntry(value, &got).code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace shardfs
