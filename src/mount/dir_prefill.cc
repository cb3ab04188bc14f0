#include "src/mount/dir_prefill.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <vector>

#include "base/log.h"

namespace shardfs::mount {
bool PrefillPolicy::NoteMiss(uint64_t dir) {
  DirState& d = dirs_[dir];
  if (d.queued) return false;
  const uint64_t first = past_limit_ ? kMissesPastLimit : kMissesBeforeListing;
  const uint64_t threshold = d.entries != 0 ? std::max(first, d.entries / kEntriesPerMiss)
                                            : first << (2 * std::min(d.listings, 15u));
  if (++d.misses < threshold) return false;
  return Queue({dir, "", false, past_limit_});
}

bool PrefillPolicy::Queue(Job job) {
  DirState& d = dirs_[job.dir];
  if (d.queued || (job.sibling && d.listings > 0)) return false;
  d.queued = true;
  d.misses = 0;
  ++d.listings;
  queue_.push_back(std::move(job));
  return true;
}

bool PrefillPolicy::Next(Job* job) {
  if (queue_.empty()) return false;
  *job = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void PrefillPolicy::Done(uint64_t dir, uint64_t entries) {
  DirState& d = dirs_[dir];
  d.queued = false;
  if (entries != 0) d.entries = entries;
}

bool PrefillPolicy::Busy(uint64_t dir) const {
  auto it = dirs_.find(dir);
  return it != dirs_.end() && it->second.queued;
}

uint32_t PrefillPolicy::TakeSiblingCount(uint64_t parent) {
  DirState& p = dirs_[parent];
  uint32_t n = p.siblings;
  p.siblings = std::min(p.siblings * 2, kMaxSiblings);
  return n;
}

uint64_t DefaultPrefillEntries() {
  constexpr uint64_t kKernelBytesPerEntry = 1100;
  constexpr uint64_t kAtLeast = 1'000'000;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kAtLeast;
  const uint64_t memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return std::max(kAtLeast, memory / 16 / kKernelBytesPerEntry);
}

DirPrefill::DirPrefill(const index::IndexReader* reader, std::string mountpoint,
                       uint64_t max_entries)
    : reader_(reader),
      max_entries_(max_entries),
      lister_(std::move(mountpoint)),
      thread_([this] { Run(); }) {}

DirPrefill::~DirPrefill() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  done_cv_.notify_all();
  thread_.join();
}

void DirPrefill::NoteMiss(index::InodeId dir) {
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = policy_.NoteMiss(dir.value);
  }
  if (queued) cv_.notify_one();
}

AttrPolicy::AttrPolicy(uint64_t max_inode)
    : max_inode_(max_inode), looked_up_(max_inode), subtree_(max_inode), names_only_(max_inode) {}

void AttrPolicy::NoteFileLookup(index::InodeId dir, index::InodeId dir_parent) {
  if (dir.value > max_inode_ || looked_up_.Test(dir)) return;
  looked_up_.Set(dir);
  if (dir != index::kRootInode) subtree_.Set(dir_parent);
}

bool AttrPolicy::WantAttrs(index::InodeId dir, index::InodeId parent) {
  if (dir.value > max_inode_ || looked_up_.Test(dir) || subtree_.Test(dir)) return true;
  if (dir == index::kRootInode) return false;
  // A lookup in the root marks the root alone (see the header).
  bool inherit = subtree_.Test(parent) || (parent != index::kRootInode && looked_up_.Test(parent));
  if (!inherit) return false;
  // Inherited: this directory's own subdirectories follow it.
  subtree_.Set(dir);
  return true;
}

void DirPrefill::ListNow(index::InodeId dir) {
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = policy_.ListNow(dir.value);
  }
  log::Debug("prefill: directory inode {} was listed names-only; {}", dir.value,
             queued ? "listing it again with attributes"
                    : "not queued (a listing is under way, or past the entry limit)");
  if (queued) cv_.notify_one();
}

bool DirPrefill::WaitListed(index::InodeId dir, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!policy_.Busy(dir.value)) return false;
  return done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return stop_ || !policy_.Busy(dir.value);
  }) && !stop_;
}

void DirPrefill::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !policy_.empty(); });
    if (stop_) return;
    Job job;
    policy_.Next(&job);
    lock.unlock();
    // Past the limit only a directory a program goes through has its
    // siblings listed ahead: a walk or an epoch goes on to them.
    uint64_t entries = 0;
    if (List(job, &entries) && !job.sibling && (listed_entries_ < max_entries_ || job.past_limit)) {
      QueueSiblings(job);
    }
    lock.lock();
    policy_.Done(job.dir, entries);
    done_cv_.notify_all();
  }
}

bool DirPrefill::List(Job& job, uint64_t* listed) {
  index::InodeId dir{job.dir};
  if (listed_entries_ >= max_entries_ && !job.past_limit) return false;  // Said once, below.
  if (job.path.empty() && dir != index::kRootInode) {
    Status s = reader_->PathOf(dir, &job.path);
    if (!s.ok()) {
      log::Debug("prefill: inode {}: {}", dir.value, s.message());
      return false;
    }
  }
  log::Debug("prefill: listing directory inode {}", dir.value);
  uint64_t entries = 0;
  Status s = lister_.List(job.path, &entries);
  if (!s.ok()) {
    log::Debug("prefill: {}: {}", job.path.empty() ? "/" : job.path, s.message());
    return false;
  }
  const bool was_below = listed_entries_ < max_entries_;
  listed_entries_ += entries;
  *listed = entries;
  if (was_below && listed_entries_ >= max_entries_) {
    log::Info(
        "prefill: {} entries listed, the limit (-o prefill_entries={}); from now on only "
        "directories in which {} lookups missed are listed",
        listed_entries_, max_entries_, PrefillPolicy::kMissesPastLimit);
    std::lock_guard<std::mutex> lock(mu_);
    policy_.SetPastLimit();
  }
  log::Debug("prefill: listed directory inode {}{}", dir.value, job.sibling ? " (ahead)" : "");
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
    want = policy_.TakeSiblingCount(self.parent.value);
  }
  std::vector<Job> next;
  Status s = reader_->ForEachChild(
      self.parent, name, [&](std::string_view sib, const index::EntryRecord& rec) {
        if (rec.type != index::EntryType::kDir) return true;
        std::string p =
            parent_path.empty() ? std::string(sib) : parent_path + "/" + std::string(sib);
        next.push_back({rec.inode.value, std::move(p), true, job.past_limit});
        return next.size() < want;
      });
  if (!s.ok() || next.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : next) policy_.Queue(std::move(j));
  }
  cv_.notify_one();
}

}  // namespace shardfs::mount
