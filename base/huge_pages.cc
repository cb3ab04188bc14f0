#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace shardfs {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t bytes) { return (bytes + kHugePage - 1) & ~(kHugePage - 1); }

}  // namespace

void* AllocateHuge(size_t bytes) {
  if (bytes > SIZE_MAX - 2 * kHugePage) throw std::bad_alloc();
  const size_t size = RoundUp(bytes);
  // Map a huge page more than needed and cut the ends, so the block starts
  // on a 2 MiB boundary and every page of it can be a huge one.
  const size_t mapped = size + kHugePage;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (base + kHugePage - 1) & ~(kHugePage - 1);
  if (start > base) ::munmap(m, start - base);
  const size_t tail = base + mapped - (start + size);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(start + size), tail);
  // Advice only: without THP the block works in small pages.
  ::madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void FreeHuge(void* p, size_t bytes) noexcept { ::munmap(p, RoundUp(bytes)); }

}  // namespace shardfs
