#include "src/mount/open_dirs.h"

#include <new>
#include <utility>

namespace shardfs::mount {

DirHandle* OpenDirs::Open(reader::DirCursor cursor) noexcept {
  auto* handle = new (std::nothrow) DirHandle{{}, std::move(cursor)};
  if (!handle) return nullptr;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    open_.insert(handle);
  } catch (const std::bad_alloc&) {
    delete handle;
    return nullptr;
  }
  return handle;
}

void OpenDirs::Release(DirHandle* handle) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(handle);
  }
  delete handle;
}

void OpenDirs::FreeAll() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  for (DirHandle* handle : open_) delete handle;
  open_.clear();
}

}  // namespace shardfs::mount
