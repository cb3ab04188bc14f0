// src/reader/filesystem.h on sparse files: Filesystem reads and verification
// over a shard holding a file's extents, compared with the source file (with
// holes) they were taken from.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/io.h"
#include "index/index_reader.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "src/reader/filesystem.h"
#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

using index::EntryRecord;
using index::Extent;
using testing::TempDir;

// Filesystem::Read over a sparse file's extents, at offsets inside extents,
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
  // The shard holds the file's data, extent after extent, after one header
  // block, as GNU tar --sparse stores it; the stored bytes are checksummed,
  // not the holes.
  const std::vector<std::pair<uint64_t, uint64_t>> data = {
      {8192, 5000}, {uint64_t{1} << 20, 5000}, {(uint64_t{3} << 20) - 4096, 4096 + 777}};
  std::string shard_bytes = testing::UstarHeader("holes.bin", 'S', 0, 1600000000);
  std::vector<Extent> extents;
  for (const auto& [logical, length] : data) {
    extents.push_back({logical, length, shard_bytes.size()});
    shard_bytes += want.substr(logical, length);
  }
  const std::string stored = shard_bytes.substr(512);
  shard_bytes.resize((shard_bytes.size() + 511) / 512 * 512 + 1024, '\0');
  const std::string shard = dir / "s.tar";
  testing::WriteFile(shard, shard_bytes);
  {
    index::IndexWriter w;
    index::MemberEntry m;
    m.path = "holes.bin";
    m.mode = 0644;
    m.size = size;
    m.offset = extents[0].physical;
    m.shard = w.AddShard(reader_testing::ShardMetaOf(shard));
    m.has_checksum = true;
    m.xxh3 = XXH3_64bits(stored.data(), stored.size());
    w.AddSparseMember(m, extents);
    Result<index::WriteStats> written = w.Finish(dir / "idx", index::WriteOptions{});
    ASSERT_TRUE(written.ok()) << written.status().message();
  }
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
}  // namespace shardfs
