// The last step of a build: table files from emitted keys, one RocksDB
// database of them, published atomically at the output path.
//
// The database is written to a temporary directory next to the output and
// put in place only when complete, exchanged with an existing index in one
// step, so a failed or interrupted build leaves nothing that looks like a
// new index, and the output path never lacks an index it had.
#ifndef SHARDFS_INDEX_INDEX_PUBLISH_H_
#define SHARDFS_INDEX_INDEX_PUBLISH_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

#include "base/status.h"
#include "index/tree_emitter.h"

namespace shardfs::index {

// One table file of the bulk load. `emit` calls its argument with every
// key/value of the file in ascending order; the key ranges of the parts of
// one database do not overlap. A part that emits nothing leaves no file.
struct TablePart {
  std::string name;    // File name inside the database directory: "dirents.sst".
  bool filter = true;  // See WriterDbOptions.
  std::function<Status(const KvSink&)> emit;
};

// The absolute, lexically normal path of `out_path`, without a trailing '/'.
// Its parent is where relative shard paths start from.
Result<std::filesystem::path> AbsoluteIndexPath(const std::string& out_path);

// Writes a fresh database at `dir` (an existing, empty directory) holding the
// keys of `parts`: each part's table file on its own thread, then one ingest,
// then every file and `dir` fsynced. IoError naming the file on failure.
Status WriteDatabase(const std::string& dir, std::span<const TablePart> parts);

// Whether an index may be published at `out_abs` (AbsoluteIndexPath(
// out_path)) over what is there: nothing, an empty directory, or a shardfs
// index (IsShardfsIndex) holding nothing but the files RocksDB and shardfs
// write in one (index_files.h). Anything else, InvalidArgument naming
// `out_path` and what it is (the entries shardfs did not write, for an
// index holding some): no publish replaces what shardfs did not write.
Status CheckReplaceable(const std::string& out_path, const std::filesystem::path& out_abs);

// Writes `parts` with WriteDatabase into a temporary directory beside
// `out_abs` (AbsoluteIndexPath(out_path); named and removed on a signal as
// base/temp_dirs.h says) and puts it in place in one step (ReplaceDirectory
// in base/paths.h: `out_abs` names the old index or the new one at every
// moment, a crash included), then removes the old one's files (only those:
// anything else appearing there meanwhile is kept, with a warning). First
// removes the temporary directories of earlier builds of `out_abs` whose
// process is gone (RemoveStaleBuildDirs).
// Whether an existing index may be replaced is the caller's to check (see
// CheckOutputPath); what CheckReplaceable refuses is refused here too.
// Returns the bytes of the published index's files, or an error naming
// `out_path` with nothing new left behind.
Result<uint64_t> PublishIndex(const std::string& out_path, const std::filesystem::path& out_abs,
                              std::span<const TablePart> parts);

// The table files of a built tree, published with PublishIndex: the 'D'
// keys from `dirents` (with a bloom filter for names that do not exist);
// the 'I' keys from `inodes`, then `small_kvs` (the 'M' and 'S' keys,
// sorted); default@1's stored bytes per shard under 'V'; the 'Z' seek keys
// `seek_kvs` (sorted). Both tree builders end here.
Result<uint64_t> PublishTree(const std::string& out_path, const std::filesystem::path& out_abs,
                             const std::function<Status(const KvSink&)>& dirents,
                             const std::function<Status(const KvSink&)>& inodes,
                             const KeyValues& small_kvs, std::span<const uint64_t> shard_bytes,
                             const KeyValues& seek_kvs);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INDEX_PUBLISH_H_
