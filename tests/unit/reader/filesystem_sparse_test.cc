// Sparse files: the extent list of index/schema.h (round trip, every kind of
// damage refused as Corruption), the writer's schema version, the reader's
// shard bounds, and Filesystem reads and verification over a real GNU tar
// --sparse shard compared with the source file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "base/io.h"
#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "src/reader/filesystem.h"
#include "tests/unit/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using index::EntryRecord;
using index::EntryType;
using index::Extent;
using testing::TempDir;

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

// Filesystem::Read over a GNU tar --sparse shard, at offsets inside extents,
// across holes and past the end, with verify=always, against the source.
TEST(SparseFilesystemTest, ReadsMatchTheSource) {
  TempDir dir;
  const std::string src = dir / "src";
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  const std::string file = src + "/holes.bin";
  const uint64_t size = (uint64_t{3} << 20) + 777;
  {
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    for (off_t at : {off_t{8192}, off_t{1} << 20, (off_t{3} << 20) - 4096}) {
      std::string block = testing::PseudoRandomBytes(5000, static_cast<uint64_t>(at));
      ASSERT_EQ(::pwrite(fd, block.data(), block.size(), at), 5000);
    }
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    ::close(fd);
  }
  const std::string want = testing::ReadFile(file);
  ASSERT_EQ(want.size(), size);
  const std::string shard = dir / "s.tar";
  testing::CommandResult r =
      testing::Run({"tar", "--format=posix", "--sparse", "-C", src, "-cf", shard, "holes.bin"});
  ASSERT_TRUE(r.ok()) << r.describe;
  reader_testing::IndexShards({shard}, dir / "idx");
  reader::FilesystemOptions o;
  o.verify = reader::VerifyMode::kAlways;
  auto fs = reader_testing::OpenFs(dir / "idx", o);
  ASSERT_NE(fs, nullptr);
  const index::InodeId inode = reader_testing::InodeOf(*fs, "holes.bin");
  {
    EntryRecord rec;
    index::RecordHolder holder;
    ASSERT_TRUE(fs->GetAttr(inode, &rec, &holder).ok());
    ASSERT_TRUE(rec.sparse());
    struct stat st;
    fs->ToStat(rec, &st);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
    EXPECT_EQ(static_cast<uint64_t>(st.st_blocks), (index::StoredBytes(rec) + 511) / 512);
    EXPECT_LT(index::StoredBytes(rec), size / 10);
  }

  std::mt19937_64 rnd(7);
  std::string buf;
  for (int i = 0; i < 300; ++i) {
    uint64_t off = rnd() % (size + 100);
    size_t n = 1 + rnd() % 300000;
    buf.assign(n, 'x');
    size_t got = 0;
    Status s = fs->Read(inode, off, n, buf.data(), &got);
    ASSERT_TRUE(s.ok()) << s.message();
    std::string expect = off < size ? want.substr(off, n) : std::string();
    ASSERT_EQ(got, expect.size()) << off << "+" << n;
    ASSERT_EQ(buf.substr(0, got), expect) << off << "+" << n;
    // A range inside one extent may be spliced, straight from the shard;
    // a read across holes or extents is assembled in the buffer.
    std::string other(n, 'y');
    Result<reader::ReadReply> r = fs->Read(inode, off, n, other.data(), true);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->length, expect.size());
    if (r->spliced()) {
      std::string direct(r->length, '\0');
      ASSERT_TRUE(PreadExact(r->fd, direct.data(), r->length, r->pos).ok());
      EXPECT_EQ(direct, expect) << off << "+" << n;
    } else {
      EXPECT_EQ(other.substr(0, r->length), expect) << off << "+" << n;
    }
  }
}

}  // namespace
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

}  // namespace shardfs
