// Large arrays on transparent huge pages.
//
// The offline commands (index build, index add, view create, pack) hold
// arrays with an element per archive member: at 1M members, a few hundred
// MB written once. In 4 KiB pages each page costs a fault, and on a virtual
// machine a fault is dear: an index build of 1M members spent about half of
// its time faulting and clearing pages. Under the kernel's THP mode
// "madvise" (Debian's default) only ranges that ask get huge pages; this
// allocator asks for its large blocks. Small blocks come from the heap as
// before, and a kernel without THP simply ignores the advice.
#ifndef SHARDFS_BASE_HUGE_PAGES_H_
#define SHARDFS_BASE_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace shardfs {

// Blocks from this size up are mapped on their own, 2 MiB aligned, and
// advised for huge pages.
inline constexpr size_t kHugeBlockMin = size_t{4} << 20;

// `bytes` (>= kHugeBlockMin) of zero-filled memory, 2 MiB aligned and
// advised MADV_HUGEPAGE; throws std::bad_alloc.
void* AllocateHuge(size_t bytes);
// Frees a block of AllocateHuge(bytes).
void FreeHuge(void* p, size_t bytes) noexcept;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding.

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    if (n * sizeof(T) < kHugeBlockMin) return std::allocator<T>().allocate(n);
    return static_cast<T*>(AllocateHuge(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugeBlockMin) return std::allocator<T>().deallocate(p, n);
    FreeHuge(p, n * sizeof(T));
  }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

// A vector whose buffer, once large, lies on huge pages.
template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace shardfs

#endif  // SHARDFS_BASE_HUGE_PAGES_H_
