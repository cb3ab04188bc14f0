#include "src/shard_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "index/fingerprint.h"
#include "index/log.h"

namespace shardfs::mount {

OpenShard::~OpenShard() { ::close(fd_); }

ShardCache::ShardCache(std::vector<Shard> shards, ShardCacheOptions options)
    : shards_(std::move(shards)),
      options_(options),
      slots_(std::make_unique<Slot[]>(shards_.size())) {
  if (options_.max_open == 0) options_.max_open = 1;
}

Result<ShardHandle> ShardCache::Open(uint32_t id) {
  const Shard& s = shards_[id];
  int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, fmt::format("shard {}", s.path));
  auto handle = std::make_shared<OpenShard>(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, fmt::format("shard {}", s.path));
  if (!S_ISREG(st.st_mode)) {
    return Status::Corruption(fmt::format("shard {}: not a regular file any more", s.path));
  }
  if (static_cast<uint64_t>(st.st_size) != s.meta.size) {
    return Status::Corruption(fmt::format("shard {}: size is {} bytes, indexed as {}", s.path,
                                          st.st_size, s.meta.size));
  }
  Result<uint64_t> fp = index::ShardFingerprint(fd, s.meta.size);
  if (!fp.ok()) return fp.status().WithContext(fmt::format("shard {}", s.path));
  if (*fp != s.meta.fingerprint) {
    return Status::Corruption(fmt::format(
        "shard {}: content differs from the indexed shard (fingerprint {:016x}, indexed "
        "{:016x}): replaced after indexing?",
        s.path, *fp, s.meta.fingerprint));
  }
  return handle;
}

Result<ShardHandle> ShardCache::Get(index::ShardId id) {
  if (id.value >= shards_.size()) {
    return Status::Corruption(fmt::format("shard id {} out of range", id.value));
  }
  Slot& slot = slots_[id.value];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot.handle) {
      lru_.splice(lru_.begin(), lru_, slot.lru_pos);
      return slot.handle;
    }
    if (!slot.bad.ok()) return slot.bad;
  }
  // Open and check outside the lock: it reads 128 KiB. Two threads may race
  // to open the same shard; the second keeps the first's handle.
  Result<ShardHandle> opened = Open(id.value);
  if (!opened.ok()) {
    MarkBad(id, opened.status());
    return opened.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (slot.handle) return slot.handle;
  slot.handle = *opened;
  lru_.push_front(id.value);
  slot.lru_pos = lru_.begin();
  while (lru_.size() > options_.max_open) {
    uint32_t victim = lru_.back();
    lru_.pop_back();
    slots_[victim].handle.reset();  // Closes once the last reader lets go.
  }
  return slot.handle;
}

void ShardCache::MarkBad(index::ShardId id, const Status& reason) {
  Slot& slot = slots_[id.value];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot.bad.ok()) slot.bad = reason;
    if (slot.handle) {
      lru_.erase(slot.lru_pos);
      slot.handle.reset();
    }
  }
  if (!slot.logged.exchange(true)) {
    log::Error("{}; reads of its files fail with EIO", reason.message());
  }
}

bool ShardCache::NoteRead(index::ShardId id, int fd, uint64_t pos, size_t len) {
  if (id.value >= shards_.size()) return false;
  Slot& slot = slots_[id.value];
  uint64_t last = slot.next_pos.exchange(pos + len, std::memory_order_relaxed);
  uint64_t pushed = slot.pushed_end.load(std::memory_order_relaxed);
  // Sequential: this read starts at or shortly after where the last ended
  // (tar headers and padding lie between members).
  constexpr uint64_t kGap = 64 * 1024;
  auto follows = [&](uint64_t end) { return pos >= end && pos - end <= kGap; };
  if (!follows(last) && !(pushed != 0 && follows(pushed))) return false;
  uint64_t window = options_.readahead;
  if (window == 0) return true;
  uint64_t have = slot.prefetched.load(std::memory_order_relaxed);
  if (have > pos + len + window / 2) return true;  // Still well ahead.
  uint64_t from = std::max(have, pos + len);
  uint64_t to = std::min(pos + len + window, shards_[id.value].meta.size);
  if (to <= from) return true;
  if (!slot.prefetched.compare_exchange_strong(have, to, std::memory_order_relaxed)) return true;
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                  POSIX_FADV_WILLNEED);
  return true;
}

void ShardCache::DropBehind(index::ShardId id, int fd, uint64_t end) {
  constexpr uint64_t kStep = 2 << 20;
  if (id.value >= shards_.size() || end < 2 * kStep) return;
  Slot& slot = slots_[id.value];
  uint64_t to = (end - kStep) / kStep * kStep;
  uint64_t from = slot.dropped.load(std::memory_order_relaxed);
  if (to <= from || !slot.dropped.compare_exchange_strong(from, to, std::memory_order_relaxed)) {
    return;
  }
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), POSIX_FADV_DONTNEED);
}

bool ShardCache::BeginPush(index::ShardId id) {
  if (id.value >= shards_.size()) return false;
  return !slots_[id.value].pushing.exchange(true, std::memory_order_acquire);
}

void ShardCache::EndPush(index::ShardId id, uint64_t end) {
  Slot& slot = slots_[id.value];
  if (end != 0) slot.pushed_end.store(end, std::memory_order_relaxed);
  slot.pushing.store(false, std::memory_order_release);
}

std::vector<Status> ShardCache::CheckAll() {
  std::vector<Status> problems;
  for (uint32_t i = 0; i < shards_.size(); ++i) {
    Result<ShardHandle> h = Get(index::ShardId{i});
    if (!h.ok()) problems.push_back(h.status());
  }
  return problems;
}

size_t ShardCache::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace shardfs::mount
