// Bridges from RocksDB's types to shardfs's, for the files of index/ that
// talk to RocksDB.
#ifndef SHARDFS_INDEX_ROCKS_UTIL_H_
#define SHARDFS_INDEX_ROCKS_UTIL_H_

#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include <string_view>

#include "base/status.h"

namespace shardfs::index {

// The bytes of `s`, borrowed: valid as long as the memory `s` points into
// (an iterator's current entry, a PinnableSlice) is.
inline std::string_view SliceBytes(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

// A failed RocksDB status as a Status: NotFound("what"), Corruption("what:
// RocksDB's message"), or IoError("what: RocksDB's message") for anything
// else. REQUIRES: !s.ok().
Status FromRocks(const rocksdb::Status& s, std::string_view what);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_ROCKS_UTIL_H_
