// The filesystem an index describes, as plain C++ on InodeIds: lookup,
// getattr, readdir, readlink, read. No FUSE types here, so unit tests call it
// directly; the mount's FUSE adapter translates FUSE requests into these
// calls.
//
// Metadata comes from the index alone; no shard is opened for lookup,
// getattr, readdir or readlink. A read walks down once: Read looks the inode
// up, opens and checks its shard, and decides, from the record alone, how
// the bytes are had: a range of the shard (pread, or handed back to splice),
// a sparse file's extents, an encoded member's decoded bytes
// (src/reader/encoded_reader.h) or a compressed tar's decoded stream
// (src/reader/stream_reader.h). The frontend only sends what Read gave.
//
// Thread safety: after construction every method may be called from any
// number of threads. The index reader is immutable, ShardFiles guards
// itself, the verified-inode bitmap is atomic words.
//
// What the mount does ahead of a reader (shard readahead, drop-behind,
// pushes into the kernel's page cache) is reader/push_ahead.h.
#ifndef SHARDFS_SRC_READER_FILESYSTEM_H_
#define SHARDFS_SRC_READER_FILESYSTEM_H_

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "src/reader/decoded_cache.h"
#include "src/reader/kernel_requests.h"
#include "src/reader/shard_files.h"
#include "src/reader/stream_reader.h"

namespace shardfs::reader {

using index::EntryRecord;
using index::InodeId;

// What is checked before bytes are served. In every mode a local shard is
// checked when opened (a regular file, its size, its fingerprint) and its
// stamp (inode, size, mtime, ctime: base/open_file.h) is compared on the
// descriptor read before every read: a shard whose size or mtime changed
// since its check serves nothing (EIO) until checked again; one whose ctime
// alone moved (a chmod, a link or unlink, or a write with the mtime set
// back) has its fingerprint checked again on that descriptor, and its files
// are verified again (kFirst) before they serve.
enum class VerifyMode {
  kOff,     // Those shard checks alone.
  kFirst,   // And a file's XXH3 against the index on its first read (again
            // after its shard's ctime moved).
  kAlways,  // And the whole file's XXH3 on every read (for small files).
};

struct FilesystemOptions {
  VerifyMode verify = VerifyMode::kOff;
  size_t max_open_shards = 128;
  // Ownership and permission overrides for every entry (-o uid=,gid=,umask=).
  int64_t uid = -1;
  int64_t gid = -1;
  int64_t umask = -1;
  // Reads remote shards, and local ones too with chunk_local (a cache_dir
  // in front of them); see reader/chunked_reader.h. Not owned.
  ChunkedReader* chunked = nullptr;
  bool chunk_local = false;
  // Decoded bytes of encoded data (inflated zip members, intervals of a
  // compressed tar): reader/decoded_cache.h. Not owned; set by a mount.
  DecodedCache* decoded = nullptr;
};

// What the mount's push-ahead needs of a READ, and nothing else:
// where in which shard the bytes lay, and what the read was for the file.
// Filled by Filesystem::Read; push-ahead reads no other field of a read.
struct PushHint {
  // Push-ahead may act on this read at all: false for an empty read and for
  // decoded bytes (a zip member, a compressed tar's file), which are no
  // range of the shard.
  bool active = false;
  ShardHandle shard;  // Keeps the shard open for the pushes after the read.
  index::ShardId shard_id;
  uint64_t position = 0;    // Byte offset in the shard of the first byte read.
  size_t length = 0;        // Bytes read.
  bool ends_file = false;   // The read ends where the file ends.
  bool whole_file = false;  // The read is the whole file.
};

// The answer to Filesystem::Read: `length` bytes, either in the caller's
// buffer (fd < 0) or, for a splice, bytes [pos, pos + length) of descriptor
// `fd`: a local shard's, or a checked chunk file's of the chunk cache.
// `keep` keeps that descriptor open while the reply is held, even if the
// shard or the chunk is evicted meanwhile.
struct ReadReply {
  size_t length = 0;  // 0 at or past the end of the file.
  int fd = -1;
  uint64_t pos = 0;
  std::shared_ptr<const void> keep;
  PushHint push;
  bool spliced() const { return fd >= 0; }
};

// One bit per inode up to a maximum, set and tested from any thread.
class InodeBits {
 public:
  InodeBits() = default;
  explicit InodeBits(uint64_t max_inode);
  bool Test(InodeId inode) const;
  void Set(InodeId inode);    // Beyond the maximum: ignored.
  void Clear(InodeId inode);  // Writes nothing when the bit is clear.

 private:
  struct Free {
    void operator()(uint64_t* p) const { std::free(p); }
  };
  // From calloc, accessed through std::atomic_ref: a large set comes as
  // untouched zero pages, so a mount of 10M entries does not write (and
  // fault in) megabytes per set before it serves.
  std::unique_ptr<uint64_t[], Free> words_;
  size_t size_ = 0;  // Words.
};

class Filesystem;

// An open directory read by offsets, as readdir does: 0 is ".", 1 is "..",
// 2 + i is the i-th child in name order. The children are streamed from the
// index: a cursor holds only where the last call ended (the name to resume
// after), so an open directory costs the same whatever its size. Reading on
// from there is one seek into the index; any other offset (seekdir) is
// reached by counting from the first child.
//
// Thread safety: one cursor must not be used by two threads at once.
class DirCursor {
 public:
  // Called for each entry: `next_off` is the offset of the entry after it
  // (what telldir gives after it). "." and ".." have rec.inode set and
  // rec.mode = S_IFDIR only. Returns false if it did not take the entry.
  using EntryFn =
      std::function<bool(uint64_t next_off, std::string_view name, const EntryRecord& rec)>;

  // Opens directory `dir`. NotFound if there is none, NotADirectory if it
  // is not a directory.
  static Result<DirCursor> Open(const Filesystem& fs, InodeId dir);

  // Calls `fn` for each entry from offset `off` on, until `fn` returns
  // false or the directory ends.
  Status Read(const Filesystem& fs, uint64_t off, const EntryFn& fn);

  InodeId inode() const { return self_.inode; }
  InodeId parent() const { return self_.parent; }

 private:
  EntryRecord self_;          // self_.target is cleared.
  uint64_t next_off_ = 0;     // Where the last Read stopped.
  std::string resume_after_;  // The child before next_off_, if next_off_ > 2.
  std::string scratch_;
};

class Filesystem {
 public:
  Filesystem(std::unique_ptr<index::IndexReader> reader, FilesystemOptions options);

  // The child `name` of `parent`. NotFound if none, also when `parent` is
  // not a directory (it has no children).
  Status Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                index::RecordHolder* holder) const;
  Status GetAttr(InodeId inode, EntryRecord* rec, index::RecordHolder* holder) const;
  // Fills `st` from a record, applying the ownership overrides.
  void ToStat(const EntryRecord& rec, struct stat* st) const;
  // Calls fn(name, record) for each child in name order after `start_after`.
  Status ReadDir(InodeId dir, std::string_view start_after,
                 const std::function<bool(std::string_view, const EntryRecord&)>& fn) const;
  // The target of a symlink; InvalidArgument if `inode` is not one.
  Status ReadLink(InodeId inode, std::string_view* target, index::RecordHolder* holder) const;

  // Reads `size` bytes at `offset` of file `inode`, clamped to the file's
  // size: one index lookup, one ShardFiles lookup, then one read decided
  // here. With `may_splice`, a range that lies whole in a local shard read
  // with pread, or in a checked chunk file on disk, is not read: the reply
  // names the descriptor to splice from (ReadReply::fd). Every other read
  // (decoded bytes, a sparse file across holes, a shard read in chunks and
  // not on disk whole, or any read without `may_splice`) lands in `buf`,
  // which must hold `size` bytes; a sparse file's holes read as zeros.
  // With verify=first|always the file's content is checked before any byte
  // is served. Returns IoError or Corruption (EIO) if the shard is bad or
  // changed since its check, or a read comes up short (the shard is then
  // marked bad: no file of it serves until it is checked again), or if the
  // file's content does not match its checksum (that file only: the other
  // files of an unchanged shard go on serving, each checked by its own
  // checksum); IsADirectory for a directory, InvalidArgument for a symlink.
  // A splice that then comes up short is the caller's to notice: it reads
  // again without `may_splice`, which reports the error or has the bytes.
  Result<ReadReply> Read(InodeId inode, uint64_t offset, size_t size, char* buf, bool may_splice);
  // The same for the record of a file already looked up (Lookup or GetAttr
  // of this filesystem), without reading it again: what a path walk that
  // ends at the file hands down. The record's range is checked against the
  // shard table (IndexReader::CheckFileRange) first.
  Result<ReadReply> Read(const EntryRecord& looked_up, uint64_t offset, size_t size, char* buf,
                         bool may_splice);
  // Reads whole files `recs` (a sample's members) into bufs[i] (recs[i].size
  // bytes each) as Read would, with one stamp check and one preadv, if they
  // lie one after another (in any order in `recs`) in one shard read by
  // pread, stored as is, at most kMaxAdjacentGap bytes apart (a tar's
  // headers), none due a checksum. Else false, nothing read: the caller
  // reads them one by one. Read's errors (the shard's).
  Result<bool> ReadAdjacent(std::span<const EntryRecord> recs, char* const* bufs);
  static constexpr size_t kMaxAdjacent = 16, kMaxAdjacentGap = 8192;
  // Read into `buf` always (no splice); *n is the number of bytes read.
  Status Read(InodeId inode, uint64_t offset, size_t size, char* buf, size_t* n);

  // Checks `data`, the whole content of file `inode` of shard `shard`
  // (`size` bytes), against the file's indexed XXH3 `xxh3` when verify is
  // first (once) or always. Returns Corruption on a mismatch (nothing is
  // marked: a read of the file will report it), NotSupported if the index
  // has no checksum for it.
  Status VerifyBytes(InodeId inode, index::ShardId shard, const char* data, size_t size,
                     uint64_t xxh3, bool has_checksum);
  // Whether bytes of `inode` (of shard `shard`) must be checked before they
  // are served now: verify=always, or verify=first and the file not checked
  // since its shard was last checked.
  bool WouldVerify(InodeId inode, index::ShardId shard) const;
  // Says that `rec`'s bytes will be read soon, so that a batch's reads
  // from a local disk are in flight together instead of one after another:
  // posix_fadvise(WILLNEED) over the file's range, for a file stored as is
  // in a shard read by pread (a plain tar member, a zip member stored).
  // Nothing for the others (compressed, sparse, read in chunks: their reads
  // have their own readahead) nor on an error (the read reports it).
  void WillNeed(const EntryRecord& rec);

  void StatFs(struct statvfs* st) const;
  const index::IndexReader& reader() const { return *reader_; }
  ShardFiles& shard_files() { return shards_; }
  const FilesystemOptions& options() const { return options_; }
  StreamStats stream_stats() const { return streams_.stats(); }
  // What the kernel asked for, counted by the FUSE adapter.
  KernelRequests& kernel_requests() const { return kernel_requests_; }

 private:
  // A read resolved to bytes of an open, checked shard (filesystem.cc).
  struct ReadRange;

  // Read of a checked record: resolves it (Resolve), then reads it the one
  // way its kind is read.
  Result<ReadReply> ReadFile(const EntryRecord& rec, uint64_t offset, size_t size, char* buf,
                             bool may_splice);
  // Resolves a read of `rec`: the shard, opened and checked (size; with
  // verify, content), and where the bytes are.
  Status Resolve(const EntryRecord& rec, uint64_t offset, size_t size, ReadRange* range);
  // Resolve for a sparse file: the range inside one extent, or a gather.
  static void ResolveSparse(const EntryRecord& rec, uint64_t offset, ReadRange* range);
  // Reads a gather range into `buf`: a pread per extent, zeros for the holes.
  static Status Gather(const ReadRange& range, char* buf);

  Status VerifyFile(const EntryRecord& rec, const ShardHandle& shard);
  // VerifyFile for a file of a compressed tar shard.
  Status VerifyStreamFile(const EntryRecord& rec, const ShardHandle& shard);
  // Corruption for file `rec` whose bytes hashed to `got`: names the file's
  // path and its shard, and logs that once per file.
  Status ContentMismatch(const EntryRecord& rec, uint64_t got);
  // What messages call shard `id`: its path, a URL redacted.
  std::string ShardName(index::ShardId id) const;

  // Verified files (verify=first). A shard's files are trusted as verified
  // by their bit in verified_ until the shard is first seen changed; from
  // then on only by an entry of reverified_ made since its latest change.
  // The generation of shard `id`: how often it was seen changed.
  uint32_t Generation(index::ShardId id) const {
    return changes_[id.value].load(std::memory_order_acquire);
  }
  bool Verified(InodeId inode, index::ShardId shard) const;
  // Records `inode` verified, as of its shard's `generation` (read before
  // the check began: a change seen meanwhile makes the record stale).
  void SetVerified(InodeId inode, index::ShardId shard, uint32_t generation);
  // Shard `id`'s stamp check failed with `why`: marks it bad and forgets
  // its files' checks.
  void ShardChanged(index::ShardId id, const Status& why);
  // Only the ctime of open shard `id` moved (to `ctime_ns`): its
  // fingerprint is checked again on the same descriptor (a shard deleted or
  // renamed over while open still holds its checked bytes), its files'
  // checks are forgotten, and the new ctime accepted. Corruption if the
  // fingerprint differs.
  Status CheckAgain(index::ShardId id, const OpenShard& shard, int64_t ctime_ns);

  const std::unique_ptr<index::IndexReader> reader_;
  const FilesystemOptions options_;
  ShardFiles shards_;
  StreamReader streams_;
  // One bit per inode: content checked (verify=first).
  InodeBits verified_;
  // One bit per inode: a content mismatch was logged.
  InodeBits mismatch_logged_;
  // Per shard: how often its stamp check failed (Generation).
  std::unique_ptr<std::atomic<uint32_t>[]> changes_;
  mutable std::mutex reverified_mu_;
  // Inode -> its shard's generation when it was verified, for files of
  // shards seen changed. Guarded by reverified_mu_.
  std::unordered_map<uint64_t, uint32_t> reverified_;
  mutable KernelRequests kernel_requests_;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_FILESYSTEM_H_
