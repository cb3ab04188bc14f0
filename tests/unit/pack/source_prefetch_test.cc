// pack::SourcePrefetch: reads come back in write order whatever the reader
// threads do, the readers stay within their limits, and a file that is not
// what the scan saw is reported, not read.
#include "tools/pack/source_prefetch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "tests/unit/test_util.h"

namespace shardfs::pack {
namespace {

using ::shardfs::testing::TempDir;

class SourcePrefetchTest : public ::testing::Test {
 protected:
  // `n` files f0..f(n-1) of `size` bytes each (sparse when size is large),
  // scanned.
  void Make(int n, uint64_t size) {
    for (int i = 0; i < n; ++i) {
      std::string path = dir_ / ("f" + std::to_string(i));
      if (size <= kWholeFileMax) {
        ::shardfs::testing::WriteFile(path, ::shardfs::testing::PseudoRandomBytes(size, i));
      } else {
        UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
      }
    }
    TreeScanOptions o;
    Result<TreeScan> scan = ScanTree(dir_.path(), o);
    ASSERT_TRUE(scan.ok()) << scan.status().message();
    scan_ = std::move(scan).value();
    root_.reset(::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }

  uint32_t EntryOf(std::string_view path) const {
    for (uint32_t i = 0; i < scan_.entries.size(); ++i) {
      if (scan_.entries[i].path == path) return i;
    }
    ADD_FAILURE() << path;
    return 0;
  }

  // Waits (up to 10 s) until the readers have claimed `n` reads, then gives
  // them a moment to claim more than they should.
  static size_t ClaimedSettled(const SourcePrefetch& p, size_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (p.claimed() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return p.claimed();
  }

  TempDir dir_;
  TreeScan scan_;
  UniqueFd root_;
};

TEST_F(SourcePrefetchTest, ReadsComeBackInWriteOrder) {
  Make(40, 3000);
  std::vector<uint32_t> order;
  for (int i = 39; i >= 0; --i) order.push_back(EntryOf("f" + std::to_string(i)));
  SourcePrefetch p(scan_.entries, order, root_.get(), PrefetchLimits{.bytes = 10000, .files = 8});
  p.Start(4);
  for (size_t k = 0; k < order.size(); ++k) {
    SourcePrefetch::Slot& s = p.Wait(k);
    std::string want = ::shardfs::testing::PseudoRandomBytes(3000, 39 - k);
    ASSERT_EQ(s.result, ReadResult::kOk) << s.reason;
    ASSERT_EQ(std::string(s.data.get(), 3000), want) << k;
    EXPECT_EQ(s.xxh3, XXH3_64bits(want.data(), want.size()));
    EXPECT_EQ(s.fd, -1);
    p.Release(k);
  }
  p.Stop();
}

TEST_F(SourcePrefetchTest, ReadersStayWithinTheFileAndByteLimits) {
  Make(30, 100);
  std::vector<uint32_t> order;
  for (int i = 0; i < 30; ++i) order.push_back(EntryOf("f" + std::to_string(i)));
  {
    SourcePrefetch p(scan_.entries, order, root_.get(), PrefetchLimits{.files = 5});
    p.Start(3);
    EXPECT_EQ(ClaimedSettled(p, 5), 5u);
    for (size_t k = 0; k < 5; ++k) {
      p.Wait(k);
      p.Release(k);
    }
    p.Wait(5);  // The writer's next read is always claimed; waiting wakes the readers.
    EXPECT_EQ(ClaimedSettled(p, 10), 10u);
  }
  {
    SourcePrefetch p(scan_.entries, order, root_.get(), PrefetchLimits{.bytes = 250});
    p.Start(3);
    EXPECT_EQ(ClaimedSettled(p, 2), 2u);
  }
}

TEST_F(SourcePrefetchTest, BigFilesAreOpenedNotReadAndCountedApart) {
  Make(4, kWholeFileMax + 1);
  std::vector<uint32_t> order;
  for (int i = 0; i < 4; ++i) order.push_back(EntryOf("f" + std::to_string(i)));
  SourcePrefetch p(scan_.entries, order, root_.get(), PrefetchLimits{.big_files = 2});
  p.Start(2);
  EXPECT_EQ(ClaimedSettled(p, 2), 2u);
  SourcePrefetch::Slot& s = p.Wait(0);
  ASSERT_EQ(s.result, ReadResult::kOk) << s.reason;
  EXPECT_GE(s.fd, 0);
  EXPECT_EQ(s.data, nullptr);
  EXPECT_TRUE(s.sparse);
  p.Release(0);
  p.Wait(1);
  p.Release(1);
  p.Wait(2);
  EXPECT_EQ(ClaimedSettled(p, 4), 4u);
}

TEST_F(SourcePrefetchTest, AChangedOrMissingFileIsReportedNotRead) {
  Make(3, 10);
  std::vector<uint32_t> order = {EntryOf("f0"), EntryOf("f1"), EntryOf("f2")};
  ::shardfs::testing::WriteFile(dir_ / "f1", "longer than before");
  ASSERT_EQ(::unlink((dir_ / "f2").c_str()), 0);
  SourcePrefetch p(scan_.entries, order, root_.get());
  p.Start(1);
  EXPECT_EQ(p.Wait(0).result, ReadResult::kOk);
  p.Release(0);
  SourcePrefetch::Slot& changed = p.Wait(1);
  EXPECT_EQ(changed.result, ReadResult::kChanged);
  EXPECT_EQ(changed.reason.rfind("changed while being packed (size 10 -> 18", 0), 0u)
      << changed.reason;
  p.Release(1);
  SourcePrefetch::Slot& gone = p.Wait(2);
  EXPECT_EQ(gone.result, ReadResult::kUnreadable);
  EXPECT_EQ(gone.reason, "open: No such file or directory");
  p.Release(2);
}

// ReadDirect asks for O_DIRECT, which a local filesystem refuses for these
// unaligned buffers (at the open or at the read): the readers fall back to
// plain reads and every byte, and every check, is as without it.
TEST_F(SourcePrefetchTest, DirectReadsFallBackWhereRefusedAndReadTheSameBytes) {
  Make(20, 3000);
  ::shardfs::testing::WriteFile(dir_ / "f7", "changed");
  std::vector<uint32_t> order;
  for (int i = 0; i < 20; ++i) order.push_back(EntryOf("f" + std::to_string(i)));
  SourcePrefetch p(scan_.entries, order, root_.get());
  p.ReadDirect();
  p.Start(4);
  for (size_t k = 0; k < order.size(); ++k) {
    SourcePrefetch::Slot& s = p.Wait(k);
    if (k == 7) {
      EXPECT_EQ(s.result, ReadResult::kChanged) << s.reason;
    } else {
      ASSERT_EQ(s.result, ReadResult::kOk) << k << ": " << s.reason;
      EXPECT_EQ(std::string(s.data.get(), 3000), ::shardfs::testing::PseudoRandomBytes(3000, k))
          << k;
    }
    p.Release(k);
  }
  p.Stop();
}

StorageInfo Storage(bool network, std::string fstype) { return StorageInfo{network, fstype}; }

TEST(ChooseSourceReadingTest, NetworkStorageGetsMoreFilesInFlightAndFuseDirectReads) {
  const StorageInfo ext4 = Storage(false, "ext4");
  const StorageInfo sshfs = Storage(true, "fuse.sshfs");
  const StorageInfo nfs = Storage(true, "nfs");
  SourceReading local = ChooseSourceReading(0, 2, &ext4);
  EXPECT_EQ(local.jobs, 4);
  EXPECT_FALSE(local.direct);
  EXPECT_EQ(ChooseSourceReading(0, 8, &ext4).jobs, 16);
  EXPECT_EQ(ChooseSourceReading(0, 2, nullptr).jobs, 4);
  EXPECT_FALSE(ChooseSourceReading(0, 2, nullptr).direct);
  SourceReading net = ChooseSourceReading(0, 2, &sshfs);
  EXPECT_EQ(net.jobs, kNetworkJobs);
  EXPECT_GT(net.jobs, local.jobs);
  EXPECT_TRUE(net.direct);
  EXPECT_EQ(ChooseSourceReading(0, 32, &sshfs).jobs, 64);  // Twice the cores is more.
  EXPECT_EQ(ChooseSourceReading(0, 2, &nfs).jobs, kNetworkJobs);
  EXPECT_FALSE(ChooseSourceReading(0, 2, &nfs).direct);  // A kernel client: its own readahead.
  // --jobs is kept; the reads stay direct.
  EXPECT_EQ(ChooseSourceReading(3, 2, &sshfs).jobs, 3);
  EXPECT_TRUE(ChooseSourceReading(3, 2, &sshfs).direct);
}

}  // namespace
}  // namespace shardfs::pack
