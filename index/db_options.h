// RocksDB options for writing an index once and reading it many times.
#ifndef SHARDFS_INDEX_DB_OPTIONS_H_
#define SHARDFS_INDEX_DB_OPTIONS_H_

#include <rocksdb/options.h>

#include <cstddef>

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

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_DB_OPTIONS_H_
