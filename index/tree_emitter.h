// A built tree (tree_builder.h) as the keys and values of index/schema.h, in
// ascending key order and without a sort, ready for table files. Knows the
// byte layout, not RocksDB: every key goes to a KvSink.
//
// The keys of an index fall into two runs written side by side (each sink
// may be a table file of its own):
//   EmitDirents  'D' keys: ordered by parent inode (a stable counting sort;
//                siblings are already in name order)
//   EmitInodes   'I' keys in inode order (tree order)
//   SmallKeys    'M' and 'S' keys, sorted; they follow the 'I' keys
#ifndef SHARDFS_INDEX_TREE_EMITTER_H_
#define SHARDFS_INDEX_TREE_EMITTER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/schema.h"
#include "index/tree_builder.h"

namespace shardfs::index {

// Takes keys in ascending order; an error stops the emission.
using KvSink = std::function<Status(std::string_view key, std::string_view value)>;
using KeyValues = std::vector<std::pair<std::string, std::string>>;
// The tails of file records, by member index: encoded extent lists
// (AppendExtent) of the sparse members, or the trailers of encoded members
// (EncodeEncodedTrailer): kEncodedTrailerSize bytes, never a whole number of
// extents, so the size tells the two apart.
using SparseExtents = std::unordered_map<uint32_t, std::string>;

// What the meta keys record besides the tree's counts.
struct MetaText {
  std::string build_options;
  std::string created_by;
  std::string partition{};  // "K/N", or empty: no partition keys.
  uint64_t partition_shards = 0;
  // A compressed tar shard is in the index: schema version 4
  // (kCodecSchemaVersion).
  bool any_codec = false;
  // A bzip2 shard is: version 5 (kBzip2SchemaVersion).
  bool any_bzip2 = false;
  // A slice shard is: version 6 (kSliceSchemaVersion).
  bool any_slice = false;
};

class TreeEmitter {
 public:
  // All three must outlive the emitter.
  TreeEmitter(const Tree& tree, std::span<const MemberEntry> members, const SparseExtents& extents);

  // The record of node `n` (for a hard link node: of the inode it names).
  // Its target and extents point into the members and `extents`.
  EntryRecord Record(const TreeNode& n) const;
  // Whether every file of the tree has a checksum (meta "checksums").
  bool AllChecksummed() const;
  // Whether a sparse file made it into the tree (schema version 2).
  bool AnySparse() const;
  // Whether an encoded member made it into the tree (schema version 3).
  bool AnyEncoded() const;

  // Every 'D' key of the default view, ascending.
  Status EmitDirents(const KvSink& put) const;
  // Every 'I' key of the default view, ascending.
  Status EmitInodes(const KvSink& put) const;
  // The 'M' keys of this tree: schema version, counts, `text`.
  KeyValues MetaKeys(const MetaText& text) const;

 private:
  // The extent list of `n`, or nullptr if it is not a sparse file's.
  const std::string* SparseExtentsOf(const TreeNode& n) const;

  const Tree& tree_;
  std::span<const MemberEntry> members_;
  const SparseExtents& extents_;
};

// The 'M' keys of a tree with `counts`, sorted: schema version (2 if
// `any_sparse`, 3 if `any_encoded`), counts, checksums ("xxh3" if
// `all_checksummed`), `text`.
KeyValues MetaKeysOf(const TreeCounts& counts, bool all_checksummed, bool any_sparse,
                     const MetaText& text, bool any_encoded = false);

// How a shard's path is stored: relative to `base` (the index's parent
// directory, absolute and normal) when the shard lies under it, with
// kShardPathRelative set; absolute otherwise. A remote shard's URL is stored
// as given. IoError naming the shard if its path cannot be made absolute.
Result<ShardMeta> StoredShardMeta(ShardMeta meta, const std::string& base);

// The 'S' keys of `shards` (ids in order from 0), paths as StoredShardMeta
// stores them.
// Whether an index of `shards` with seek keys `seek` has a compressed tar
// shard (schema version 4).
bool AnyCodec(std::span<const ShardMeta> shards, const KeyValues& seek);
// Whether one of `shards` is a bzip2-compressed tar.
bool AnyBzip2(std::span<const ShardMeta> shards);
// Whether a slice shard is among `shards` (schema version 6).
bool AnySlice(std::span<const ShardMeta> shards);

Result<KeyValues> ShardKeys(std::span<const ShardMeta> shards, const std::string& base);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_TREE_EMITTER_H_
