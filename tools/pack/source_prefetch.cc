#include "tools/pack/source_prefetch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/fd.h"

namespace shardfs::pack {
namespace {

// What a big file counts against PrefetchLimits::bytes: the chunk the writer
// streams it by.
constexpr uint64_t kBigFileCost = 1 << 20;

// Reads up to `len` bytes from offset 0, stopping early at the end of the
// file: a file that shrank since the scan is told apart from one whose
// read fails. Sets *got to the bytes read.
Status PreadUpToEof(int fd, char* buf, uint64_t len, uint64_t* got) {
  *got = 0;
  while (*got < len) {
    ssize_t n = ::pread(fd, buf + *got, len - *got, static_cast<off_t>(*got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, fmt::format("read at byte {}", *got));
    }
    if (n == 0) break;
    *got += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

SourceReading ChooseSourceReading(int jobs, unsigned cores, const StorageInfo* storage) {
  SourceReading r;
  const bool network = storage && storage->network;
  r.direct = network && storage->fstype.starts_with("fuse");
  r.jobs = std::max(4, 2 * static_cast<int>(cores));
  if (network) r.jobs = std::max(r.jobs, kNetworkJobs);
  if (jobs > 0) r.jobs = jobs;
  return r;
}

SourcePrefetch::SourcePrefetch(const std::vector<SourceEntry>& entries, std::vector<uint32_t> order,
                               int root_fd, PrefetchLimits limits)
    : entries_(entries),
      order_(std::move(order)),
      root_fd_(root_fd),
      limits_(limits),
      ring_(std::max<size_t>(limits.files, 1)) {}

SourcePrefetch::SourcePrefetch(const std::vector<SourceEntry>& entries, std::vector<uint32_t> order,
                               const StoredShards* shards, PrefetchLimits limits)
    : entries_(entries),
      order_(std::move(order)),
      root_fd_(-1),
      shards_(shards),
      limits_(limits),
      ring_(std::max<size_t>(limits.files, 1)) {}

SourcePrefetch::~SourcePrefetch() {
  Stop();
  for (Slot& s : ring_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

void SourcePrefetch::Start(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Reader(); });
}

void SourcePrefetch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  readers_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

SourcePrefetch::Slot& SourcePrefetch::Wait(size_t k) {
  Slot& s = ring_[k % ring_.size()];
  if (s.ready.load(std::memory_order_acquire)) return s;
  std::unique_lock<std::mutex> lock(mu_);
  // Release may have let sleeping readers be; one must claim k now.
  if (readers_waiting_.load() > 0) readers_cv_.notify_all();
  writer_waits_for_.store(k);
  writer_cv_.wait(lock, [&] { return s.ready.load(); });
  writer_waits_for_.store(kNobody);
  return s;
}

void SourcePrefetch::Release(size_t k) {
  Slot& s = ring_[k % ring_.size()];
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
  s.data.reset();
  s.reason.clear();
  s.ready.store(false, std::memory_order_relaxed);
  bytes_ahead_.fetch_sub(s.cost);
  if (s.big) big_ahead_.fetch_sub(1);
  write_k_.store(k + 1);
  // Waking readers for every file costs more than it gains: every kBatch
  // files, or when the writer has to wait (see Wait).
  if ((k + 1) % kBatch == 0 && readers_waiting_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    readers_cv_.notify_all();
  }
}

size_t SourcePrefetch::claimed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_;
}

uint64_t SourcePrefetch::Cost(size_t k) const {
  uint64_t size = entries_[order_[k]].size;
  return size <= kWholeFileMax ? size : kBigFileCost;
}

bool SourcePrefetch::CanClaim(size_t k) const {
  size_t w = write_k_.load();
  if (k == w) return true;  // The writer needs it: always allowed.
  if (k >= w + ring_.size()) return false;
  bool big = entries_[order_[k]].size > kWholeFileMax;
  return bytes_ahead_.load() + Cost(k) <= limits_.bytes &&
         (!big || big_ahead_.load() < limits_.big_files);
}

void SourcePrefetch::Reader() {
  std::vector<size_t> batch;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto can_go = [&] { return stop_ || next_ >= order_.size() || CanClaim(next_); };
      if (!can_go()) {
        readers_waiting_.fetch_add(1);
        readers_cv_.wait(lock, can_go);
        readers_waiting_.fetch_sub(1);
      }
      if (stop_ || next_ >= order_.size()) return;
      uint64_t bytes = 0;
      while (next_ < order_.size() && batch.size() < kBatch && bytes < kBatchBytes &&
             CanClaim(next_)) {
        size_t k = next_++;
        Slot& s = ring_[k % ring_.size()];
        s.cost = Cost(k);
        s.big = entries_[order_[k]].size > kWholeFileMax;
        bytes_ahead_.fetch_add(s.cost);
        if (s.big) big_ahead_.fetch_add(1);
        bytes += s.cost;
        batch.push_back(k);
      }
    }
    for (size_t k : batch) {
      Slot& s = ring_[k % ring_.size()];
      Load(entries_[order_[k]], &s);
      s.ready.store(true);
      if (writer_waits_for_.load() == k) {
        std::lock_guard<std::mutex> lock(mu_);
        writer_cv_.notify_one();
      }
    }
  }
}

void SourcePrefetch::LoadStored(const SourceEntry& e, Slot* s) const {
  const StoredData& d = *e.stored;
  const int shard_fd = d.shard < shards_->fds.size() ? shards_->fds[d.shard] : -1;
  if (shard_fd < 0) {
    s->result = ReadResult::kUnreadable;
    s->reason = fmt::format("{}: not open", StoredShardName(*shards_, d.shard));
    return;
  }
  if (check_only_.load(std::memory_order_relaxed)) return;
  if (e.size > kWholeFileMax) {
    s->fd = ::fcntl(shard_fd, F_DUPFD_CLOEXEC, 0);
    if (s->fd < 0) {
      s->result = ReadResult::kUnreadable;
      s->reason = fmt::format("dup: {}", std::strerror(errno));
    }
    s->sparse = d.sparse;
    return;
  }
  s->data.reset(new char[std::max<uint64_t>(e.size, 1)]);
  if (Status r = ReadStoredAt(*shards_, e, 0, s->data.get(), e.size); !r.ok()) {
    s->result = ReadResult::kChanged;
    s->reason = r.message();
    return;
  }
  s->xxh3 = XXH3_64bits(s->data.get(), e.size);
  if (!d.has_xxh3) return;
  // The index hashed a sparse file's stored bytes only.
  uint64_t stored = s->xxh3;
  if (d.sparse) {
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    for (const index::Extent& r : d.ranges) {
      XXH3_64bits_update(h, s->data.get() + r.logical, r.length);
    }
    stored = XXH3_64bits_digest(h);
    XXH3_freeState(h);
  }
  if (stored != d.xxh3) {
    s->result = ReadResult::kChanged;
    s->reason = StoredChangedReason(
        *shards_, d,
        fmt::format("its bytes have xxh3 {:016x}, the index says {:016x}", stored, d.xxh3));
  }
}

void SourcePrefetch::Load(const SourceEntry& e, Slot* s) const {
  s->result = ReadResult::kOk;
  if (e.stored) return LoadStored(e, s);
  auto fail = [&](ReadResult r, std::string reason) {
    s->result = r;
    s->reason = std::move(reason);
  };
  const bool big = e.size > kWholeFileMax;
  const bool direct = !big && direct_.load(std::memory_order_relaxed);
  UniqueFd fd(OpenBeneath(root_fd_, e.open_path(), O_RDONLY | (direct ? O_DIRECT : 0)));
  if (!fd.valid() && direct && errno == EINVAL) {
    direct_.store(false);
    fd.reset(OpenBeneath(root_fd_, e.open_path(), O_RDONLY));
  }
  if (!fd.valid()) {
    return fail(ReadResult::kUnreadable, fmt::format("open: {}", std::strerror(errno)));
  }
  if (check_only_.load(std::memory_order_relaxed)) return;
  struct stat st;
  if (big) {
    // Checked now and again by the writer once it has streamed the file.
    if (StatOpenFile(fd.get(), &st) != 0) {
      return fail(ReadResult::kUnreadable, fmt::format("stat: {}", std::strerror(errno)));
    }
    if (ReplacedSince(e, st, fd.get(), &fuse_devices_)) {
      return fail(ReadResult::kChanged, "replaced by another file while being packed");
    }
    if (static_cast<uint64_t>(st.st_size) != e.size || MtimeNs(st) != e.mtime_ns) {
      return fail(ReadResult::kChanged, ChangedReason(e, st));
    }
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    s->sparse = static_cast<uint64_t>(st.st_blocks) * 512 < e.size;
    s->fd = fd.release();
    return;
  }
  s->data.reset(new char[std::max<uint64_t>(e.size, 1)]);
  uint64_t got = 0;
  Status r = PreadUpToEof(fd.get(), s->data.get(), e.size, &got);
  if (!r.ok() && direct && r.sys_errno() == EINVAL) {
    // O_DIRECT refused at the read (a filesystem that wants aligned
    // buffers): plain reads from here on.
    direct_.store(false);
    if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_DIRECT) == 0) {
      r = PreadUpToEof(fd.get(), s->data.get(), e.size, &got);
    }
  }
  if (!r.ok()) return fail(ReadResult::kUnreadable, r.message());
  // One stat after the read tells whether this is the file the scan saw
  // and whether it changed since: a write moves the mtime.
  if (StatOpenFile(fd.get(), &st) != 0) {
    return fail(ReadResult::kUnreadable, fmt::format("stat: {}", std::strerror(errno)));
  }
  if (ReplacedSince(e, st, fd.get(), &fuse_devices_)) {
    return fail(ReadResult::kChanged, "replaced by another file while being packed");
  }
  if (got != e.size || static_cast<uint64_t>(st.st_size) != e.size || MtimeNs(st) != e.mtime_ns) {
    return fail(ReadResult::kChanged, ChangedReason(e, st));
  }
  s->xxh3 = XXH3_64bits(s->data.get(), e.size);
}

}  // namespace shardfs::pack
