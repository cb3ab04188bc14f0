// RocksDB options for writing an index once and reading it many times.
#ifndef SHARDFS_INDEX_DB_OPTIONS_H_
#define SHARDFS_INDEX_DB_OPTIONS_H_

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstddef>
#include <memory>
#include <string>

namespace shardfs::index {

// Options for the builder: LZ4 blocks where this RocksDB has LZ4 and, with
// `filter`, bloom filters on whole keys (lookups of names that do not exist
// stop at the filter). Table files whose keys are only ever looked up when
// they exist ('I': the kernel asks only for inodes it was given) or scanned
// ('M', 'S') are written without: a filter there is never consulted usefully.
rocksdb::Options WriterDbOptions(bool filter = true);

// Options for read-only use: a bounded block cache for data blocks, index and
// filter blocks held by the table reader (loaded once at open, ~2.5 MB per
// million entries), the same filter policy, no info log written into the
// index directory.
rocksdb::Options ReaderDbOptions(size_t block_cache_bytes);

// Opens the database at `path` read-only with `options` (ReaderDbOptions),
// never as RocksDB's "compacted" read-only database: that one, which the
// plain DB::OpenForReadOnly picks for a fully compacted index, starts the
// process-wide periodic task scheduler, whose timer thread wakes every few
// seconds and holds its mutex a moment each time. A fork() in that moment (a
// DataLoader worker) copied the mutex locked, and the child's first open
// waited on it for ever. Opened this way no thread of RocksDB runs at all.
rocksdb::Status OpenReadOnlyDb(const rocksdb::Options& options, const std::string& path,
                               std::unique_ptr<rocksdb::DB>* db);

// The block cache a reader of the index in directory `dir` gets by default
// (ReaderOptions::block_cache_bytes 0): room for every block of its tables
// uncompressed (kAutoCacheExpansion x their bytes on disk), so that a lookup
// of a tree's working set reads nothing from the index's files once each
// block was read; at least kMinAutoBlockCache, at most `cap`. The cache
// takes memory only for the blocks read.
inline constexpr size_t kMinAutoBlockCache = size_t{16} << 20;
inline constexpr size_t kAutoCacheExpansion = 3;
size_t AutoBlockCacheBytes(const std::string& dir, size_t cap);
// What the block caches of one index may take at most by default: a
// sixteenth of the machine's memory (at least kMinAutoBlockCache).
size_t AutoBlockCacheCap();

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_DB_OPTIONS_H_
