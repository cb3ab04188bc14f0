// ChunkedReader: how an OpenShard (src/reader/shard_files.h) reads the bytes of a
// shard that are not read straight from a local descriptor: a remote shard,
// or a local one behind -o cache_dir. ShardFetcher (src/reader/shard_fetcher.h)
// implements it, reading aligned chunks through the chunk cache; ShardFiles
// and Filesystem know only this interface, so their unit tests need no
// fetcher.
//
// Thread safety: implementations are called from any number of threads.
#ifndef SHARDFS_SRC_READER_CHUNKED_READER_H_
#define SHARDFS_SRC_READER_CHUNKED_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/fd.h"
#include "base/status.h"
#include "index/schema.h"

namespace shardfs::reader {

class OpenShard;
// An open, checked shard, held by its readers (src/reader/shard_files.h).
using ShardHandle = std::shared_ptr<OpenShard>;

// Where bytes of a shard lie whole in a local file, ready to be spliced from
// (a chunk on disk whose checksum has held). Holding `file` keeps its
// descriptor open, even if the cache evicts the chunk meanwhile.
struct FileRange {
  std::shared_ptr<const UniqueFd> file;  // Null: not located.
  uint64_t pos = 0;                      // Byte offset in the file.
};

// Reads shard bytes that do not come straight from a local descriptor.
class ChunkedReader {
 public:
  virtual ~ChunkedReader() = default;
  // Reads bytes [pos, pos + len) of `shard` into `buf`. Returns IoError if
  // they cannot be had now (the shard is not marked: a later read tries
  // again), Corruption if the shard differs from what was indexed.
  virtual Status ReadShard(const ShardHandle& shard, uint64_t pos, size_t len, char* buf) = 0;
  // As ReadShard, except that bytes lying whole in one checked chunk file on
  // disk are not copied: *at is set to where they are (at->file non-null)
  // and `buf` is left alone. `at` null: ReadShard.
  virtual Status ReadShardOrLocate(const ShardHandle& shard, uint64_t pos, size_t len, char* buf,
                                   FileRange* /*at*/) {
    return ReadShard(shard, pos, len, buf);
  }
  // Whether bytes [pos, pos + len) of `shard` can be read now without a
  // fetch from its storage (they lie in chunks this process holds). For
  // work done on speculation (a push ahead of a shuffled reader), which must
  // not take the link and the fetch slots from demand reads. Changes
  // nothing.
  virtual bool Holds(const ShardHandle& /*shard*/, uint64_t /*pos*/, size_t /*len*/) {
    return false;
  }
  // `bytes` of `shard` were handed to the kernel: a READ reply, or (pushed)
  // a file stored ahead of the program into the kernel's cache. Reads for
  // checks and pushes that were not stored are not counted.
  virtual void NoteDelivered(index::ShardId shard, uint64_t bytes, bool pushed) = 0;
  // Asks the shard's source, not the cache, whether `shard` is still the one
  // indexed: before a remote shard marked bad serves again. Corruption if
  // not, IoError if that cannot be told now.
  virtual Status Recheck(index::ShardId shard) = 0;
};

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CHUNKED_READER_H_
