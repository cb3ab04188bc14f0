// Open shard files for the read path: opened lazily, checked against the
// index before first use, kept in a bounded LRU.
//
// A shard is checked (a regular file, its size, then the fingerprint of
// index/fingerprint.h) each time it is opened; opening never blocks (a FIFO
// where a shard should be is refused, not waited on). Bytes are never served
// from a shard that failed its check. Failures are of two kinds:
//  - transient: the process or the system is out of descriptors or memory
//    (EMFILE, ENFILE, ENOMEM, ...). That read fails with EIO, the shard is
//    not marked, and the next read tries again.
//  - bad: the shard is missing, unreadable, or differs from what was
//    indexed (or a read of it came up short). Reads of its files fail with
//    EIO, the reason is logged once, and the shard is checked again on a read
//    after a back-off (kFirstRecheck, doubling up to kMaxRecheck): a shard
//    put back as it was indexed serves again without a remount.
//
// Remote shards (a URL in the index) have no descriptor: their bytes come
// through a ChunkedReader (src/reader/chunked_reader.h; ShardFetcher in
// src/reader/shard_fetcher.h implements it), which fetches aligned chunks into a
// local cache. With ShardFilesOptions::chunk_local, local shards are read
// through it too (a cache in front of NFS or Lustre). A remote shard is
// checked on every response (its size and ETag, else its Last-Modified); one
// indexed without an ETag is checked by its fingerprint when opened too. A
// remote shard marked bad is asked for again after its back-off
// (ChunkedReader::Recheck, a HEAD judged like every response), and serves
// again only if that answer matches the index.
//
// Thread safety: all methods may be called from any thread. The LRU and the
// fd table are guarded by mu_; a ShardHandle keeps its fd open while held,
// even if the LRU evicts it meanwhile, so a read never uses a closed or
// reused descriptor.
#ifndef SHARDFS_SRC_READER_SHARD_FILES_H_
#define SHARDFS_SRC_READER_SHARD_FILES_H_

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "base/open_file.h"
#include "base/status.h"
#include "index/schema.h"
#include "src/reader/chunked_reader.h"

namespace shardfs::reader {

// An open shard: a local file (closed when the last holder lets go), read
// with pread or, with a ChunkedReader, through it; or a remote shard, read
// through the ChunkedReader only. Held as a ShardHandle
// (src/reader/chunked_reader.h).
//
// A slice shard (index/schema.h, "Slice shards") is its file's bytes
// [base, base + length): ReadAt and ReadOrLocate take positions in the
// slice, add base, and refuse a range past length (Corruption). The
// ChunkedReader is asked for file positions, under the slice's own shard id
// (whose FetchShard names the same file), so its chunks never alias another
// shard's.
class OpenShard : public std::enable_shared_from_this<OpenShard> {
 public:
  // fd < 0: a remote shard. REQUIRES: chunked != nullptr then.
  OpenShard(index::ShardId id, int fd, ChunkedReader* chunked = nullptr)
      : id_(id), fd_(fd), chunked_(chunked) {}
  // A slice: bytes [base, base + length) of the file.
  OpenShard(index::ShardId id, int fd, ChunkedReader* chunked, uint64_t base, uint64_t length)
      : id_(id), fd_(fd), chunked_(chunked), slice_(true), base_(base), length_(length) {}
  // A local shard checked when its stamp was `stamp` (OpenCheckedShard).
  OpenShard(index::ShardId id, int fd, ChunkedReader* chunked, const FileStamp& stamp)
      : id_(id), fd_(fd), chunked_(chunked), stamped_(true), stamp_(stamp) {}
  OpenShard(index::ShardId id, int fd, ChunkedReader* chunked, uint64_t base, uint64_t length,
            const FileStamp& stamp)
      : id_(id),
        fd_(fd),
        chunked_(chunked),
        slice_(true),
        base_(base),
        length_(length),
        stamped_(true),
        stamp_(stamp) {}
  ~OpenShard();
  OpenShard(const OpenShard&) = delete;
  OpenShard& operator=(const OpenShard&) = delete;
  index::ShardId id() const { return id_; }
  // The local file's descriptor; -1 for a remote shard.
  int fd() const { return fd_; }
  // Where position 0 of the shard lies in fd()'s file (a slice's base; 0
  // otherwise): a READ spliced from fd() adds it.
  uint64_t base() const { return base_; }
  // Reads are pread on fd() (so a READ can be spliced from it).
  bool direct() const { return chunked_ == nullptr; }
  // Reads bytes [pos, pos + len) into buf; IoError if it comes up short.
  Status ReadAt(char* buf, size_t len, uint64_t pos) const;
  // ReadAt into the buffers of `iov` in turn (their lengths add up to
  // `len`): one preadv. REQUIRES: direct().
  Status ReadAtV(const struct iovec* iov, int count, size_t len, uint64_t pos) const;
  // ReadAt, or for a shard read in chunks, where the bytes lie whole in a
  // checked chunk file on disk: *at (see ChunkedReader::ReadShardOrLocate).
  Status ReadOrLocate(char* buf, size_t len, uint64_t pos, FileRange* at) const;
  // Whether ReadAt(len, pos) would be served without a fetch from the
  // shard's storage: always for a direct shard, else ChunkedReader::Holds.
  bool Holds(size_t len, uint64_t pos) const;
  // Compares the local file with the stamp taken when it was checked
  // (base/open_file.h: one fstat on the descriptor read): Ok if nothing
  // moved, Corruption saying what changed if it was written or truncated
  // (the caller names the shard), and Ok with *ctime_ns set if only its
  // ctime moved: then the caller checks the shard again on this descriptor
  // and, if it passes, accepts that ctime (AcceptCtime). Ok for a remote
  // shard (every request is held to the ETag) and one opened without a
  // stamp.
  Status CheckUnchanged(int64_t* ctime_ns) const {
    *ctime_ns = 0;
    if (!stamped_ || fd_ < 0) return Status::Ok();
    FileStamp was = stamp_;
    was.ctime_ns = ctime_ns_.load(std::memory_order_acquire);
    return CheckStamp(fd_, was, ctime_ns);
  }
  // The shard passed its check again with ctime `ctime_ns`.
  void AcceptCtime(int64_t ctime_ns) const { ctime_ns_.store(ctime_ns, std::memory_order_release); }
  // See ChunkedReader::NoteDelivered; nothing for a direct shard.
  void NoteDelivered(uint64_t bytes, bool pushed) const {
    if (chunked_ != nullptr) chunked_->NoteDelivered(id_, bytes, pushed);
  }

 private:
  // A slice: Corruption unless [pos, pos + len) lies within it.
  Status CheckRange(size_t len, uint64_t pos) const;

  const index::ShardId id_;
  const int fd_;
  ChunkedReader* const chunked_;
  const bool slice_ = false;
  const uint64_t base_ = 0;
  const uint64_t length_ = 0;
  const bool stamped_ = false;
  const FileStamp stamp_;  // Its ctime_ns is ctime_ns_'s first value.
  // The ctime the shard last passed its check with.
  mutable std::atomic<int64_t> ctime_ns_{stamp_.ctime_ns};
};

struct ShardFilesOptions {
  size_t max_open = 128;  // Open shard files at most (plus those held).
  // Reads remote shards (and local ones with chunk_local). Not owned; must
  // outlive the ShardFiles. Null: a remote shard fails to open.
  ChunkedReader* chunked = nullptr;
  bool chunk_local = false;
};

class ShardFiles {
 public:
  struct Shard {
    std::string path;  // Where to open it.
    index::ShardMeta meta;
  };
  ShardFiles(std::vector<Shard> shards, ShardFilesOptions options);

  static constexpr std::chrono::milliseconds kFirstRecheck{1000};
  static constexpr std::chrono::milliseconds kMaxRecheck{60000};
  // A Get of a shard that another Get is opening waits at most this long for
  // it (on network storage each open and check is a few round trips, and one
  // open per shard is what the storage should see), then opens it itself.
  static constexpr std::chrono::milliseconds kOpenWait{2000};

  // Returns the open, checked shard `id`, opening it if needed.
  // Returns IoError if the shard is missing or unreadable (or, transiently,
  // cannot be opened now), Corruption if it differs from what was indexed.
  Result<ShardHandle> Get(index::ShardId id);

  // Marks shard `id` bad with `reason` (e.g. a short read while mounted),
  // logging once. Gets fail until a recheck after the back-off succeeds.
  void MarkBad(index::ShardId id, const Status& reason);
  // A read of shard `id` failed with `reason`: marks it bad, except when a
  // remote shard is only unreachable for now (IoError), which the next read
  // tries again.
  void ReadFailed(index::ShardId id, const Status& reason);

  // Opens and checks every shard now. Returns the problems, one per shard.
  std::vector<Status> CheckAll();

  size_t open_count() const;
  size_t shard_count() const { return shards_.size(); }

 private:
  // Logs "<why>; <then>" at `level`, with the shard and the reason apart.
  void LogFailure(index::ShardId id, const Status& why, log::Level level,
                  std::string_view then) const;
  using Clock = std::chrono::steady_clock;
  struct Slot {
    ShardHandle handle;                     // Guarded by mu_.
    std::list<uint32_t>::iterator lru_pos;  // Guarded by mu_; valid if handle.
    Status bad;                             // Guarded by mu_.
    Clock::time_point recheck_at;           // Guarded by mu_; when bad.
    std::chrono::milliseconds backoff{0};   // Guarded by mu_.
    bool logged = false;                    // Guarded by mu_; bad was logged.
    bool logged_transient = false;          // Guarded by mu_.
    bool opening = false;                   // Guarded by mu_; a Get is opening it.
  };
  // `recheck`: the shard was marked bad; a remote one is asked again.
  Result<ShardHandle> Open(uint32_t id, bool recheck);
  Result<ShardHandle> OpenRemote(uint32_t id, bool recheck);

  const std::vector<Shard> shards_;
  ShardFilesOptions options_;
  mutable std::mutex mu_;
  std::condition_variable opened_;  // A slot's opening ended.
  std::unique_ptr<Slot[]> slots_;
  std::list<uint32_t> lru_;  // Guarded by mu_; most recent first.
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_SHARD_FILES_H_
