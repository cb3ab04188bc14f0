// How many reads the index's own files cost: every read RocksDB asks of a
// table file opened for a reader (a block not in the block cache, a table's
// footer, index and filter at open) is counted, so that `shardfs stats` and
// the benchmark can say how many index preads a file costs.
//
// Thread safety: the counter is a process-wide relaxed atomic, read from any
// thread; it counts every IndexReader of the process (a manifest's partitions
// together).
#ifndef SHARDFS_INDEX_FILE_READS_H_
#define SHARDFS_INDEX_FILE_READS_H_

#include <rocksdb/env.h>

#include <cstdint>

namespace shardfs::index {

// The Env readers open their databases with: the default one, whose random
// access files count their reads. Never destroyed (RocksDB's background
// threads may outlive static destruction).
rocksdb::Env* CountingEnv();

// The reads counted so far (a MultiRead counts each of its requests).
uint64_t IndexFileReads();

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_FILE_READS_H_
