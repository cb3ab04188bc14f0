#include "src/dir_prefill.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include "index/log.h"

namespace shardfs::mount {
namespace {

constexpr uint32_t kQueued = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kMissesBeforeListing = 2;
constexpr size_t kDentsBuffer = 64 * 1024;

}  // namespace

DirPrefill::DirPrefill(const index::IndexReader* reader, std::string mountpoint)
    : reader_(reader), mountpoint_(std::move(mountpoint)), thread_([this] { Run(); }) {}

DirPrefill::~DirPrefill() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DirPrefill::NoteMiss(index::InodeId dir) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t& n = misses_[dir.value];
    if (n == kQueued || ++n < kMissesBeforeListing) return;
    n = kQueued;
    queue_.push_back(dir.value);
  }
  cv_.notify_one();
}

uint64_t DirPrefill::listed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return listed_;
}

void DirPrefill::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    uint64_t dir = queue_.front();
    queue_.pop_front();
    lock.unlock();
    List(index::InodeId{dir});
    lock.lock();
    ++listed_;
  }
}

void DirPrefill::List(index::InodeId dir) {
  std::string rel;
  Status s = reader_->PathOf(dir, &rel);
  if (!s.ok()) {
    log::Debug("prefill: inode {}: {}", dir.value, s.message());
    return;
  }
  std::string path = rel.empty() ? mountpoint_ : mountpoint_ + "/" + rel;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    log::Debug("prefill: {}: {}", path, std::strerror(errno));
    return;
  }
  auto buf = std::make_unique<char[]>(kDentsBuffer);
  long n;
  while ((n = ::syscall(SYS_getdents64, fd, buf.get(), kDentsBuffer)) > 0) {
  }
  if (n < 0) {
    log::Debug("prefill: {}: {}", path, std::strerror(errno));
  } else {
    log::Debug("prefill: listed directory inode {}", dir.value);
  }
  ::close(fd);
}

}  // namespace shardfs::mount
