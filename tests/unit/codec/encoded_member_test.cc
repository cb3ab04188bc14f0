// src/codec/encoded_member.h: an index's sizes of an encoded member, bounded
// before anything is allocated. A damaged or crafted record may give any
// size; allocating it inside a FUSE op's noexcept trampoline would be a
// std::bad_alloc, std::terminate, and the end of the mount.
#include "src/codec/encoded_member.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace shardfs::codec {
namespace {

using ::testing::HasSubstr;

index::EncodedMember Deflated(uint64_t comp_size) {
  return index::EncodedMember{index::kMethodDeflate, 0, comp_size, 0};
}

TEST(EncodedMemberTest, SizesUpToTheBuildBoundsPass) {
  EXPECT_TRUE(CheckMemberSizes(Deflated(kMaxDeflatedInput), kMaxDeflatedMember).ok());
  EXPECT_TRUE(CheckMemberSizes(Deflated(0), 0).ok());
}

TEST(EncodedMemberTest, ALargerRecordedSizeIsCorruption) {
  Status big = CheckMemberSizes(Deflated(100), kMaxDeflatedMember + 1);
  EXPECT_EQ(big.code(), Status::Code::kCorruption);
  EXPECT_THAT(big.message(), HasSubstr("inflating to 1073741825 bytes, more than the 1073741824"));
  Status input = CheckMemberSizes(Deflated(kMaxDeflatedInput + 1), 100);
  EXPECT_EQ(input.code(), Status::Code::kCorruption);
  EXPECT_THAT(input.message(), HasSubstr("compressed bytes, more than"));
}

TEST(EncodedMemberTest, DecodeRefusesAHugeRecordedSizeWithoutAllocatingIt) {
  const std::string compressed(16, 'x');
  // 1 TiB: more than this machine's memory, so allocating it throws; and
  // the largest values, whose size + 1 wraps.
  for (uint64_t size : {uint64_t{1} << 40, UINT64_MAX - 1, UINT64_MAX}) {
    Result<std::string> r = DecodeMember(Deflated(compressed.size()), compressed, size);
    ASSERT_FALSE(r.ok()) << size;
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << size;
    EXPECT_THAT(r.status().message(), HasSubstr("more than the 1073741824 a member may")) << size;
  }
}

}  // namespace
}  // namespace shardfs::codec
