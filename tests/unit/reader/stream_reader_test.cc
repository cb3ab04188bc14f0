// src/reader/stream_reader.h held to src/codec/ctar_codec.h's bound on the
// compressed bytes of one interval of a compressed tar: an index whose
// seek table makes an interval span more than kMaxIntervalInputBytes of the
// shard is refused (Corruption naming the shard and the seek point) before
// anything is allocated or read; the last interval of an honest shard with
// more bytes after its stream than that still reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <string>

#include "index/index_writer.h"
#include "index/schema.h"
#include "src/codec/ctar_codec.h"
#include "tests/unit/codec/codec_test_util.h"
#include "tests/unit/index/index_surgery.h"
#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

using reader_testing::InodeOf;
using shardfs::testing::TempDir;
using ::testing::HasSubstr;

// Appends a member `path` holding `data` to the tar bytes `tar` and returns
// it as the index records it.
index::MemberEntry AddFile(std::string* tar, std::string_view path, std::string_view data) {
  index::MemberEntry m;
  m.path = path;
  m.mode = 0644;
  m.mtime_ns = 1'600'000'000'000'000'000;
  m.size = data.size();
  m.header_offset = tar->size();
  m.offset = tar->size() + 512;
  m.has_checksum = true;
  m.xxh3 = XXH3_64bits(data.data(), data.size());
  *tar += shardfs::testing::UstarHeader(path, '0', data.size(), 1'600'000'000);
  tar->append(data);
  tar->resize((tar->size() + 511) / 512 * 512, '\0');
  return m;
}

Status ReadFile(Filesystem& fs, std::string_view path, std::string* out) {
  out->assign(1 << 20, '\0');
  size_t n = 0;
  Status s = fs.Read(reader_testing::InodeOf(fs, path), 0, out->size(), out->data(), &n);
  out->resize(s.ok() ? n : 0);
  return s;
}

TEST(IntervalInputTest, AnIntervalSpanningMoreThanTheBoundIsRefusedBeforeItIsRead) {
  TempDir dir;
  // Two gzip members, one file in each (a point at each member), then zeros
  // up to 100 MiB (accepted as padding): more than the bound after the last
  // point.
  std::string first, second;
  index::MemberEntry a = AddFile(&first, "a", std::string(5000, 'a'));
  index::MemberEntry b = AddFile(&second, "b", std::string(7000, 'b'));
  b.header_offset += first.size();
  b.offset += first.size();
  second.append(1024, '\0');
  const std::string shard = dir / "s.tar.gz";
  constexpr uint64_t kShardSize = uint64_t{100} << 20;
  static_assert(kShardSize > codec::kMaxIntervalInputBytes);
  const std::string gz_first = shardfs::testing::Gzip(first);
  shardfs::testing::WriteFile(shard, gz_first + shardfs::testing::Gzip(second));
  ASSERT_EQ(::truncate(shard.c_str(), kShardSize), 0);
  const std::string idx = dir / "idx";
  {
    index::IndexWriter w;
    index::SeekPoint at_second;
    at_second.decoded = first.size();
    at_second.compressed = gz_first.size();
    a.shard = b.shard = reader_testing::AddGzipShard(&w, shard, first.size() + second.size(),
                                                     {index::SeekPoint{}, at_second});
    w.AddMember(a);
    w.AddMember(b);
    Result<index::WriteStats> written = w.Finish(idx, index::WriteOptions{});
    ASSERT_TRUE(written.ok()) << written.status().message();
  }

  std::string got;
  {
    std::unique_ptr<Filesystem> fs = reader_testing::OpenFs(idx);
    ASSERT_TRUE(fs);
    ASSERT_TRUE(ReadFile(*fs, "a", &got).ok());
    EXPECT_EQ(got, std::string(5000, 'a'));
    // The last interval: read up to the bound past its point, not to the
    // end of the padding.
    Status s = ReadFile(*fs, "b", &got);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got, std::string(7000, 'b'));
  }

  // The second point moved to 90 MiB: the first interval would span it.
  std::string value;
  index::SeekTable table;
  {
    auto r = index::IndexReader::Open(idx);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_TRUE((*r)->GetSeekValue(index::ShardId{0}, false, 0, &value).ok());
    ASSERT_TRUE(index::DecodeSeekTable(value, &table).ok());
  }
  ASSERT_EQ(table.points.size(), 2u);
  table.points[1].compressed = uint64_t{90} << 20;
  value.clear();
  index::EncodeSeekTable(table, &value);
  ASSERT_EQ(
      shardfs::testing::EditIndex(idx, {{index::EncodeSeekTableKey(index::ShardId{0}), value}}),
      "");
  std::unique_ptr<Filesystem> fs = reader_testing::OpenFs(idx);
  ASSERT_TRUE(fs);
  Status s = ReadFile(*fs, "a", &got);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_THAT(s.message(), HasSubstr(shard));
  EXPECT_THAT(s.message(),
              HasSubstr(fmt::format("seek point 0 at compressed byte 0: its interval's compressed "
                                    "bytes run to byte {}, {} bytes, more than the {}",
                                    (uint64_t{90} << 20) + 1, (uint64_t{90} << 20) + 1,
                                    codec::kMaxIntervalInputBytes)));
}

}  // namespace
}  // namespace shardfs::reader
