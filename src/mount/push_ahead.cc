#include "src/mount/push_ahead.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace shardfs::mount {

using reader::EntryRecord;
using reader::FileRange;
using reader::Filesystem;
using reader::InodeBits;
using reader::InodeId;
using reader::PushHint;
using reader::ShardHandle;
namespace {

// Between two members of a tar: their headers (a pax header, a long name)
// and padding. A larger jump is not a reader walking the shard, and the
// next inode lying further away is not the next member.
constexpr uint64_t kMaxGap = 64 * 1024;
// Directories and empty files stepped over between two pushed files.
constexpr int kMaxStepOver = 64;
// Drop-behind works in whole steps: large page-cache folios are only
// dropped whole.
constexpr uint64_t kDropStep = 2 << 20;

uint64_t MaxInode(const Filesystem& fs) { return fs.reader().max_inode(); }

// Pushers go by their own name in top, ps and perf (a profile of the
// daemon then tells the pushes' share from the request workers').
void NamePusherThread() { ::pthread_setname_np(::pthread_self(), "shardfs-push"); }

}  // namespace

struct PushAhead::Counters {
  std::atomic<uint64_t> jobs_queued{0}, jobs_dropped_busy{0}, jobs_dropped_full{0},
      jobs_dropped_stale{0}, jobs_run{0}, files_pushed{0}, files_pushed_fd{0}, bytes_pushed{0},
      files_skipped_read{0}, files_skipped_cold{0}, store_errors{0}, files_wasted{0};
};

PushAhead::PushAhead(Filesystem* fs, PushOptions options, Store store)
    : fs_(fs),
      options_(options),
      shards_(std::make_unique<ShardState[]>(fs->reader().shards().size())),
      shard_count_(fs->reader().shards().size()),
      counters_(std::make_unique<Counters>()),
      store_(std::move(store)) {
  if (options_.random_follows_memory && options_.random_bytes != 0) {
    uint64_t shard_bytes = 0;
    for (const index::ShardMeta& m : fs->reader().shards()) shard_bytes += m.size;
    budget_ =
        std::make_unique<PushBudget>(options_.random_bytes, shard_bytes, options_.mem_available);
  }
  if (options_.sequential_bytes != 0 || options_.random_bytes != 0) {
    read_ = InodeBits(MaxInode(*fs));
    pushed_ = InodeBits(MaxInode(*fs));
  }
}

PushAhead::~PushAhead() { Stop(); }

void PushAhead::Start() {
  if (options_.sequential_bytes == 0 && options_.random_bytes == 0) return;
  unsigned n = std::max(1u, options_.threads);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

void PushAhead::Stop() {
  stopping_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool PushAhead::Sequential(ShardState& s, uint64_t pos, size_t len) const {
  uint64_t last = s.next_pos.exchange(pos + len, std::memory_order_relaxed);
  uint64_t pushed = s.pushed_end.load(std::memory_order_relaxed);
  auto follows = [&](uint64_t end) { return pos >= end && pos - end <= kMaxGap; };
  return follows(last) || (pushed != 0 && follows(pushed));
}

void PushAhead::ShardReadahead(ShardState& s, uint64_t shard_size, int fd, uint64_t pos,
                               size_t len) {
  uint64_t window = options_.shard_readahead;
  if (window == 0) return;
  uint64_t have = s.readahead_end.load(std::memory_order_relaxed);
  if (have > pos + len + window / 2) return;  // Still well ahead.
  uint64_t from = std::max(have, pos + len);
  uint64_t to = std::min(pos + len + window, shard_size);
  if (to <= from) return;
  if (!s.readahead_end.compare_exchange_strong(have, to, std::memory_order_relaxed)) return;
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), POSIX_FADV_WILLNEED);
}

void PushAhead::DropBehind(ShardState& s, int fd, uint64_t end) {
  if (!options_.drop_behind || end < 2 * kDropStep) return;
  uint64_t to = (end - kDropStep) / kDropStep * kDropStep;
  uint64_t from = s.dropped.load(std::memory_order_relaxed);
  if (to <= from || !s.dropped.compare_exchange_strong(from, to, std::memory_order_relaxed)) {
    return;
  }
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), POSIX_FADV_DONTNEED);
}

void PushAhead::DropBehindLine(int fd, uint64_t from, uint64_t to) {
  // Behind the line every page goes, the ones a neighbour shares included:
  // the neighbours were read or pushed already.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  from = from / page * page;
  to = (to + page - 1) / page * page;
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), POSIX_FADV_DONTNEED);
}

void PushAhead::DropRead(int fd, uint64_t pos, size_t len) {
  if (!options_.drop_behind) return;
  // Only pages that hold nothing but this file: the neighbours that share
  // its first and last page, or that the kernel read ahead, stay cached.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t from = (pos + page - 1) / page * page;
  const uint64_t to = (pos + len) / page * page;
  if (to <= from) return;
  ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from), POSIX_FADV_DONTNEED);
}

void PushAhead::Forgotten(InodeId inode) {
  if (pushed_.Test(inode) && !read_.Test(inode)) NoteWasted();
  read_.Clear(inode);
  pushed_.Clear(inode);
}

void PushAhead::NoteWasted() {
  counters_->files_wasted.fetch_add(1, std::memory_order_relaxed);
  if (budget_) budget_->NoteWasted(1);
}

ReadNote PushAhead::NoteRead(InodeId inode, const PushHint& hint) {
  if (!hint.active || hint.shard_id.value >= shard_count_) return {};
  read_.Set(inode);
  // A pushed file that still has a READ lost its pages before its reader
  // came: the push was wasted. Counted once (the mark goes).
  if (pushed_.Test(inode)) {
    pushed_.Clear(inode);
    NoteWasted();
  }
  ShardState& s = shards_[hint.shard_id.value];
  if (!Sequential(s, hint.position, hint.length)) return {};
  // A shard read through the chunk fetcher has its own readahead.
  if (hint.shard->direct()) {
    ShardReadahead(s, fs_->reader().shards()[hint.shard_id.value].size, hint.shard->fd(),
                   hint.position, hint.length);
  }
  return {.sequential_to_eof = hint.ends_file};
}

void PushAhead::AfterReply(InodeId inode, const PushHint& hint, ReadNote note, bool delivered) {
  if (!hint.active || hint.shard_id.value >= shard_count_) return;
  ShardState& s = shards_[hint.shard_id.value];
  const int fd = hint.shard->direct() ? hint.shard->fd() : -1;
  if (delivered && note.sequential_to_eof && fd >= 0) {
    DropBehind(s, fd, hint.position + hint.length);
    // A push ahead moves the drop line past files it did not push; their
    // READs cache shard pages behind the line again, which no later drop
    // would reach.
    uint64_t line = s.dropped.load(std::memory_order_relaxed);
    if (hint.position < line) {
      DropBehindLine(fd, hint.position, std::min<uint64_t>(hint.position + hint.length, line));
    }
  } else if (delivered && hint.whole_file && fd >= 0) {
    DropRead(fd, hint.position, hint.length);
  }
  bool sequential = note.sequential_to_eof;
  uint64_t window = sequential ? options_.sequential_bytes : hint.whole_file ? RandomWindow() : 0;
  if (!sequential && window != 0 && budget_ && !budget_->ForRead()) window = 0;
  if (!delivered || window == 0 || threads_.empty()) return;
  // One sequential push per shard at a time: a reader that overtakes it
  // would otherwise start another over the same files.
  if (sequential && s.busy.exchange(true, std::memory_order_acquire)) {
    counters_->jobs_dropped_busy.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Offer({inode, hint.shard, hint.shard_id, sequential, std::chrono::steady_clock::now()});
}

void PushAhead::Offer(Job job) {
  bool queued = false;
  Job evicted;  // Let go of outside the lock.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && options_.queue_capacity > 0) {
      try {
        // Full: the oldest job goes. It is the likeliest to be stale, and a
        // newer read's neighbours are the likelier to be still unpushed.
        if (queue_.size() >= options_.queue_capacity) {
          evicted = std::move(queue_.front());
          queue_.pop_front();
        }
        queue_.push_back(std::move(job));
        queued = true;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  const Job& dropped = queued ? evicted : job;
  if (queued) {
    counters_->jobs_queued.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_one();
  }
  if (dropped.shard) {
    counters_->jobs_dropped_full.fetch_add(1, std::memory_order_relaxed);
    if (dropped.sequential) {
      shards_[dropped.shard_id.value].busy.store(false, std::memory_order_release);
    }
  }
}

void PushAhead::Run() {
  NamePusherThread();
  std::unique_ptr<char[]> buf(new char[kMaxFile]);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    // Newest first: the file a reader has just read is where its pushes
    // help now; an older job's neighbours may have been read meanwhile.
    Job job = std::move(queue_.back());
    queue_.pop_back();
    lock.unlock();
    if (std::chrono::steady_clock::now() - job.queued > options_.max_job_age) {
      counters_->jobs_dropped_stale.fetch_add(1, std::memory_order_relaxed);
      if (job.sequential) {
        shards_[job.shard_id.value].busy.store(false, std::memory_order_release);
      }
    } else {
      RunJob(job, buf.get());
    }
    job = {};  // Lets go of the shard outside the lock.
    lock.lock();
  }
}

Status PushAhead::Plan(InodeId inode, uint64_t max_bytes, bool stop_at_pushed,
                       std::vector<PlannedFile>* files) const {
  files->clear();
  const index::IndexReader& reader = fs_->reader();
  EntryRecord first;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(reader.GetInode(inode, &first, &holder));
  // A sparse file's offset and size are no range of the shard.
  // Nor is an encoded member's (a deflated zip member).
  if (first.type != index::EntryType::kFile || first.sparse() || first.encoded()) {
    return Status::Ok();
  }
  uint64_t end = first.offset + first.size;
  uint64_t bytes = 0;
  int stepped_over = 0;
  return reader.ForEachInode(InodeId{inode.value + 1}, [&](const EntryRecord& rec) {
    if (rec.type != index::EntryType::kFile || rec.size == 0) {
      return ++stepped_over <= kMaxStepOver;
    }
    if (rec.sparse() || rec.encoded() || rec.shard != first.shard || rec.offset < end ||
        rec.offset - end > kMaxGap || rec.size > kMaxFile || bytes + rec.size > max_bytes) {
      return false;
    }
    end = rec.offset + rec.size;
    bytes += rec.size;
    stepped_over = 0;
    if (pushed_.Test(rec.inode)) return !stop_at_pushed;
    if (read_.Test(rec.inode)) return true;
    files->push_back({rec.inode, rec.offset, rec.size, rec.xxh3, rec.has_checksum()});
    return true;
  });
}

Status PushAhead::PlanJob(const Job& job, int fd, std::vector<PlannedFile>* files) {
  // Nothing from a shard changed since its check, not even in its ctime
  // alone: the next READ of it checks it again or marks it bad
  // (Filesystem::Read).
  int64_t ctime_ns = 0;
  SHARDFS_RETURN_IF_ERROR(job.shard->CheckUnchanged(&ctime_ns));
  if (ctime_ns != 0) return Status::Corruption("the shard's ctime moved");
  const uint64_t window = job.sequential ? options_.sequential_bytes : RandomWindow();
  SHARDFS_RETURN_IF_ERROR(Plan(job.inode, window, !job.sequential, files));
  if (!job.sequential && !files->empty() && fd >= 0) {
    // One disk request for the run instead of readahead ramping up per file.
    uint64_t from = files->front().position;
    uint64_t to = files->back().position + files->back().size;
    ::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                    POSIX_FADV_WILLNEED);
  }
  return Status::Ok();
}

// A random job's files are pushed, on storage read in chunks (a network
// filesystem, a remote shard), only from chunks already here: a guess takes
// neither the link nor a fetch slot from the reads a program waits on. A
// sequential reader is no guess: it reads those chunks next.
void PushAhead::RunJob(const Job& job, char* buf) {
  counters_->jobs_run.fetch_add(1, std::memory_order_relaxed);
  ShardState& s = shards_[job.shard_id.value];
  // -1 for a shard read through the chunk fetcher: no fadvise then.
  const int fd = job.shard->direct() ? job.shard->fd() : -1;
  thread_local std::vector<PlannedFile> files;
  files.clear();
  Status st = PlanJob(job, fd, &files);
  uint64_t end = 0;
  size_t pushed = 0;
  for (size_t i = 0; st.ok() && i < files.size(); ++i) {
    if (stopping_.load(std::memory_order_relaxed)) break;
    const PlannedFile& f = files[i];
    // The reader overtook the push: skip what it has passed.
    if (job.sequential && f.position < s.next_pos.load(std::memory_order_relaxed)) continue;
    // A shuffled reader's neighbours are a guess: never fetched for (Holds).
    if (!job.sequential && !job.shard->Holds(f.size, f.position)) {
      counters_->files_skipped_cold.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // From the descriptor unless a check must see the bytes first: then the
    // bytes checked are the bytes stored.
    PushBytes bytes{nullptr, fd, f.position, f.size};
    FileRange at;  // A shard read in chunks: the file lying whole in a chunk file.
    // The job's first store goes from memory: it is the one likely to find
    // the inode unknown to the kernel (-ENOENT ends the job), and libfuse
    // prints an error for every failed store it spliced.
    const bool from_fd =
        options_.store_from_fd && pushed > 0 && !fs_->WouldVerify(f.inode, job.shard_id);
    if (fd < 0 || !from_fd) {
      st = ReadPlannedFile(f, job.shard, buf, from_fd ? &at : nullptr);
      if (!st.ok()) break;
      bytes = at.file ? PushBytes{nullptr, at.file->get(), at.pos, f.size}
                      : PushBytes{buf, -1, 0, f.size};
    }
    // Checked again right before the store: a READ may have reached the
    // file meanwhile, and its reader then holds the pages' locks.
    if (read_.Test(f.inode)) {
      counters_->files_skipped_read.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // A store may wait (for the kernel to learn the inode); by then the
    // reader may have passed the file, and the store would cache shard
    // pages that a drop behind has let go.
    auto still_wanted = [&] {
      return !read_.Test(f.inode) &&
             !(job.sequential && f.position < s.next_pos.load(std::memory_order_relaxed));
    };
    int rc = store_(f.inode, bytes, still_wanted);
    if (rc == -ECANCELED) {
      counters_->files_skipped_read.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (rc != 0) {
      counters_->store_errors.fetch_add(1, std::memory_order_relaxed);
      log::Debug("push: inode {}: {}", f.inode.value, std::strerror(-rc));
      break;
    }
    pushed_.Set(f.inode);
    job.shard->NoteDelivered(f.size, true);
    end = f.position + f.size;
    ++pushed;
    counters_->files_pushed.fetch_add(1, std::memory_order_relaxed);
    if (bytes.data == nullptr) counters_->files_pushed_fd.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_pushed.fetch_add(f.size, std::memory_order_relaxed);
  }
  if (budget_ && pushed > 0) budget_->NotePushed(pushed);
  if (!st.ok()) log::Debug("push-ahead after inode {}: {}", job.inode.value, st.message());
  log::Debug("push-ahead after inode {}: {} of {} files", job.inode.value, pushed, files.size());
  if (job.sequential) {
    if (pushed > 0) {
      if (fd >= 0) DropBehind(s, fd, end);
      s.pushed_end.store(end, std::memory_order_relaxed);
    }
    s.busy.store(false, std::memory_order_release);
  }
}

Status PushAhead::ReadPlannedFile(const PlannedFile& f, const ShardHandle& shard, char* buf,
                                  FileRange* at) {
  SHARDFS_RETURN_IF_ERROR(shard->ReadOrLocate(buf, f.size, f.position, at));
  if (at != nullptr && at->file) return Status::Ok();  // Only asked for when no check is due.
  return fs_->VerifyBytes(f.inode, shard->id(), buf, f.size, f.xxh3, f.has_checksum);
}

uint64_t PushAhead::RandomWindow() { return budget_ ? budget_->Window() : options_.random_bytes; }

PushStats PushAhead::stats() const {
  const Counters& c = *counters_;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {get(c.jobs_queued),        get(c.jobs_dropped_busy), get(c.jobs_dropped_full),
          get(c.jobs_dropped_stale), get(c.jobs_run),          get(c.files_pushed),
          get(c.files_pushed_fd),    get(c.bytes_pushed),      get(c.files_skipped_read),
          get(c.files_skipped_cold), get(c.store_errors),      get(c.files_wasted)};
}

void PushAhead::LogSummary() const {
  const PushStats ps = stats();
  if (ps.jobs_run == 0 && ps.jobs_queued == 0 && ps.jobs_dropped_busy == 0 &&
      ps.jobs_dropped_full == 0) {
    return;
  }
  log::Info(
      "push: {} jobs run, {} dropped (busy {}, full {}, stale {}), {} files ({} bytes) "
      "pushed, {} from the shard descriptor, {} skipped as read, {} skipped as not fetched yet, "
      "{} store errors, {} pushed files read again (their pages were gone)",
      ps.jobs_run, ps.jobs_dropped_busy + ps.jobs_dropped_full + ps.jobs_dropped_stale,
      ps.jobs_dropped_busy, ps.jobs_dropped_full, ps.jobs_dropped_stale, ps.files_pushed,
      ps.bytes_pushed, ps.files_pushed_fd, ps.files_skipped_read, ps.files_skipped_cold,
      ps.store_errors, ps.files_wasted);
}

}  // namespace shardfs::mount
