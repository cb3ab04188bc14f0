#include "src/dir_prefill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "base/log.h"

namespace shardfs::mount {
namespace {

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
    DirState& d = dirs_[dir.value];
    if (d.queued) return;
    uint64_t threshold = uint64_t{kMissesBeforeListing} << (2 * std::min(d.listings, 15u));
    if (++d.misses < threshold) return;
    QueueLocked({dir.value, "", false});
  }
  cv_.notify_one();
}

void DirPrefill::QueueLocked(Job job) {
  DirState& d = dirs_[job.dir];
  if (d.queued || (job.ahead && d.listings > 0)) return;
  d.queued = true;
  d.misses = 0;
  ++d.listings;
  queue_.push_back(std::move(job));
}

void DirPrefill::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (List(job) && !job.ahead) QueueSiblings(job);
    lock.lock();
    dirs_[job.dir].queued = false;
  }
}

bool DirPrefill::List(Job& job) {
  index::InodeId dir{job.dir};
  if (job.path.empty() && dir != index::kRootInode) {
    Status s = reader_->PathOf(dir, &job.path);
    if (!s.ok()) {
      log::Debug("prefill: inode {}: {}", dir.value, s.message());
      return false;
    }
  }
  if (!mount_dev_ && !FindMountDevice()) return false;
  std::string path = job.path.empty() ? mountpoint_ : mountpoint_ + "/" + job.path;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    log::Debug("prefill: {}: {}", path, std::strerror(errno));
    return false;
  }
  // Something mounted over the path (or over the mountpoint) is not ours to
  // list: only directories of this mount are.
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_dev != *mount_dev_) {
    log::Debug("prefill: {}: not on this mount; not listed", path);
    ::close(fd);
    return false;
  }
  auto buf = std::make_unique<char[]>(kDentsBuffer);
  long n;
  while ((n = ::syscall(SYS_getdents64, fd, buf.get(), kDentsBuffer)) > 0) {
  }
  ::close(fd);
  if (n < 0) {
    log::Debug("prefill: {}: {}", path, std::strerror(errno));
    return false;
  }
  log::Debug("prefill: listed directory inode {}{}", dir.value, job.ahead ? " (ahead)" : "");
  return true;
}

bool DirPrefill::FindMountDevice() {
  // The root of a FUSE mount: inode 1 on a filesystem of FUSE's type. Asked
  // from this thread, never from a request worker: the stat is a request.
  constexpr long kFuseSuperMagic = 0x65735546;
  struct stat st;
  struct statfs sf;
  if (::stat(mountpoint_.c_str(), &st) != 0 || ::statfs(mountpoint_.c_str(), &sf) != 0) {
    log::Debug("prefill: {}: {}", mountpoint_, std::strerror(errno));
    return false;
  }
  if (sf.f_type != kFuseSuperMagic || st.st_ino != index::kRootInode.value) {
    log::Warning("prefill: {} is not this mount's root; directories are not listed ahead",
                 mountpoint_);
    return false;
  }
  mount_dev_ = st.st_dev;
  return true;
}

void DirPrefill::QueueSiblings(const Job& job) {
  if (job.dir == index::kRootInode.value) return;
  index::EntryRecord self;
  index::RecordHolder holder;
  if (!reader_->GetInode(index::InodeId{job.dir}, &self, &holder).ok()) return;
  size_t slash = job.path.rfind('/');
  std::string parent_path = slash == std::string::npos ? "" : job.path.substr(0, slash);
  std::string_view name = slash == std::string::npos ? std::string_view(job.path)
                                                     : std::string_view(job.path).substr(slash + 1);
  size_t want;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DirState& parent = dirs_[self.parent.value];
    want = parent.list_ahead;
    parent.list_ahead = std::min(parent.list_ahead * 2, kMaxListAhead);
  }
  std::vector<Job> next;
  Status s = reader_->ForEachChild(
      self.parent, name, [&](std::string_view sib, const index::EntryRecord& rec) {
        if (rec.type != index::EntryType::kDir) return true;
        std::string p =
            parent_path.empty() ? std::string(sib) : parent_path + "/" + std::string(sib);
        next.push_back({rec.inode.value, std::move(p), true});
        return next.size() < want;
      });
  if (!s.ok() || next.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : next) QueueLocked(std::move(j));
  }
  cv_.notify_one();
}

}  // namespace shardfs::mount
