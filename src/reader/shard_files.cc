#include "src/reader/shard_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "base/io.h"
#include "base/log.h"
#include "base/strings.h"
#include "index/fingerprint.h"

namespace shardfs::reader {

OpenShard::~OpenShard() {
  if (fd_ >= 0) ::close(fd_);
}

Status OpenShard::CheckRange(size_t len, uint64_t pos) const {
  // A whole file's reads are judged where they land (pread, the fetcher).
  if (!slice_ || (pos <= length_ && len <= length_ - pos)) return Status::Ok();
  return Status::Corruption(
      fmt::format("shard {}: read of {} bytes at byte {} of a slice of {} bytes", id_.value, len,
                  pos, length_));
}

Status OpenShard::ReadAt(char* buf, size_t len, uint64_t pos) const {
  SHARDFS_RETURN_IF_ERROR(CheckRange(len, pos));
  if (chunked_ == nullptr) return PreadExact(fd_, buf, len, base_ + pos);
  return chunked_->ReadShard(std::const_pointer_cast<OpenShard>(shared_from_this()), base_ + pos,
                             len, buf);
}

Status OpenShard::ReadAtV(const struct iovec* iov, int count, size_t len, uint64_t pos) const {
  SHARDFS_RETURN_IF_ERROR(CheckRange(len, pos));
  ssize_t got;
  do {
    got = ::preadv(fd_, iov, count, static_cast<off_t>(base_ + pos));
  } while (got < 0 && errno == EINTR);
  if (got < 0) return Status::FromErrno(errno, fmt::format("read at byte {}", base_ + pos));
  // Short: the rest buffer by buffer (PreadExact says where the file ends).
  size_t skip = static_cast<size_t>(got);
  uint64_t at = base_ + pos;
  for (int i = 0; i < count; at += iov[i].iov_len, ++i) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    SHARDFS_RETURN_IF_ERROR(PreadExact(fd_, static_cast<char*>(iov[i].iov_base) + skip,
                                       iov[i].iov_len - skip, at + skip));
    skip = 0;
  }
  return Status::Ok();
}

Status OpenShard::ReadOrLocate(char* buf, size_t len, uint64_t pos, FileRange* at) const {
  SHARDFS_RETURN_IF_ERROR(CheckRange(len, pos));
  if (chunked_ == nullptr) return PreadExact(fd_, buf, len, base_ + pos);
  return chunked_->ReadShardOrLocate(std::const_pointer_cast<OpenShard>(shared_from_this()),
                                     base_ + pos, len, buf, at);
}

bool OpenShard::Holds(size_t len, uint64_t pos) const {
  if (chunked_ == nullptr) return true;
  if (!CheckRange(len, pos).ok()) return false;
  return chunked_->Holds(std::const_pointer_cast<OpenShard>(shared_from_this()), base_ + pos, len);
}

ShardFiles::ShardFiles(std::vector<Shard> shards, ShardFilesOptions options)
    : shards_(std::move(shards)),
      options_(options),
      slots_(std::make_unique<Slot[]>(shards_.size())) {
  if (options_.max_open == 0) options_.max_open = 1;
}

namespace {

// Out of descriptors or memory: says nothing about the shard.
bool Transient(int err) {
  return err == EMFILE || err == ENFILE || err == ENOMEM || err == EAGAIN || err == ENOBUFS ||
         err == EINTR;
}

// The handle of remote shard `id` once its file is checked: a slice's reads
// are of its range (the file, not the slice, was indexed with size and
// fingerprint, which `whole` checked).
ShardHandle RemoteHandle(const index::ShardMeta& meta, ShardHandle whole, ChunkedReader* chunked) {
  if (!meta.slice()) return whole;
  return std::make_shared<OpenShard>(whole->id(), -1, chunked, meta.base, meta.length);
}

}  // namespace

Result<ShardHandle> ShardFiles::OpenRemote(uint32_t id, bool recheck) {
  const Shard& s = shards_[id];
  if (options_.chunked == nullptr) {
    return Status::NotSupported(fmt::format(
        "shard {}: a remote shard, and this mount reads no remote shards", RedactLocation(s.path)));
  }
  // The chunk cache would answer the fingerprint's reads from what it holds:
  // only the server can say whether the shard is right again.
  if (recheck) SHARDFS_RETURN_IF_ERROR(options_.chunked->Recheck(index::ShardId{id}));
  auto handle = std::make_shared<OpenShard>(index::ShardId{id}, -1, options_.chunked);
  if (!s.meta.etag.empty())
    return RemoteHandle(s.meta, std::move(handle),
                        options_.chunked);  // Every request carries If-Match.
  // No ETag to hold the server to: the fingerprint, from the first and last
  // bytes (which the reader's chunks then hold).
  Result<uint64_t> fp = index::ShardFingerprint(
      s.meta.size,
      [&](char* buf, size_t len, uint64_t pos) { return handle->ReadAt(buf, len, pos); });
  if (!fp.ok()) return fp.status();
  SHARDFS_RETURN_IF_ERROR(index::CheckShardFingerprint(s.path, s.meta, *fp));
  return RemoteHandle(s.meta, std::move(handle), options_.chunked);
}

Result<ShardHandle> ShardFiles::Open(uint32_t id, bool recheck) {
  const Shard& s = shards_[id];
  if (s.meta.remote()) return OpenRemote(id, recheck);
  // Opened as base/open_file.h does (a FIFO or a device is never opened)
  // and checked on that descriptor: size and fingerprint. A slice's file is
  // checked whole; its reads are of its range.
  FileStamp stamp;
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd fd, index::OpenCheckedShard(s.path, s.meta, {}, &stamp));
  ChunkedReader* const chunked = options_.chunk_local ? options_.chunked : nullptr;
  const int raw = fd.release();
  auto handle = s.meta.slice()
                    ? std::make_shared<OpenShard>(index::ShardId{id}, raw, chunked, s.meta.base,
                                                  s.meta.length, stamp)
                    : std::make_shared<OpenShard>(index::ShardId{id}, raw, chunked, stamp);
  return handle;
}

Result<ShardHandle> ShardFiles::Get(index::ShardId id) {
  if (id.value >= shards_.size()) {
    return Status::Corruption(fmt::format("shard id {} out of range", id.value));
  }
  Slot& slot = slots_[id.value];
  bool recheck;
  bool opener = false;  // This Get set slot.opening.
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (slot.opening) {
      // Another Get is opening it: its handle, or its error, within a bound.
      opened_.wait_for(lock, kOpenWait, [&] { return !slot.opening; });
    }
    if (slot.handle) {
      lru_.splice(lru_.begin(), lru_, slot.lru_pos);
      return slot.handle;
    }
    if (!slot.bad.ok() && Clock::now() < slot.recheck_at) return slot.bad;
    recheck = !slot.bad.ok();
    if (!slot.opening) opener = slot.opening = true;
  }
  // Open and check outside the lock: it reads 128 KiB. A Get that waited
  // kOpenWait for another's open races it; the second keeps the first's
  // handle.
  // Ends this Get's opening on every way out, after the handle (or the
  // shard's bad status) is in place for the Gets that waited.
  struct OpeningDone {
    ShardFiles* files;
    Slot* slot;
    ~OpeningDone() {
      if (!slot) return;
      {
        std::lock_guard<std::mutex> lock(files->mu_);
        slot->opening = false;
      }
      files->opened_.notify_all();
    }
  } done{this, opener ? &slot : nullptr};
  Result<ShardHandle> opened = Open(id.value, recheck);
  if (!opened.ok()) {
    const Status& s = opened.status();
    // A remote shard that cannot be fetched now (the server is down, the
    // retry budget ran out) is not bad: it serves again once reachable.
    const bool unreachable = shards_[id.value].meta.remote() && s.code() == Status::Code::kIoError;
    if (Transient(s.sys_errno()) || unreachable) {
      bool first;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = !std::exchange(slot.logged_transient, true);
      }
      if (first)
        LogFailure(id, s, log::Level::kWarning, "that read fails with EIO, the next tries again");
      return s;
    }
    MarkBad(id, s);
    return s;
  }
  bool healed = false;
  std::lock_guard<std::mutex> lock(mu_);
  if (slot.handle) return slot.handle;
  if (!slot.bad.ok()) {
    healed = true;
    slot.bad = Status::Ok();
    slot.backoff = std::chrono::milliseconds{0};
    slot.logged = false;
  }
  slot.logged_transient = false;
  slot.handle = *opened;
  lru_.push_front(id.value);
  slot.lru_pos = lru_.begin();
  while (lru_.size() > options_.max_open) {
    uint32_t victim = lru_.back();
    lru_.pop_back();
    slots_[victim].handle.reset();  // Closes once the last reader lets go.
  }
  if (healed) {
    log::Info("shard {}: checked again and serving", RedactLocation(shards_[id.value].path));
  }
  return slot.handle;
}

void ShardFiles::MarkBad(index::ShardId id, const Status& reason) {
  Slot& slot = slots_[id.value];
  bool log_it;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot.bad = reason;
    slot.backoff =
        slot.backoff.count() == 0 ? kFirstRecheck : std::min(slot.backoff * 2, kMaxRecheck);
    slot.recheck_at = Clock::now() + slot.backoff;
    if (slot.handle) {
      lru_.erase(slot.lru_pos);
      slot.handle.reset();
    }
    log_it = !std::exchange(slot.logged, true);
  }
  if (log_it) LogFailure(id, reason, log::Level::kError, "reads of its files fail with EIO");
}

void ShardFiles::LogFailure(index::ShardId id, const Status& why, log::Level level,
                            std::string_view then) const {
  if (!log::Enabled(level)) return;
  const std::string shard = RedactLocation(shards_[id.value].path);
  log::Write(level, fmt::format("{}; {}", why.message(), then),
             {.shard = shard, .path = {}, .reason = why.message()});
}

void ShardFiles::ReadFailed(index::ShardId id, const Status& reason) {
  if (id.value >= shards_.size()) return;
  if (shards_[id.value].meta.remote() && reason.code() == Status::Code::kIoError) return;
  MarkBad(id, reason);
}

std::vector<Status> ShardFiles::CheckAll() {
  std::vector<Status> problems;
  for (uint32_t i = 0; i < shards_.size(); ++i) {
    Result<ShardHandle> h = Get(index::ShardId{i});
    if (!h.ok()) problems.push_back(h.status());
  }
  return problems;
}

size_t ShardFiles::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace shardfs::reader
