// A partitioned index: a manifest file naming several indexes (partitions),
// each built on its own shards (`index build --part K/N`), read as one tree.
//
// The union. Partitions are taken in the manifest's order, as if their
// shards had been extracted one after the other:
//  - a path that is a directory in several partitions is one directory
//    holding all their entries (a "union directory");
//  - a file or symlink in a later partition replaces one of the same path in
//    an earlier one (and an empty directory), as a later member does;
//  - a file or symlink over a directory that has entries is dropped, as tar
//    refuses it ("File exists");
//  - a directory with entries over a file is refused when the manifest is
//    made: a single build would keep or drop its entries depending on member
//    order that the partitions no longer hold.
// `shardfs index manifest` works this out once (index/manifest_builder.h)
// and records the outcome, so a reader needs no scan: the union directories
// with their merged records, and per partition the inodes that the union
// hides.
//
// Inode numbers. Partition p's inodes (of the version the tree uses) follow
// those of the partitions before it: global = base[p] + local, base[0] = 0,
// so the root is 1 and the numbers are dense. A union directory is numbered
// as its first copy; its other copies are hidden. Shard ids are numbered the
// same way over the partitions' shard tables.
//
// Views. A version of a view on a manifest is a version in every partition
// (made by `view create` on each, with the same rules) plus the union of
// those versions, recorded in the manifest as one more tree. A view's rules
// are per path, and every partition applies them to its own paths, so the
// union of the per-partition results is the view of the union; the union
// directories are then worked out again for that version.
//
// File layout: kManifestMagic, then the body, then the XXH3-64 of the body
// (8 bytes, little-endian). The body is a sequence of varints and strings
// (varint length, bytes); see EncodeManifest in manifest.cc.
#ifndef SHARDFS_INDEX_MANIFEST_H_
#define SHARDFS_INDEX_MANIFEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::index {

// A manifest file begins with this line; nothing else does (an index is a
// directory, a shard a tar).
inline constexpr std::string_view kManifestMagic = "shardfs-manifest 1\n";
// Partitions of one manifest, at most (a global inode keeps 2^48 per partition).
inline constexpr size_t kMaxPartitions = 65536;

// True if `path` is a regular file that begins with kManifestMagic. Never
// blocks on a FIFO.
bool IsManifestFile(const std::string& path);

// Maps a partition reference, as the manifest records it, to a local index
// directory. `base` is the manifest's own location (its directory, or the
// URL it was fetched from, up to and including the last '/'); a relative
// reference is taken from there. The default (an empty function) accepts
// local references only: absolute paths, or relative ones joined to `base`.
using PartitionResolver =
    std::function<Result<std::string>(const std::string& base, const std::string& ref)>;

struct ManifestPartition {
  std::string ref;           // As given to `index manifest`, relative to the manifest's location.
  std::string db_identity;   // The partition database's identity when the manifest was made.
  uint32_t shard_count = 0;  // Entries of its shard table.
  std::string part;          // Its meta "partition" ("K/N"), if it has one.
};

// A directory that several partitions hold.
struct UnionDir {
  // The merged record, in global numbers: inode (its first copy's), parent,
  // mode, owner and mtime as a single build would give them, nlink = 2 +
  // subdirectories of the union.
  EntryRecord record;
  // (partition, local inode) of every copy, in partition order.
  std::vector<std::pair<uint32_t, uint64_t>> copies;
};

// A file or symlink whose name in an earlier partition a later one replaced
// while it keeps other names: its link count in the union.
struct NlinkOverride {
  uint32_t partition = 0;
  uint64_t inode = 0;  // Local.
  uint32_t nlink = 0;
};

// One version of the union: default@1 (what the partitions' builds wrote)
// or a view's version.
struct ManifestTree {
  std::string name = "default";
  uint32_t version = 1;
  int64_t created_ns = 0;
  std::string from;  // The source's label ("" for default@1).
  std::string message;
  // Per partition: the version it is opened at ("" for default@1).
  std::vector<std::string> part_views;
  // Per partition: the version's largest inode (base[p+1] - base[p]).
  std::vector<uint64_t> part_max_inode;
  // Per partition, per shard of its table: the version's bytes in it (the
  // rank partition's input).
  std::vector<std::vector<uint64_t>> shard_bytes;
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  std::vector<UnionDir> union_dirs;
  // Per partition: its local inodes that the union hides (InodeSet encoding).
  std::vector<std::string> hidden;
  std::vector<NlinkOverride> nlinks;
  // Entries dropped as tar would drop them (a file over a non-empty directory).
  uint64_t dropped = 0;
  std::vector<std::string> dropped_examples;

  std::string label() const;  // "NAME@N"
};

struct Manifest {
  std::vector<ManifestPartition> partitions;
  std::vector<ManifestTree> trees;  // trees[0] is default@1.
};

// The version record a catalog and a reader show for `tree`, the manifest's
// tree number `view` (max_inode: the sum of the partitions'; no shard count).
VersionRecord TreeRecord(const ManifestTree& tree, uint32_t view);

std::string EncodeManifest(const Manifest& manifest);
// Corruption naming `path` if `bytes` is not what EncodeManifest writes
// (magic, checksum, lengths, counts that agree with each other).
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& path);
// Reads and decodes the manifest at `path` (at most 1 GiB).
Result<Manifest> ReadManifest(const std::string& path);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_MANIFEST_H_
