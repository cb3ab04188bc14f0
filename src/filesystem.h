// The filesystem an index describes, as plain C++ on InodeIds: lookup,
// getattr, readdir, readlink, read. No FUSE types here, so unit tests call it
// directly; src/fuse_adapter.cc translates FUSE requests into these calls.
//
// Metadata comes from the index alone; no shard is opened for lookup,
// getattr, readdir or readlink. A read resolves to a byte range of a shard:
// one index lookup for the inode, then pread (or splice) at offset + position.
//
// Thread safety: after construction every method may be called from any
// number of threads. The index reader is immutable, the shard cache guards
// itself, the verified-inode bitmap is atomic words.
#ifndef SHARDFS_SRC_FILESYSTEM_H_
#define SHARDFS_SRC_FILESYSTEM_H_

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "index/index_reader.h"
#include "index/schema.h"
#include "index/status.h"
#include "src/shard_cache.h"

namespace shardfs::mount {

using index::EntryRecord;
using index::InodeId;

enum class VerifyMode {
  kOff,     // Trust the shard check (size + fingerprint) alone.
  kFirst,   // Check a file's XXH3 against the index on its first read.
  kAlways,  // Check the whole file's XXH3 on every read (for small files).
};

struct FilesystemOptions {
  VerifyMode verify = VerifyMode::kOff;
  size_t max_open_shards = 128;
  uint64_t readahead = 8 << 20;  // See ShardCacheOptions::readahead.
  // When a reader finishes a file and its reads run sequentially through a
  // shard, the files that follow it in the shard, up to this many bytes, are
  // offered for the kernel's page cache (see PlanAhead); 0 turns it off.
  uint64_t push_ahead = 4 << 20;
  // The same for a read of a whole file that is not part of a sequential
  // walk (a shuffled loader): the files after it, up to this many bytes and
  // up to the first one already pushed, so that over an epoch each file is
  // pushed once and most reads find it in the kernel. 0 turns it off.
  uint64_t push_random = 0;
  // Behind a sequential reader of a shard (read replies and pushes), drop
  // the shard's own cached pages, in 2 MiB steps 2 MiB behind: the kernel
  // keeps the files' copy, so the data is not held in memory twice.
  bool drop_behind = true;
  // Ownership and permission overrides for every entry (-o uid=,gid=,umask=).
  int64_t uid = -1;
  int64_t gid = -1;
  int64_t umask = -1;
};

// A read resolved to a range of an open, checked shard.
struct ReadRange {
  ShardHandle shard;
  index::ShardId shard_id;
  uint64_t position = 0;  // Byte offset in the shard.
  size_t length = 0;      // 0 at or past end of file.
  // The range ends where the file ends, and reads of this shard have been
  // running sequentially: a reader walking the files in shard order.
  bool sequential_to_eof = false;
  bool whole_file = false;  // The range is the whole file.
};

// A file planned for pushing into the kernel's page cache ahead of a reader.
struct AheadFile {
  InodeId inode;
  uint64_t position = 0;  // Byte offset of its data in the shard.
  uint64_t size = 0;
  uint64_t xxh3 = 0;
  bool has_checksum = false;
};

// One bit per inode up to a maximum, set and tested from any thread.
class InodeBits {
 public:
  InodeBits() = default;
  explicit InodeBits(uint64_t max_inode);
  bool Test(InodeId inode) const;
  void Set(InodeId inode);  // Beyond the maximum: ignored.

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
  size_t size_ = 0;  // Words.
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

  // Resolves a read of `size` bytes at `offset` of file `inode`, clamped to
  // the file's size. With verify=first/always the file's content is checked
  // first. Returns IoError or Corruption (EIO) if the shard is bad or the
  // content does not match.
  Status ResolveRead(InodeId inode, uint64_t offset, size_t size, ReadRange* range);
  // Like ResolveRead, then preads the range into `buf` (of at least `size`
  // bytes); a short read marks the shard bad and returns IoError.
  Status Read(InodeId inode, uint64_t offset, size_t size, char* buf, size_t* n);
  // The same, also returning the range read (range->length bytes).
  Status Read(InodeId inode, uint64_t offset, size_t size, char* buf, ReadRange* range);

  // Push-ahead, for a reader that walks the files of a shard in order:
  // fills `files` with the regular files that follow `inode` in inode order
  // and lie back to back after it in the same shard (at most a small gap of
  // tar headers between them), `max_bytes` of data at most, each no larger
  // than kMaxAheadFile. Directories between them are stepped over. Empty when
  // the shard's files are not in inode order.
  // With `stop_at_pushed`, the plan ends before the first file already
  // pushed (MarkPushed); without, such files are left out.
  Status PlanAhead(InodeId inode, uint64_t max_bytes, bool stop_at_pushed,
                   std::vector<AheadFile>* files) const;
  // Files handed to the kernel's page cache, one bit per inode.
  void MarkPushed(InodeId inode) { pushed_.Set(inode); }
  bool IsPushed(InodeId inode) const { return pushed_.Test(inode); }
  // Reads planned file `f` whole from `shard` into `buf` (f.size bytes),
  // checking its XXH3 when verify is first (once) or always. Returns
  // Corruption on a mismatch (nothing is marked: a read of the file will
  // report it), IoError if the shard is short.
  Status ReadAheadFile(const AheadFile& f, const ShardHandle& shard, char* buf);
  static constexpr uint64_t kMaxAheadFile = 1 << 20;

  // A sequential reader's data up to byte `end` of the range's shard is now
  // in the kernel's page cache as file content (see drop_behind).
  void DeliveredUpTo(const ReadRange& range, uint64_t end) {
    if (options_.drop_behind) shards_.DropBehind(range.shard_id, range.shard->fd(), end);
  }

  void StatFs(struct statvfs* st) const;
  const index::IndexReader& reader() const { return *reader_; }
  ShardCache& shards() { return shards_; }
  const FilesystemOptions& options() const { return options_; }

 private:
  Status VerifyFile(const EntryRecord& rec, const ShardHandle& shard);

  const std::unique_ptr<index::IndexReader> reader_;
  const FilesystemOptions options_;
  ShardCache shards_;
  // One bit per inode: content checked (verify=first).
  InodeBits verified_;
  // One bit per inode: pushed into the kernel's page cache.
  InodeBits pushed_;
};

// Reads exactly `len` bytes at `pos`, retrying short reads. Returns IoError
// if the file ends first.
Status PreadExact(int fd, char* buf, size_t len, uint64_t pos);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_FILESYSTEM_H_
