// src/reader/encoded_reader.h: a record whose sizes no member may have (a
// damaged or crafted index) is refused as Corruption naming the archive and
// the member, before a buffer of either size is allocated: a std::bad_alloc
// inside a FUSE op is std::terminate, the end of the mount.
#include "src/reader/encoded_reader.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

using ::testing::HasSubstr;

TEST(EncodedReaderTest, HugeRecordedSizesAreCorruptionNamingTheMember) {
  shardfs::testing::TempDir dir;
  const std::string zip = dir / "a.zip";
  shardfs::testing::WriteFile(zip, std::string(4096, 'z'));
  const int fd = ::open(zip.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ShardHandle shard = std::make_shared<OpenShard>(index::ShardId{0}, fd);
  DecodedCache cache(1 << 20);
  // {uncompressed, compressed}: each 1 TiB, more than this machine's memory.
  const uint64_t kHuge = uint64_t{1} << 40;
  for (auto [size, comp] : {std::pair{kHuge, uint64_t{64}}, std::pair{uint64_t{64}, kHuge}}) {
    EncodedRead read;
    read.shard = &shard;
    read.encoding = index::EncodedMember{index::kMethodDeflate, 100, comp, 0};
    read.size = size;
    read.length = 1;
    read.archive = zip;
    for (DecodedCache* c : {&cache, static_cast<DecodedCache*>(nullptr)}) {
      char buf[1];
      Status s = ReadEncodedMember(read, c, {}, buf);
      EXPECT_EQ(s.code(), Status::Code::kCorruption) << size << " " << comp;
      EXPECT_THAT(s.message(), HasSubstr("zip " + zip + ": member at byte 100"));
      EXPECT_THAT(s.message(), HasSubstr("more than the"));
    }
  }
}

}  // namespace
}  // namespace shardfs::reader
