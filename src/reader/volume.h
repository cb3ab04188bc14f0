// A volume: an index opened for reading with everything its reads need, the
// one piece every in-process reader shares (the FUSE mount, the Python
// package). It turns a local index directory or manifest (what
// indexref::ResolveForVolume made of an INDEX argument: a path, a URL, a
// bundle) and options into an open
// index::IndexReader, the chunk fetcher and its cache for remote shards (or
// a cache_dir in front of local ones), the cache of decoded bytes (zip
// members, compressed tars) and the reader::Filesystem over them.
//
// Opening is two steps, so that a caller may resolve before it forks (the
// mount: errors reach the user, the child inherits the hold on a fetched
// copy) and open after (RocksDB and the fetcher's threads do not survive a
// fork): indexref::ResolveForVolume, then Open(location, options).
//
// What a frontend needs is here, with no FUSE type and no global state:
// Resolve (a path to its entry), Stat, ListDir, ReadLink and Read (a range
// of a file, by path, looked-up record or inode). fs() is the filesystem on
// inode ids underneath, for a frontend that speaks inodes (the FUSE mount).
//
// Thread safety: after Open, every method may be used from any number of
// threads (see reader::Filesystem). Nothing in a Volume survives fork(): a
// child process opens its own, Open(location(), options()), and leaves the
// parent's alone (its locks may be held by threads the child does not have;
// options() holds nothing of the parent's objects).
#ifndef SHARDFS_SRC_READER_VOLUME_H_
#define SHARDFS_SRC_READER_VOLUME_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "src/reader/decoded_cache.h"
#include "src/reader/filesystem.h"
#include "src/reader/shard_fetcher.h"
#include "src/reader/storage_plan.h"

namespace shardfs::reader {

struct VolumeOptions {
  // The view, rank partition, block cache, preload (index/index_reader.h).
  // Resolve sets resolve_partition.
  index::ReaderOptions reader;
  // verify, max_open_shards, ownership overrides; Open sets chunked,
  // chunk_local and decoded.
  reader::FilesystemOptions fs;
  // Without checksums in the index, verify=first|always is turned off
  // instead of refused (a caller that asks for checks where they exist).
  bool verify_where_possible = false;
  // Keeps the chunks of shards on disk in this directory (and puts local
  // shards behind the cache too); "": remote shards' chunks, and those of
  // local shards on network storage, in the node-local default cache that
  // every process of the user on the node shares (in memory where no
  // default root is usable). Also where an index by URL is cached ("": the
  // default index cache).
  std::string cache_dir;
  uint64_t cache_size = 0;  // Bytes of the chunk cache; 0: the defaults below.
  // Whether local shards are on network storage, and are then read through
  // the chunk cache, in a node-local directory if cache_dir is not given
  // (src/reader/storage_plan.h).
  StorageMode storage = StorageMode::kAuto;
  static constexpr uint64_t kDefaultMemoryCache = 1ull << 30;
  static constexpr uint64_t kDefaultDiskCache = 16ull << 30;
  // Bytes of decoded blocks kept in memory (src/reader/decoded_cache.h).
  uint64_t decode_cache = 256ull << 20;
  // Bytes of an index fetched by URL (or unpacked from a bundle) at most.
  uint64_t max_index_size = uint64_t{64} << 30;
  // Chunk size, fetch threads, retries, timeouts, CA file.
  reader::FetcherOptions fetch;
  // Log how the storage is read (network storage, the chunk cache, the
  // index copy). A process that opens again what its parent opened before
  // fork() sets it false: the parent said it already.
  bool announce = true;
};

// The index a Volume opens, as the caller found it.
struct IndexLocation {
  // What IndexReader::Open opens: a local directory or manifest file.
  std::string path;
  // What messages name: the argument, a URL redacted.
  std::string shown;
  // True if `path` is a copy in the index cache (fetched or unpacked): it
  // is node-local already and never copied again.
  bool cached = false;
  // Keeps that copy from being pruned while the location lives.
  std::shared_ptr<const void> hold;
};

class Volume {
 public:
  // Opens the index at `where` with `options` (as
  // indexref::ResolveForVolume left them). Returns what IndexReader::Open
  // returns for a bad index, each message naming where.shown; InvalidArgument if verify is asked of
  // an index built without checksums (unless verify_where_possible); the chunk cache's errors.
  static Result<std::unique_ptr<Volume>> Open(IndexLocation where, VolumeOptions options);

  ~Volume();  // Stops the fetcher first.
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  reader::Filesystem& fs() { return *fs_; }
  const reader::Filesystem& fs() const { return *fs_; }
  // The chunk fetcher; nullptr when every shard is local, on local storage,
  // and there is no cache_dir.
  reader::ShardFetcher* fetcher() { return fetcher_.get(); }
  const IndexLocation& location() const { return where_; }
  // What messages name: the argument, a URL redacted.
  const std::string& shown() const { return where_.shown; }
  const VolumeOptions& options() const { return options_; }
  // Where the index and shards were found (network or not, and why), and
  // the chunk cache's directory ("" in memory, or no cache).
  const StorageSurvey& storage() const { return storage_; }
  const std::string& cache_dir() const { return cache_dir_; }

  // The entry at `relpath`, '/'-separated from the root ("" and "/" are the
  // root): one Lookup per component; "." and empty components are skipped,
  // ".." goes up (the root's is the root). Symbolic links met on the way are
  // followed (a relative target from the link's directory), and so is the
  // last component's if `follow`. Returns NotFound naming `relpath` if
  // nothing is there (or a link points out of the index: an absolute
  // target), NotADirectory if a component before the last is a file, and
  // TooManyLinks (ELOOP) after 40 links (a loop). `rec` is valid while `holder`
  // is alive and not reused. The directories of plain paths (no ".", "..",
  // empty components or links) are remembered, so that a later walk to a
  // file in a directory seen before is one Lookup; so are the records of
  // regular files walked to so (see file_records_).
  Status Resolve(std::string_view relpath, bool follow, index::EntryRecord* rec,
                 index::RecordHolder* holder) const;
  // Resolve, following links, for an entry to read: IsADirectory naming
  // `relpath` if it is a directory. No lookup for a file remembered
  // (Remembered).
  Status ResolveFile(std::string_view relpath, index::EntryRecord* rec,
                     index::RecordHolder* holder) const;

  // The stat of the entry at `relpath` (Resolve with `follow`), with the
  // ownership overrides of the options applied; st_ino is the index's inode.
  Status Stat(std::string_view relpath, bool follow, struct stat* st) const;

  // Called for each child of a directory, in name order; returns false to
  // stop. `rec` is valid during the call only.
  using ListFn = std::function<bool(std::string_view name, const index::EntryRecord& rec)>;
  // Calls `fn` for each child of the directory at `relpath` (links
  // followed). Resolve's errors; NotADirectory naming `relpath` if it is not
  // a directory.
  Status ListDir(std::string_view relpath, const ListFn& fn) const;
  // The same for directory inode `dir` (one a Resolve or ListDir gave).
  // NotFound if there is no such inode.
  Status ListDir(index::InodeId dir, const ListFn& fn) const;

  // The target of the symbolic link at `relpath` (not followed);
  // InvalidArgument naming `relpath` if it is not a link.
  Result<std::string> ReadLink(std::string_view relpath) const;

  // Reads up to `size` bytes at `offset` of a file into `buf` (which holds
  // `size` bytes) and returns how many: fewer only at the end of the file,
  // 0 at or past it. Checked as the mount checks them (verify); Filesystem::Read's
  // errors (EIO for bytes that cannot be served as indexed, never wrong
  // bytes). Costs an index lookup (by inode), or Resolve (by path), then one
  // pread of the shard or a decode.
  Result<size_t> Read(std::string_view relpath, uint64_t offset, size_t size, char* buf);
  // The same for a file that Resolve or ResolveFile of this volume gave
  // (no second lookup); `rec` as they left it.
  Result<size_t> Read(const index::EntryRecord& rec, uint64_t offset, size_t size, char* buf);
  // The same for file inode `inode` (GetFile, then the read).
  Result<size_t> Read(index::InodeId inode, uint64_t offset, size_t size, char* buf);

  // The record of file inode `inode`, as ResolveFile gives records: one
  // index lookup, none for a file remembered. NotFound if there is no such
  // inode, IsADirectory for a directory.
  Status GetFile(index::InodeId inode, index::EntryRecord* rec, index::RecordHolder* holder) const;
  // The record of a file remembered by an earlier Resolve of plain path
  // `relpath` (or GetFile of `inode`), with no index lookup and no I/O (a
  // hash lookup under a shared lock never held across anything else: a
  // frontend may call it holding a lock of its own, Python's GIL). False if
  // none is remembered; `rec` needs no holder.
  bool Remembered(std::string_view relpath, index::EntryRecord* rec) const;
  bool Remembered(index::InodeId inode, index::EntryRecord* rec) const;
  // Reads whole files that ResolveFile or GetFile gave with one stamp check
  // and one read where they lie together (Filesystem::ReadAdjacent); false,
  // nothing read, where they do not.
  Result<bool> ReadAdjacent(std::span<const index::EntryRecord> recs, char* const* bufs) {
    return fs_->ReadAdjacent(recs, bufs);
  }
  // Says that a file that Resolve or ResolveFile gave will be read soon
  // (Filesystem::WillNeed): before a batch of reads, each of its files.
  void WillNeed(const index::EntryRecord& rec) { fs_->WillNeed(rec); }

 private:
  Volume() = default;

  IndexLocation where_;
  VolumeOptions options_;
  StorageSurvey storage_;
  std::string cache_dir_;
  // Resolve's directories by plain path ("a/b"): the index does not change
  // while open. At most kMaxCachedDirs; later ones are not remembered.
  struct PathHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kMaxCachedDirs = 1 << 16;
  mutable std::shared_mutex dirs_mu_;
  mutable std::unordered_map<std::string, index::InodeId, PathHash, std::equal_to<>>
      dirs_;  // Guarded by dirs_mu_.

  // The records of regular files (none sparse: a copy holds all of such a
  // record) Resolve found by plain path with no link on the way, and GetFile
  // by inode; by path, the record. The index does not change while open (its
  // view and version are fixed), so a record stays what a new lookup would
  // give; what every read checks (the shard's stamp, checksums) is checked
  // by Filesystem::Read as for any record. At most kMaxCachedFiles records
  // (about 200 bytes each, and the path); later ones are not remembered.
  void Remember(std::string_view relpath, const index::EntryRecord& rec) const;
  static constexpr size_t kMaxCachedFiles = 1 << 17;
  mutable std::shared_mutex files_mu_;
  mutable std::unordered_map<uint64_t, index::EntryRecord>
      file_records_;  // By inode. Guarded by files_mu_.
  // Into file_records_, whose nodes never move.
  mutable std::unordered_map<std::string, const index::EntryRecord*, PathHash, std::equal_to<>>
      file_paths_;  // Guarded by files_mu_.

  // Destroyed in reverse: the filesystem first, then what it points to.
  std::unique_ptr<reader::DecodedCache> decoded_;
  std::unique_ptr<reader::ShardFetcher> fetcher_;
  std::unique_ptr<reader::Filesystem> fs_;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_VOLUME_H_
