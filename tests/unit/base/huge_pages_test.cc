// base/huge_pages.h: large blocks aligned, zeroed, advised and unmapped, and
// vectors keeping their elements across the threshold.
#include "base/huge_pages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace shardfs {
namespace {

using ::testing::HasSubstr;

// The VmFlags line of the mapping that holds `p`, from /proc/self/smaps.
std::string VmFlagsOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find('-') < 17) {
      inside = from <= addr && addr < to;
    } else if (inside && line.starts_with("VmFlags:")) {
      return line;
    }
  }
  return "";
}

TEST(HugePagesTest, LargeBlocksAreAlignedZeroedAdvisedAndUnmapped) {
  constexpr size_t kBytes = kHugeBlockMin + 12345;
  auto* p = static_cast<unsigned char*>(AllocateHuge(kBytes));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u);
  size_t nonzero = 0;
  for (size_t i = 0; i < kBytes; i += 4096) nonzero += p[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  p[0] = 1;
  p[kBytes - 1] = 2;
  // The advice is what the kernel keeps as "hg"; a kernel built without
  // THP has no such directory and refuses the advice.
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    EXPECT_THAT(VmFlagsOf(p), HasSubstr(" hg"));
  }
  FreeHuge(p, kBytes);
  unsigned char resident = 0;
  EXPECT_EQ(::mincore(p, 4096, &resident), -1);  // Unmapped.
  EXPECT_EQ(errno, ENOMEM);
}

TEST(HugePagesTest, VectorsKeepTheirElementsAcrossTheThreshold) {
  HugeVector<uint64_t> v;
  const size_t n = 3 * kHugeBlockMin / sizeof(uint64_t);  // Grows from small blocks to huge ones.
  for (size_t i = 0; i < n; ++i) v.push_back(i * 2654435761u);
  ASSERT_EQ(v.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (size_t{2} << 20), 0u);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += v[i] != i * 2654435761u;
  EXPECT_EQ(wrong, 0u);
  HugeVector<uint64_t> small(16, 7);  // Below the threshold: the heap, as std::vector.
  EXPECT_EQ(small[15], 7u);
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(v.capacity(), 0u);
}

}  // namespace
}  // namespace shardfs
