// index/schema.h: value round trips, corrupt values, key shapes and order.
#include "index/schema.h"

#include <gtest/gtest.h>
#include <rocksdb/comparator.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace shardfs::index {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();

int Bytewise(std::string_view a, std::string_view b) {
  return rocksdb::BytewiseComparator()->Compare(rocksdb::Slice(a.data(), a.size()),
                                                rocksdb::Slice(b.data(), b.size()));
}

void ExpectSameEntry(const EntryRecord& want, const EntryRecord& got) {
  EXPECT_EQ(want.type, got.type);
  EXPECT_EQ(want.flags, got.flags);
  EXPECT_EQ(want.mode, got.mode);
  EXPECT_EQ(want.uid, got.uid);
  EXPECT_EQ(want.gid, got.gid);
  EXPECT_EQ(want.inode, got.inode);
  EXPECT_EQ(want.parent, got.parent);
  EXPECT_EQ(want.size, got.size);
  EXPECT_EQ(want.mtime_ns, got.mtime_ns);
  EXPECT_EQ(want.nlink, got.nlink);
  EXPECT_EQ(want.shard, got.shard);
  EXPECT_EQ(want.offset, got.offset);
  EXPECT_EQ(want.xxh3, got.xxh3);
  EXPECT_EQ(want.target, got.target);
  EXPECT_EQ(want.has_checksum(), got.has_checksum());
}

EntryRecord RoundTrip(const EntryRecord& rec, std::string* buf) {
  EncodeEntry(rec, buf);
  EntryRecord got;
  Status s = DecodeEntry(*buf, &got);
  EXPECT_TRUE(s.ok()) << s.message();
  return got;
}

TEST(EntryRecordTest, FileRoundTripsEveryField) {
  EntryRecord rec;
  rec.type = EntryType::kFile;
  rec.flags = kEntryHasChecksum;
  rec.mode = 0100644;
  rec.uid = 1000;
  rec.gid = 100;
  rec.inode = InodeId{0x0102030405060708};
  rec.parent = InodeId{7};
  rec.size = 123456789012;
  rec.mtime_ns = 1700000000123456789;
  rec.nlink = 3;
  rec.shard = ShardId{0xabcdef};
  rec.offset = 0x1122334455;
  rec.xxh3 = 0xfedcba9876543210;
  std::string buf;
  EntryRecord got = RoundTrip(rec, &buf);
  EXPECT_EQ(buf.size(), kEntryFixedSize);
  ExpectSameEntry(rec, got);
  EXPECT_TRUE(got.has_checksum());
  // Integers in values are little-endian at the documented offsets.
  EXPECT_EQ(static_cast<uint8_t>(buf[0]), 1);
  EXPECT_EQ(static_cast<uint8_t>(buf[14]), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(buf[21]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(buf[62]), 0x10);
  EXPECT_EQ(static_cast<uint8_t>(buf[69]), 0xfe);
}

TEST(EntryRecordTest, EncodedMemberRoundTrips) {
  EntryRecord rec;
  rec.type = EntryType::kFile;
  rec.flags = kEntryHasChecksum | kEntryEncoded;
  rec.mode = 0100644;
  rec.size = 1000000;
  rec.offset = 0x123456789;
  rec.encoding = EncodedMember{kMethodDeflate, 0x123456789, 4321, 0xdeadbeef};
  std::string buf;
  EntryRecord got = RoundTrip(rec, &buf);
  EXPECT_EQ(buf.size(), kEntryFixedSize + kEncodedTrailerSize);
  ExpectSameEntry(rec, got);
  EXPECT_TRUE(got.encoded());
  EXPECT_EQ(got.encoding, rec.encoding);
  EXPECT_EQ(StoredBytes(got), 4321u);
  EXPECT_EQ(StoredRange(got), (Extent{0, 4321, 0x123456789}));
  // The trailer's layout: method, then offset, size, crc32 little-endian.
  EXPECT_EQ(static_cast<uint8_t>(buf[70]), 8);
  EXPECT_EQ(static_cast<uint8_t>(buf[71]), 0x89);
  EXPECT_EQ(static_cast<uint8_t>(buf[79]), 0xe1);
  EXPECT_EQ(static_cast<uint8_t>(buf[87]), 0xef);

  EntryRecord bad;
  std::string cut = buf.substr(0, buf.size() - 1);
  EXPECT_FALSE(DecodeEntry(cut, &bad).ok());
  std::string method = buf;
  method[70] = 12;  // bzip2: no such encoded method
  EXPECT_FALSE(DecodeEntry(method, &bad).ok());
  std::string offset = buf;
  offset[54] ^= 1;  // offset no longer the compressed offset
  EXPECT_FALSE(DecodeEntry(offset, &bad).ok());
  std::string sparse = buf;
  sparse[1] |= kEntrySparse;
  EXPECT_FALSE(DecodeEntry(sparse, &bad).ok());
  std::string dir = buf;
  dir[0] = static_cast<char>(EntryType::kDir);
  EXPECT_FALSE(DecodeEntry(dir, &bad).ok());
}

TEST(EntryRecordTest, MaxValuesRoundTrip) {
  EntryRecord rec;
  rec.type = EntryType::kFile;
  // Every flag but "encoded member", whose trailer EncodedMemberRoundTrips covers.
  rec.flags = static_cast<uint8_t>(0xff & ~kEntryEncoded);
  rec.mode = kU32Max;
  rec.uid = kU32Max;
  rec.gid = kU32Max;
  rec.inode = InodeId{kU64Max};
  rec.parent = InodeId{kU64Max};
  rec.size = kU64Max;  // With offset 0, offset + size does not overflow.
  rec.mtime_ns = std::numeric_limits<int64_t>::max();
  rec.nlink = kU32Max;
  rec.shard = ShardId{kU32Max};
  rec.offset = 0;
  rec.xxh3 = kU64Max;
  std::string buf;
  ExpectSameEntry(rec, RoundTrip(rec, &buf));

  rec.size = 0;
  rec.offset = kU64Max;
  rec.mtime_ns = std::numeric_limits<int64_t>::min();
  ExpectSameEntry(rec, RoundTrip(rec, &buf));
}

TEST(EntryRecordTest, NegativeMtimeRoundTrips) {
  for (int64_t mtime :
       {int64_t{-1}, int64_t{-1000000000}, int64_t{-1234567890123456789}, int64_t{-999999999}}) {
    EntryRecord rec;
    rec.type = EntryType::kDir;
    rec.mode = 040755;
    rec.mtime_ns = mtime;
    std::string buf;
    EXPECT_EQ(RoundTrip(rec, &buf).mtime_ns, mtime);
  }
}

TEST(EntryRecordTest, SymlinkTargetRoundTrips) {
  // Raw bytes, including NUL and non-UTF-8, and a long target.
  for (std::string target : {std::string("a"), std::string("../x/y"),
                             std::string("nul\0in\xff\xfe", 8), std::string(4000, 't')}) {
    EntryRecord rec;
    rec.type = EntryType::kSymlink;
    rec.mode = 0120777;
    rec.inode = InodeId{42};
    rec.parent = InodeId{1};
    rec.target = target;
    rec.size = target.size();
    std::string buf;
    EntryRecord got = RoundTrip(rec, &buf);
    EXPECT_EQ(buf.size(), kEntryFixedSize + target.size());
    ExpectSameEntry(rec, got);
    EXPECT_EQ(std::string(got.target), target);
  }
}

TEST(EntryRecordTest, DecodeRejectsShortValues) {
  EntryRecord rec;
  rec.type = EntryType::kFile;
  std::string buf;
  EncodeEntry(rec, &buf);
  for (size_t n = 0; n < kEntryFixedSize; ++n) {
    EntryRecord got;
    Status s = DecodeEntry(std::string_view(buf).substr(0, n), &got);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << "length " << n;
  }
}

TEST(EntryRecordTest, DecodeRejectsGarbledValues) {
  EntryRecord rec;
  rec.type = EntryType::kFile;
  rec.size = 10;
  std::string good;
  EncodeEntry(rec, &good);
  EntryRecord got;

  for (uint8_t type : {0, 4, 0x7f, 0xff}) {
    std::string bad = good;
    bad[0] = static_cast<char>(type);
    EXPECT_EQ(DecodeEntry(bad, &got).code(), Status::Code::kCorruption) << "type " << +type;
  }
  // Trailing bytes after a file or a directory.
  EXPECT_EQ(DecodeEntry(good + "x", &got).code(), Status::Code::kCorruption);
  std::string dir = good;
  dir[0] = static_cast<char>(EntryType::kDir);
  EXPECT_EQ(DecodeEntry(dir + "junk", &got).code(), Status::Code::kCorruption);

  // A symlink whose size disagrees with its target.
  EntryRecord link;
  link.type = EntryType::kSymlink;
  link.target = "abc";
  link.size = 4;
  std::string bad_link;
  EncodeEntry(link, &bad_link);
  EXPECT_EQ(DecodeEntry(bad_link, &got).code(), Status::Code::kCorruption);

  // offset + size wraps around.
  EntryRecord wrap;
  wrap.offset = kU64Max - 5;
  wrap.size = 6;
  std::string bad_wrap;
  EncodeEntry(wrap, &bad_wrap);
  EXPECT_EQ(DecodeEntry(bad_wrap, &got).code(), Status::Code::kCorruption);
  wrap.size = 5;  // Ends exactly at 2^64 - 1: fine.
  EncodeEntry(wrap, &bad_wrap);
  EXPECT_TRUE(DecodeEntry(bad_wrap, &got).ok());
}

// A slice shard (schema version 6): the outer file's fields plus base and
// length, local or remote; a range past the file, a slice without a codec and
// a cut record are refused.
TEST(ShardMetaTest, SliceRoundTripsAndIsChecked) {
  for (bool remote : {false, true}) {
    ShardMeta meta;
    meta.size = 1 << 20;
    meta.mtime_ns = 1600000000123456789;
    meta.fingerprint = 0x0123456789abcdef;
    meta.flags = kShardSlice | (remote ? kShardRemote : kShardPathRelative);
    meta.set_codec(Codec::kXz);
    meta.base = 1536;
    meta.length = (1 << 20) - 1536;
    meta.path = remote ? "https://host/train.tar" : "train.tar";
    if (remote) meta.etag = "\"etag-1\"";
    std::string buf;
    EncodeShardMeta(meta, &buf);
    EXPECT_EQ(buf.size(), 41 + (remote ? 2 + meta.etag.size() : 0) + meta.path.size());
    ShardMeta got;
    Status s = DecodeShardMeta(buf, &got);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(got.slice());
    EXPECT_EQ(got.remote(), remote);
    EXPECT_EQ(got.codec(), Codec::kXz);
    EXPECT_EQ(got.base, meta.base);
    EXPECT_EQ(got.length, meta.length);
    EXPECT_EQ(got.data_base(), meta.base);
    EXPECT_EQ(got.data_size(), meta.length);
    EXPECT_EQ(got.size, meta.size);
    EXPECT_EQ(got.fingerprint, meta.fingerprint);
    EXPECT_EQ(got.path, meta.path);
    EXPECT_EQ(got.etag, meta.etag);
    EXPECT_EQ(DecodeShardMeta(std::string_view(buf).substr(0, 40), &got).code(),
              Status::Code::kCorruption);
    // What a reader without bit 6 (schema 5) would take for the path starts
    // with base and length: why such an index is version 6, which it refuses.
    std::string old = buf;
    old[24] = static_cast<char>(meta.flags & ~kShardSlice);
    if (!remote) {
      ASSERT_TRUE(DecodeShardMeta(old, &got).ok());
      EXPECT_NE(got.path, meta.path);
      EXPECT_EQ(got.path.size(), 16 + meta.path.size());
    }

    ShardMeta past = meta;
    past.length += 1;  // One byte past the file.
    EncodeShardMeta(past, &buf);
    s = DecodeShardMeta(buf, &got);
    EXPECT_EQ(s.code(), Status::Code::kCorruption);
    EXPECT_NE(s.message().find("past the file"), std::string::npos) << s.message();
    ShardMeta wrap = meta;
    wrap.base = kU64Max;
    EncodeShardMeta(wrap, &buf);
    EXPECT_EQ(DecodeShardMeta(buf, &got).code(), Status::Code::kCorruption);
    ShardMeta plain = meta;
    plain.set_codec(Codec::kNone);
    EncodeShardMeta(plain, &buf);
    EXPECT_EQ(DecodeShardMeta(buf, &got).code(), Status::Code::kCorruption);
  }
  // Not a slice: the whole file.
  ShardMeta whole;
  whole.size = 99;
  EXPECT_EQ(whole.data_base(), 0u);
  EXPECT_EQ(whole.data_size(), 99u);
  EXPECT_EQ(kMaxSchemaVersion, kSliceSchemaVersion);
  EXPECT_GT(kSliceSchemaVersion, kBzip2SchemaVersion);
}

TEST(ShardMetaTest, RoundTripsEveryField) {
  for (const auto& [path, flags] :
       std::vector<std::pair<std::string, uint8_t>>{{"shards/a.tar", kShardPathRelative},
                                                    {"/abs/path with space/b.tar", 0},
                                                    {std::string("x\0\xff.tar", 7), 0xff},
                                                    {std::string(5000, 'p'), 0}}) {
    ShardMeta meta;
    meta.size = 0x0102030405060708;
    meta.mtime_ns = -1234567890123;
    meta.fingerprint = 0xfedcba9876543210;
    meta.flags = flags;
    meta.path = path;
    if (meta.remote()) meta.etag = "\"5f1e-abc\"";
    std::string buf;
    EncodeShardMeta(meta, &buf);
    const size_t fixed = meta.slice() ? 41 : 25;  // A slice has base and length.
    EXPECT_EQ(buf.size(), (meta.remote() ? fixed + 2 + meta.etag.size() : fixed) + path.size());
    ShardMeta got;
    Status s = DecodeShardMeta(buf, &got);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got.size, meta.size);
    EXPECT_EQ(got.mtime_ns, meta.mtime_ns);
    EXPECT_EQ(got.fingerprint, meta.fingerprint);
    EXPECT_EQ(got.flags, meta.flags);
    EXPECT_EQ(got.path, meta.path);
    EXPECT_EQ(got.etag, meta.etag);
  }
  {
    // A remote shard: URL and ETag (possibly empty); a record cut inside its
    // ETag is refused.
    ShardMeta remote;
    remote.flags = kShardRemote;
    remote.path = "s3://bucket/train/shard-000001.tar";
    remote.etag = "\"0123456789abcdef\"";
    std::string buf;
    EncodeShardMeta(remote, &buf);
    ShardMeta got;
    ASSERT_TRUE(DecodeShardMeta(buf, &got).ok());
    EXPECT_TRUE(got.remote());
    EXPECT_EQ(got.path, remote.path);
    EXPECT_EQ(got.etag, remote.etag);
    EXPECT_FALSE(DecodeShardMeta(std::string_view(buf).substr(0, 30), &got).ok());
    EXPECT_FALSE(DecodeShardMeta(std::string_view(buf).substr(0, 26), &got).ok());
    remote.etag.clear();
    EncodeShardMeta(remote, &buf);
    ASSERT_TRUE(DecodeShardMeta(buf, &got).ok());
    EXPECT_EQ(got.etag, "");
    EXPECT_EQ(got.path, remote.path);
  }
  ShardMeta max;
  max.size = kU64Max;
  max.mtime_ns = std::numeric_limits<int64_t>::min();
  max.fingerprint = kU64Max;
  max.path = "m";
  std::string buf;
  EncodeShardMeta(max, &buf);
  ShardMeta got;
  ASSERT_TRUE(DecodeShardMeta(buf, &got).ok());
  EXPECT_EQ(got.size, kU64Max);
  EXPECT_EQ(got.mtime_ns, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(got.fingerprint, kU64Max);
}

TEST(ShardMetaTest, DecodeRejectsShortValues) {
  ShardMeta got;
  for (size_t n : {0, 1, 8, 24}) {
    EXPECT_EQ(DecodeShardMeta(std::string(n, '\x01'), &got).code(), Status::Code::kCorruption)
        << "length " << n;
  }
}

TEST(KeyTest, DirentKeyDecodesBack) {
  DirentKeyBuffer buf;
  std::string longest(kMaxNameLength, '\xff');
  for (uint64_t parent : {uint64_t{1}, uint64_t{256}, uint64_t{1} << 32, kU64Max}) {
    for (std::string name :
         {std::string("a"), std::string("with/slash?no: raw"), std::string("\0nul", 4), longest}) {
      std::string_view key = EncodeDirentKey(ViewId{7}, InodeId{parent}, name, buf);
      EXPECT_EQ(key.size(), kDirentKeyHeader + name.size());
      EXPECT_EQ(key[0], kDirentPrefix);
      ViewId view;
      InodeId p;
      std::string_view n;
      ASSERT_TRUE(DecodeDirentKey(key, &view, &p, &n));
      EXPECT_EQ(view.value, 7u);
      EXPECT_EQ(p.value, parent);
      EXPECT_EQ(n, name);
    }
  }
  // Big-endian: the parent's most significant byte comes first.
  std::string_view key = EncodeDirentKey(kDefaultView, InodeId{0x0102030405060708}, "n", buf);
  EXPECT_EQ(std::string(key.substr(0, 13)),
            std::string("D\0\0\0\0\x01\x02\x03\x04\x05\x06\x07\x08", 13));
}

TEST(KeyTest, InodeAndShardKeysDecodeBack) {
  InodeKeyBuffer ibuf;
  for (uint64_t inode : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, kU64Max}) {
    std::string_view key = EncodeInodeKey(ViewId{3}, InodeId{inode}, ibuf);
    ASSERT_EQ(key.size(), kInodeKeySize);
    ViewId view;
    InodeId got;
    ASSERT_TRUE(DecodeInodeKey(key, &view, &got));
    EXPECT_EQ(view.value, 3u);
    EXPECT_EQ(got.value, inode);
  }
  ShardKeyBuffer sbuf;
  for (uint32_t shard : {0u, 1u, 65536u, kU32Max}) {
    std::string_view key = EncodeShardKey(ShardId{shard}, sbuf);
    ShardId got;
    ASSERT_TRUE(DecodeShardKey(key, &got));
    EXPECT_EQ(got.value, shard);
  }
  EXPECT_EQ(EncodeMetaKey("schema_version"), "Mschema_version");
}

TEST(KeyTest, DecodersRejectOtherShapes) {
  ViewId view;
  InodeId inode;
  ShardId shard;
  std::string_view name;
  InodeKeyBuffer ibuf;
  std::string inode_key(EncodeInodeKey(kDefaultView, InodeId{5}, ibuf));
  DirentKeyBuffer dbuf;
  std::string prefix(EncodeDirentPrefix(kDefaultView, InodeId{5}, dbuf));
  // A dirent key needs a name; an inode key is not a dirent key.
  EXPECT_FALSE(DecodeDirentKey(prefix, &view, &inode, &name));
  EXPECT_FALSE(DecodeDirentKey(inode_key + "x", &view, &inode, &name));
  EXPECT_FALSE(DecodeDirentKey("", &view, &inode, &name));
  EXPECT_FALSE(DecodeInodeKey(inode_key.substr(0, 12), &view, &inode));
  EXPECT_FALSE(DecodeInodeKey(inode_key + "x", &view, &inode));
  EXPECT_FALSE(DecodeInodeKey(prefix, &view, &inode));  // Same size, prefix 'D'.
  EXPECT_FALSE(DecodeShardKey(std::string("S\0\0\0", 4), &shard));
  EXPECT_FALSE(DecodeShardKey(std::string("X\0\0\0\0", 5), &shard));
}

// Values that straddle byte boundaries of the big-endian fields.
std::vector<uint64_t> BoundaryValues() {
  std::vector<uint64_t> v = {0, 1, 2, 254, 255, 256, 257, 511, 512, 65535, 65536, 65537};
  for (int bits : {24, 31, 32, 33, 40, 48, 56, 63}) {
    uint64_t p = uint64_t{1} << bits;
    v.insert(v.end(), {p - 1, p, p + 1});
  }
  v.insert(v.end(), {kU64Max - 1, kU64Max});
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

TEST(KeyOrderTest, InodeKeysSortNumerically) {
  std::vector<uint64_t> values = BoundaryValues();
  InodeKeyBuffer a, b;
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    std::string_view ka = EncodeInodeKey(kDefaultView, InodeId{values[i]}, a);
    std::string_view kb = EncodeInodeKey(kDefaultView, InodeId{values[i + 1]}, b);
    EXPECT_LT(Bytewise(ka, kb), 0) << values[i] << " vs " << values[i + 1];
  }
  // And the view comes first: every key of view 0 sorts before view 1.
  std::string_view max0 = EncodeInodeKey(ViewId{0}, InodeId{kU64Max}, a);
  std::string_view min1 = EncodeInodeKey(ViewId{1}, InodeId{0}, b);
  EXPECT_LT(Bytewise(max0, min1), 0);
}

TEST(KeyOrderTest, ChildKeysStayInsideTheirParentsRange) {
  std::vector<uint64_t> parents = BoundaryValues();
  const std::vector<std::string> names = {std::string("\0", 1), "a", "zzz",
                                          std::string(kMaxNameLength, '\xff'),
                                          std::string(kMaxNameLength, '\0')};
  // Every child key of every parent, sorted bytewise, must come out grouped
  // by parent in numeric order and by name inside a parent.
  struct Item {
    std::string key;
    uint64_t parent;
    std::string name;
  };
  std::vector<Item> items;
  DirentKeyBuffer buf;
  for (uint64_t p : parents) {
    for (const std::string& n : names) {
      items.push_back({std::string(EncodeDirentKey(kDefaultView, InodeId{p}, n, buf)), p, n});
    }
  }
  std::sort(items.begin(), items.end(),
            [](const Item& x, const Item& y) { return Bytewise(x.key, y.key) < 0; });
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    const Item& x = items[i];
    const Item& y = items[i + 1];
    ASSERT_LE(x.parent, y.parent) << "parent " << x.parent << " after " << y.parent;
    if (x.parent == y.parent) {
      EXPECT_LT(Bytewise(x.name, y.name), 0);
    }
  }
  // Each parent's prefix starts its range, and its largest possible child
  // (a maximal name of 0xff bytes) sorts before the next parent's prefix.
  for (size_t i = 0; i + 1 < parents.size(); ++i) {
    if (parents[i] + 1 != parents[i + 1]) continue;
    DirentKeyBuffer pb, nb, cb;
    std::string_view prefix = EncodeDirentPrefix(kDefaultView, InodeId{parents[i]}, pb);
    std::string_view next = EncodeDirentPrefix(kDefaultView, InodeId{parents[i + 1]}, nb);
    std::string_view child = EncodeDirentKey(kDefaultView, InodeId{parents[i]}, names[3], cb);
    EXPECT_EQ(child.substr(0, prefix.size()), prefix);
    EXPECT_LT(Bytewise(prefix, child), 0);
    EXPECT_LT(Bytewise(child, next), 0) << "parent " << parents[i];
  }
}

}  // namespace
}  // namespace shardfs::index
