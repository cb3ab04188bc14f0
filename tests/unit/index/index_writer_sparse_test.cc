// index/index_writer.h on what changes the schema version: an index holds
// version 2 only when a sparse file is in it (and the reader keeps a sparse
// file's extents inside its shard), version 6 when a slice shard is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using index::EntryRecord;
using testing::TempDir;

// An index holds version 2 only when a sparse file is in it; the reader
// keeps a sparse file's extents inside its shard.
TEST(SparseIndexTest, SchemaVersionAndShardBounds) {
  TempDir dir;
  auto build = [&](const std::string& name, bool sparse, uint64_t physical) {
    index::IndexWriter w;
    index::ShardMeta meta;
    meta.path = dir / "shard.tar";
    meta.size = 10240;
    w.AddShard(meta);
    index::MemberEntry m;
    m.path = "f";
    m.size = 1 << 20;
    m.offset = physical;
    if (sparse) {
      w.AddSparseMember(m, {{0, 512, physical}, {1 << 19, 512, physical + 512}});
    } else {
      m.size = 512;
      w.AddMember(m);
    }
    auto stats = w.Finish(dir / name, {});
    ASSERT_TRUE(stats.ok()) << stats.status().message();
  };
  build("plain", false, 512);
  build("sparse", true, 512);
  build("outside", true, 10240 - 512);
  auto plain = index::IndexReader::Open(dir / "plain");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->Meta(index::kMetaSchemaVersion), "1");
  auto sparse = index::IndexReader::Open(dir / "sparse");
  ASSERT_TRUE(sparse.ok()) << sparse.status().message();
  EXPECT_EQ((*sparse)->Meta(index::kMetaSchemaVersion), "2");
  EntryRecord rec;
  index::RecordHolder holder;
  ASSERT_TRUE((*sparse)->GetInode(index::InodeId{2}, &rec, &holder).ok());
  EXPECT_TRUE(rec.sparse());
  EXPECT_EQ(rec.size, 1u << 20);
  EXPECT_EQ(index::ExtentCount(rec), 2u);
  auto outside = index::IndexReader::Open(dir / "outside");
  ASSERT_TRUE(outside.ok());
  Status s = (*outside)->GetInode(index::InodeId{2}, &rec, &holder);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  holder.Reset();  // Unpin before the readers go.
}

// An index with a slice shard (a compressed tar inside a tar) is version 6:
// a reader of 5 refuses it rather than take base and length for the path.
// The reader gives the slice's meta back as written.
TEST(SliceIndexTest, SchemaVersionSix) {
  TempDir dir;
  index::IndexWriter w;
  index::ShardMeta outer;
  outer.path = dir / "outer.tar";
  outer.size = 10240;
  outer.fingerprint = 7;
  w.AddShard(outer);
  index::ShardMeta slice = outer;
  slice.flags |= index::kShardSlice;
  slice.set_codec(index::Codec::kGzip);
  slice.base = 1024;
  slice.length = 4096;
  w.AddShard(slice);
  index::SeekTable table;
  table.decoded_size = 2048;
  table.points.push_back(index::SeekPoint{});
  std::string value;
  index::EncodeSeekTable(table, &value);
  w.AddSeekKeys({{index::EncodeSeekTableKey(index::ShardId{1}), value}});
  index::MemberEntry m;
  m.path = "a/f";
  m.size = 100;
  m.offset = 512;
  m.shard = index::ShardId{1};
  w.AddMember(m);
  auto stats = w.Finish(dir / "idx", {});
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  auto r = index::IndexReader::Open(dir / "idx");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->Meta(index::kMetaSchemaVersion), "6");
  ASSERT_EQ((*r)->shards().size(), 2u);
  const index::ShardMeta& got = (*r)->shards()[1];
  EXPECT_TRUE(got.slice());
  EXPECT_EQ(got.base, 1024u);
  EXPECT_EQ(got.length, 4096u);
  EXPECT_EQ(got.codec(), index::Codec::kGzip);
  EXPECT_EQ((*r)->ShardPath(index::ShardId{1}), (*r)->ShardPath(index::ShardId{0}));
  EXPECT_FALSE((*r)->shards()[0].slice());
}

}  // namespace
}  // namespace shardfs
