// src/reader/chunk_file.h: the chunk header round trip and what breaks it,
// the checked read of a payload, claim files, and the directory listing's
// sorting of chunks, leftovers of the dead and files of others.
#include "src/reader/chunk_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <string>

#include "base/fd.h"
#include "src/reader/cache_dir.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

using shardfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

std::string ChunkBytes(uint64_t id_hash, uint64_t index, const std::string& payload) {
  std::string out(kChunkHeaderSize, '\0');
  EncodeChunkHeader({static_cast<uint32_t>(payload.size()), id_hash, index,
                     XXH3_64bits(payload.data(), payload.size())},
                    out.data());
  return out + payload;
}

ProcessStamp Gone() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return ProcessStamp{pid, 1};
}

TEST(ChunkFileTest, HeaderRoundTripAndDamage) {
  std::string raw(kChunkHeaderSize, '\0');
  EncodeChunkHeader({100, 0xabc, 7, 0x1234}, raw.data());
  ChunkHeader h;
  ASSERT_TRUE(DecodeChunkHeader(raw.data(), &h));
  EXPECT_EQ(h.len, 100u);
  EXPECT_EQ(h.id_hash, 0xabcu);
  EXPECT_EQ(h.index, 7u);
  EXPECT_EQ(h.xxh3, 0x1234u);
  for (size_t i : {0, 8, 12, 20, 40, 60}) {
    std::string bad = raw;
    bad[i] ^= 1;
    EXPECT_FALSE(DecodeChunkHeader(bad.data(), &h)) << "byte " << i;
  }
}

TEST(ChunkFileTest, CheckedReadRefusesAnyDamagedByte) {
  TempDir dir;
  const std::string payload = shardfs::testing::PseudoRandomBytes(100000, 3);
  const std::string good = ChunkBytes(5, 2, payload);
  const std::string path = dir / "c";
  std::string buf(1000, '\0');
  std::string why;
  shardfs::testing::WriteFile(path, good);
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  ASSERT_TRUE(ReadCheckedChunk(fd.get(), 5, 2, 100000, 500, 1000, buf.data(), &why)) << why;
  EXPECT_EQ(buf, payload.substr(500, 1000));
  EXPECT_FALSE(ReadCheckedChunk(fd.get(), 6, 2, 100000, 0, 10, buf.data(), &why));
  std::string bad = good;
  bad[kChunkHeaderSize + 99999] ^= 0x10;  // Far from the range read.
  shardfs::testing::WriteFile(path, bad);
  UniqueFd fd2(::open(path.c_str(), O_RDONLY));
  EXPECT_FALSE(ReadCheckedChunk(fd2.get(), 5, 2, 100000, 0, 10, buf.data(), &why));
  EXPECT_THAT(why, ::testing::HasSubstr("payload XXH3"));
}

TEST(ChunkFileTest, ClaimsOfTheLiveHoldTheDeadAreTakenOver) {
  TempDir dir;
  UniqueFd d(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY));
  const std::string name = FormatClaimName(1, 2);
  EXPECT_EQ(TryClaimFile(d.get(), name), ClaimFile::kMine);
  EXPECT_EQ(TryClaimFile(d.get(), name), ClaimFile::kHeld);  // Held by this live process.
  shardfs::testing::WriteFile(dir / name, FormatStamp(Gone()));
  EXPECT_EQ(TryClaimFile(d.get(), name), ClaimFile::kMine);
  ProcessStamp holder;
  ASSERT_TRUE(ParseStamp(shardfs::testing::ReadFile(dir / name), &holder));
  EXPECT_EQ(holder.pid, ::getpid());
}

TEST(ChunkFileTest, ListingSortsChunksLeftoversAndOthers) {
  TempDir dir;
  UniqueFd d(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY));
  shardfs::testing::WriteFile(dir / FormatChunkName(9, 1), ChunkBytes(9, 1, "payload"));
  shardfs::testing::WriteFile(dir / FormatChunkName(9, 2), ChunkBytes(9, 3, "wrong index"));
  const std::string dead_tmp = FormatOwnedTmpName(Gone(), 1);
  shardfs::testing::WriteFile(dir / dead_tmp, "dead");
  shardfs::testing::WriteFile(dir / FormatOwnedTmpName(ThisProcess(), 1), "live");
  shardfs::testing::WriteFile(dir / "notes", "x");
  shardfs::testing::WriteFile(dir / kCacheLock, "");
  ChunkDirListing checked;
  ASSERT_TRUE(ListChunkDir(d.get(), dir.path(), true, &checked).ok());
  ASSERT_EQ(checked.found.size(), 1u);
  EXPECT_EQ(checked.found[0].name, FormatChunkName(9, 1));
  EXPECT_EQ(checked.found[0].len, 7u);
  EXPECT_THAT(checked.bad, UnorderedElementsAre(FormatChunkName(9, 2), dead_tmp));
  EXPECT_THAT(checked.others, ElementsAre("notes"));
  ChunkDirListing quick;
  ASSERT_TRUE(ListChunkDir(d.get(), dir.path(), false, &quick).ok());
  EXPECT_EQ(quick.found.size(), 2u);  // Headers unread: both names count.
  EXPECT_THAT(quick.bad, ElementsAre(dead_tmp));
}

}  // namespace
}  // namespace shardfs::reader
