// index/index_reader.h on damaged indexes: an index written by the real
// writer, then edited with RocksDB directly (tests/unit/index/index_surgery.h).
// Open must refuse bad meta values with a Status naming the index, the key
// and the value; records whose fields would be used as sizes or indices must
// come back as Corruption, never be handed on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "tests/unit/index/index_surgery.h"
#include "tests/unit/test_util.h"

namespace shardfs::index {
namespace {

using shardfs::testing::EditIndex;
using shardfs::testing::KeyEdit;
using shardfs::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kShardSize = 4096;
// With compressed_: the shard's decoded stream, longer than the shard.
constexpr uint64_t kDecodedSize = 8192;
// The tree the fixture writes, in inode order (depth-first, name order).
constexpr InodeId kDirA{2};
constexpr InodeId kFileAF{3};    // a/f: 10 bytes at byte 512.
constexpr InodeId kFileB{4};     // b: 20 bytes at byte 1536.
constexpr InodeId kSymlinkL{5};  // l -> a/f
constexpr uint64_t kMaxInode = 5;

class IndexReaderCorruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IndexWriter w;
    ShardMeta shard;
    shard.path = dir_ / "s.tar";
    shard.size = kShardSize;
    if (compressed_) {
      // A gzip-compressed tar: the records' offsets are in its decoded
      // stream, whose size its seek table gives.
      shard.set_codec(Codec::kGzip);
      SeekTable table;
      table.decoded_size = kDecodedSize;
      table.points.push_back(SeekPoint{});
      std::string value;
      EncodeSeekTable(table, &value);
      w.AddSeekKeys({{EncodeSeekTableKey(ShardId{0}), value}});
    }
    w.AddShard(shard);
    MemberEntry a;
    a.path = "a";
    a.type = EntryType::kDir;
    a.mode = 0755;
    w.AddMember(a);
    w.AddMember(File("a/f", 10, 512));
    w.AddMember(File("b", 20, 1536));
    MemberEntry l;
    l.path = "l";
    l.type = EntryType::kSymlink;
    l.mode = 0777;
    l.link_target = "a/f";
    w.AddMember(l);
    Result<WriteStats> stats = w.Finish(idx_, WriteOptions{});
    ASSERT_TRUE(stats.ok()) << stats.status().message();
  }

  static MemberEntry File(std::string path, uint64_t size, uint64_t offset) {
    MemberEntry m;
    m.path = std::move(path);
    m.type = EntryType::kFile;
    m.mode = 0644;
    m.size = size;
    m.offset = offset;
    m.has_checksum = true;
    m.xxh3 = 42;
    return m;
  }

  void Edit(const std::vector<KeyEdit>& edits) {
    std::string err = EditIndex(idx_, edits);
    ASSERT_EQ(err, "");
  }
  void SetMeta(std::string_view name, std::string value) {
    Edit({{EncodeMetaKey(name), std::move(value)}});
  }

  // Open must fail with `code`, naming the index and every one of `words`.
  void ExpectOpenFails(Status::Code code, const std::vector<std::string>& words) {
    Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(idx_);
    ASSERT_FALSE(r.ok()) << "opened although damaged";
    EXPECT_EQ(r.status().code(), code) << r.status().message();
    EXPECT_THAT(r.status().message(), HasSubstr(idx_));
    for (const std::string& w : words) EXPECT_THAT(r.status().message(), HasSubstr(w));
  }

  std::unique_ptr<IndexReader> OpenOk() {
    Result<std::unique_ptr<IndexReader>> r = IndexReader::Open(idx_);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // The record of `inode` as written, with `change` applied, stored back
  // under its 'I' key and, unless `name` is empty (the root), its 'D' key.
  void RewriteRecord(InodeId inode, InodeId parent, std::string_view name,
                     void (*change)(EntryRecord*)) {
    std::string value;
    {
      std::unique_ptr<IndexReader> r = OpenOk();
      ASSERT_TRUE(r);
      EntryRecord rec;
      RecordHolder holder;
      ASSERT_TRUE(r->GetInode(inode, &rec, &holder).ok());
      change(&rec);
      EncodeEntry(rec, &value);
    }
    InodeKeyBuffer ikey;
    DirentKeyBuffer dkey;
    std::vector<KeyEdit> edits = {{std::string(EncodeInodeKey(kDefaultView, inode, ikey)), value}};
    if (!name.empty()) {
      edits.push_back({std::string(EncodeDirentKey(kDefaultView, parent, name, dkey)), value});
    }
    Edit(edits);
  }

  TempDir dir_;
  const std::string idx_ = dir_ / "idx";
  bool compressed_ = false;  // Set by a fixture's constructor, read by SetUp.
};

TEST_F(IndexReaderCorruptTest, TheUndamagedIndexOpensWithItsCounts) {
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->MetaNumber(kMetaMaxInode), kMaxInode);
  EXPECT_EQ(r->MetaNumber(kMetaFiles), 2u);
  EXPECT_EQ(r->MetaNumber(kMetaDirs), 2u);  // The root counts.
  EXPECT_EQ(r->MetaNumber(kMetaSymlinks), 1u);
  EXPECT_EQ(r->MetaNumber(kMetaBytes), 30u);
  EntryRecord rec;
  RecordHolder holder;
  ASSERT_TRUE(r->GetInode(kSymlinkL, &rec, &holder).ok());
  EXPECT_EQ(rec.target, "a/f");
  ASSERT_TRUE(r->Lookup(kDirA, "f", &rec, &holder).ok());
  EXPECT_EQ(rec.inode, kFileAF);
  // An edit that changes nothing leaves an index that still opens.
  SetMeta(kMetaMaxInode, std::to_string(kMaxInode));
  EXPECT_TRUE(OpenOk());
}

// The issue: a mount sized a bitmap by this value and died of bad_alloc.
TEST_F(IndexReaderCorruptTest, HugeMaxInodeIsRefused) {
  SetMeta(kMetaMaxInode, "18000000000000000000");
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", "18000000000000000000"});
}

TEST_F(IndexReaderCorruptTest, MaxInodeBeyond64BitsIsRefused) {
  SetMeta(kMetaMaxInode, "18446744073709551616");  // 2^64.
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", "18446744073709551616"});
}

TEST_F(IndexReaderCorruptTest, MaxInodeMustBeFilesPlusDirsPlusSymlinks) {
  SetMeta(kMetaMaxInode, "6");
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", "6", "files + dirs + symlinks"});
}

TEST_F(IndexReaderCorruptTest, MaxInodeAgreeingWithTheCountsMustHaveARecord) {
  Edit({{EncodeMetaKey(kMetaFiles), "3"}, {EncodeMetaKey(kMetaMaxInode), "6"}});
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", "no inode 6"});
}

TEST_F(IndexReaderCorruptTest, NoInodeMayFollowMaxInode) {
  Edit({{EncodeMetaKey(kMetaFiles), "1"}, {EncodeMetaKey(kMetaMaxInode), "4"}});
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", "inode 5 after it"});
}

// Counts, a max_inode and even a record that all agree, but far more inodes
// than the index has keys: still refused before anyone sizes a table by it.
TEST_F(IndexReaderCorruptTest, MaxInodeBeyondTheKeysOfTheIndexIsRefused) {
  const uint64_t huge = uint64_t{1} << 40;
  EntryRecord rec;
  rec.type = EntryType::kFile;
  rec.mode = S_IFREG | 0644;
  rec.inode = InodeId{huge};
  rec.parent = kRootInode;
  std::string value;
  EncodeEntry(rec, &value);
  InodeKeyBuffer ikey;
  Edit({{EncodeMetaKey(kMetaFiles), std::to_string(huge - 3)},
        {EncodeMetaKey(kMetaMaxInode), std::to_string(huge)},
        {std::string(EncodeInodeKey(kDefaultView, InodeId{huge}, ikey)), value}});
  ExpectOpenFails(Status::Code::kCorruption, {"'max_inode'", std::to_string(huge), "keys"});
}

// A directory that lists its ancestor stops the walks of the tree: the
// kernel mount's (tests/unit/erofs/tree_test.cc) and verify's
// (tests/unit/pack/verify_test.cc), over WriteIndexWithALoop's index.

TEST_F(IndexReaderCorruptTest, EveryNumericMetaValueMustBeADecimalNumber) {
  const std::string_view names[] = {kMetaFiles, kMetaDirs,     kMetaSymlinks,
                                    kMetaBytes, kMetaMaxInode, kMetaSchemaVersion};
  const std::string bad[] = {
      "", "5x", "-1", " 5", "+5", "0x5", "5.0", "99999999999999999999", std::string("5\0", 2)};
  for (std::string_view name : names) {
    for (const std::string& value : bad) {
      SCOPED_TRACE(std::string(name) + " = '" + value + "'");
      SetMeta(name, value);
      ExpectOpenFails(Status::Code::kCorruption, {"'" + std::string(name) + "'"});
    }
    // Put back the good value: every key is tried on an otherwise sound index.
    SetMeta(name, name == kMetaSchemaVersion ? std::to_string(kSchemaVersion)
                  : name == kMetaFiles       ? "2"
                  : name == kMetaDirs        ? "2"
                  : name == kMetaSymlinks    ? "1"
                  : name == kMetaBytes       ? "30"
                                             : std::to_string(kMaxInode));
    ASSERT_TRUE(OpenOk()) << name;
  }
}

TEST_F(IndexReaderCorruptTest, ValuesAreQuotedPrintably) {
  SetMeta(kMetaFiles, std::string("\x01\xff", 2));
  ExpectOpenFails(Status::Code::kCorruption, {"'files'", "\\x01\\xff"});
}

TEST_F(IndexReaderCorruptTest, SchemaVersionZeroIsRefused) {
  SetMeta(kMetaSchemaVersion, "0");
  ExpectOpenFails(Status::Code::kCorruption, {"'schema_version'"});
}

TEST_F(IndexReaderCorruptTest, AMissingCountIsNamed) {
  Edit({{EncodeMetaKey(kMetaDirs), std::nullopt}});
  ExpectOpenFails(Status::Code::kCorruption, {"'dirs'", "missing"});
}

TEST_F(IndexReaderCorruptTest, ZeroDirsIsRefused) {
  Edit({{EncodeMetaKey(kMetaDirs), "0"}, {EncodeMetaKey(kMetaFiles), "4"}});
  ExpectOpenFails(Status::Code::kCorruption, {"'dirs'", "root"});
}

TEST_F(IndexReaderCorruptTest, ChecksumsMustBeXxh3OrNone) {
  SetMeta(kMetaChecksums, "md5");
  ExpectOpenFails(Status::Code::kCorruption, {"'checksums'", "md5"});
}

TEST_F(IndexReaderCorruptTest, TheRootMustBeADirectory) {
  RewriteRecord(kRootInode, kRootInode, "", [](EntryRecord* rec) {
    rec->type = EntryType::kSymlink;
    rec->mode = S_IFLNK | 0777;
  });
  ExpectOpenFails(Status::Code::kCorruption, {"root"});
}

TEST_F(IndexReaderCorruptTest, AShardWithoutAPathIsRefused) {
  ShardMeta meta;
  meta.size = kShardSize;
  std::string value;
  EncodeShardMeta(meta, &value);
  ShardKeyBuffer key;
  Edit({{std::string(EncodeShardKey(ShardId{0}, key)), value}});
  ExpectOpenFails(Status::Code::kCorruption, {"shard 0", "empty path"});
}

// Records: Open is fine (only max_inode's and the root's are read there);
// each read of a damaged record is Corruption naming the inode.
class DamagedRecordTest : public IndexReaderCorruptTest {
 protected:
  // Every way of reading the record of a/f, and what each must say.
  void ExpectEveryReadFails(std::string_view what, bool listing_too) {
    std::unique_ptr<IndexReader> r = OpenOk();
    ASSERT_TRUE(r);
    EntryRecord rec;
    RecordHolder holder;
    Status s = r->GetInode(kFileAF, &rec, &holder);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
    EXPECT_THAT(s.message(), AllOf(HasSubstr(idx_), HasSubstr("inode 3"), HasSubstr(what)));

    s = r->ForEachInode(kRootInode, [](const EntryRecord&) { return true; });
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
    EXPECT_THAT(s.message(), HasSubstr(what));

    // By name: either Lookup refuses, or (file ranges) CheckFileRange does.
    s = r->Lookup(kDirA, "f", &rec, &holder);
    if (s.ok()) s = r->CheckFileRange(rec);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
    EXPECT_THAT(s.message(), HasSubstr(what));
    s = r->LookupPath("a/f", &rec, &holder);
    if (s.ok()) s = r->CheckFileRange(rec);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();

    bool saw = false;
    s = r->ForEachChild(kDirA, "", [&](std::string_view, const EntryRecord& e) {
      saw = true;
      Status range = r->CheckFileRange(e);
      EXPECT_EQ(range.code(), Status::Code::kCorruption) << range.message();
      return true;
    });
    if (listing_too) {
      EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
      EXPECT_THAT(s.message(), HasSubstr(what));
    } else {
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(saw);
    }

    // The neighbours are unharmed.
    EXPECT_TRUE(r->GetInode(kFileB, &rec, &holder).ok());
    EXPECT_TRUE(r->Lookup(kRootInode, "b", &rec, &holder).ok());
  }
};

TEST_F(DamagedRecordTest, ShardBeyondTheShardTable) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->shard = ShardId{7}; });
  ExpectEveryReadFails("shard 7", /*listing_too=*/false);
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ShardPath(ShardId{7}), "");  // Not an out-of-bounds read.
}

TEST_F(DamagedRecordTest, BytesBeyondTheEndOfTheShard) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->offset = kShardSize - 5; });
  ExpectEveryReadFails("which has 4096 bytes", /*listing_too=*/false);
}

TEST_F(DamagedRecordTest, SizeBeyondTheEndOfTheShard) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->size = UINT64_MAX - 600; });
  ExpectEveryReadFails("which has 4096 bytes", /*listing_too=*/false);
}

TEST_F(DamagedRecordTest, LinkCountZero) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->nlink = 0; });
  ExpectEveryReadFails("link count 0", /*listing_too=*/true);
}

TEST_F(DamagedRecordTest, InodeBeyondMaxInode) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->inode = InodeId{1000}; });
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EntryRecord rec;
  RecordHolder holder;
  Status s = r->Lookup(kDirA, "f", &rec, &holder);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("inode 1000"), HasSubstr("1..5")));
  s = r->GetInode(kFileAF, &rec, &holder);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  s = r->ForEachChild(kDirA, "", [](std::string_view, const EntryRecord&) { return true; });
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
}

TEST_F(DamagedRecordTest, RecordOfAnotherInode) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->inode = kFileB; });
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EntryRecord rec;
  RecordHolder holder;
  Status s = r->GetInode(kFileAF, &rec, &holder);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("says inode 4"));
  s = r->ForEachInode(kRootInode, [](const EntryRecord&) { return true; });
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
}

TEST_F(DamagedRecordTest, ModeOfAnotherType) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->mode = S_IFDIR | 0755; });
  ExpectEveryReadFails("does not match its type", /*listing_too=*/true);
}

TEST_F(DamagedRecordTest, ParentZero) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->parent = InodeId{0}; });
  ExpectEveryReadFails("parent 0", /*listing_too=*/true);
}

// A compressed tar shard: its records' bytes are checked against its decoded
// stream, as a plain shard's against the shard (not left to the read).
class DamagedCompressedRecordTest : public DamagedRecordTest {
 protected:
  DamagedCompressedRecordTest() { compressed_ = true; }
};

TEST_F(DamagedCompressedRecordTest, BytesBeyondTheEndOfTheDecodedStream) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->offset = kDecodedSize - 5; });
  ExpectEveryReadFails("which decodes to 8192 bytes", /*listing_too=*/false);
}

TEST_F(DamagedCompressedRecordTest, SizeBeyondTheEndOfTheDecodedStream) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->size = UINT64_MAX - 600; });
  ExpectEveryReadFails("which decodes to 8192 bytes", /*listing_too=*/false);
}

TEST_F(DamagedCompressedRecordTest, PastTheShardsOwnSizeInsideTheStreamIsFine) {
  RewriteRecord(kFileAF, kDirA, "f", [](EntryRecord* rec) { rec->offset = kDecodedSize - 10; });
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EntryRecord rec;
  RecordHolder holder;
  Status s = r->GetInode(kFileAF, &rec, &holder);
  EXPECT_TRUE(s.ok()) << s.message();
  s = r->Lookup(kDirA, "f", &rec, &holder);
  if (s.ok()) s = r->CheckFileRange(rec);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(DamagedCompressedRecordTest, NoSeekTable) {
  Edit({{EncodeSeekTableKey(ShardId{0}), std::nullopt}});
  std::unique_ptr<IndexReader> r = OpenOk();
  ASSERT_TRUE(r);
  EntryRecord rec;
  RecordHolder holder;
  Status s = r->GetInode(kFileAF, &rec, &holder);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_THAT(s.message(), AllOf(HasSubstr(idx_), HasSubstr("shard 0: seek table")));
}

}  // namespace
}  // namespace shardfs::index
