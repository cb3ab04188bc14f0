// Building an index: members in, a complete RocksDB directory out.
//
// The writer assembles the tree the members describe the way GNU tar 1.34
// extraction (`tar -xf` of each shard in order, into one directory) would: it
// replays the members in the order they were added, each against the tree as
// the members before it left it. The rules, each checked against GNU tar:
//
//  - A member whose path is free is created. Directories missing above it are
//    implied: 0755, owner 0, the mtime of their newest child. A directory is
//    implied only where no member ever describes it; a directory member that
//    comes after its children describes the directory all the same.
//  - A directory member over a directory changes nothing but the directory's
//    metadata: mode, owner and mtime are the later member's (tar sets them
//    when it is done); the entries below stay.
//  - Any member over a file or symlink replaces it (a directory too).
//  - A file, symlink or hard link over an empty directory replaces it; over a
//    directory that has entries it is refused ("File exists" in tar), and the
//    directory stays exactly as its own member (or the implied rule) describes
//    it.
//  - A member below a file or symlink is refused ("Not a directory"; shardfs
//    does not follow a symlink out of the tree, as tar would).
//  - A hard link names the inode its target path has *when the link is met*:
//    a later member over the target replaces the target's name only, and the
//    link keeps the old content (tar's link(2) semantics). A link to a
//    symlink is a second name of that symlink (one inode, nlink 2). A link to
//    a path that does not exist at that point (later in the archive, or
//    nowhere) or to a directory is refused; a link over a name of the same
//    inode (a link to itself) changes nothing.
//  - A refused member is counted in WriteStats::dropped with an example
//    naming the shard, the member and its header's byte offset.
//
// It then numbers inodes densely in tree order (root = 1, see index/schema.h)
// and writes every key in one sorted pass. Each step is a unit of its own:
// index/tree_builder.h (members -> tree), index/tree_emitter.h (tree -> keys)
// and index/index_publish.h (keys -> database at the output path).
//
// Publishing is atomic: the database is written to a temporary directory next
// to the output and renamed into place only when complete, so a failed or
// interrupted build leaves nothing that looks like an index.
//
// Not thread-safe; feed it from one thread.
#ifndef SHARDFS_INDEX_INDEX_WRITER_H_
#define SHARDFS_INDEX_INDEX_WRITER_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/schema.h"
#include "index/tree_builder.h"  // MemberEntry

namespace shardfs::index {

struct WriteOptions {
  // Replace an existing index (or empty directory) at the output path;
  // nothing else is ever replaced (see CheckOutputPath).
  bool force = false;
  // Recorded in the index as meta "build_options".
  std::string build_options;
  std::string created_by;
  // A part of a partitioned build: meta "partition" ("K/N") and
  // "partition_shards" (n); empty: neither is written (schema.h).
  std::string partition;
  uint64_t partition_shards = 0;
};

struct WriteStats {
  uint64_t files = 0;
  uint64_t dirs = 0;  // Including the root and synthesized ones.
  uint64_t synthesized_dirs = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;  // Names beyond the first of a file.
  uint64_t bytes = 0;      // Content bytes of regular files, each inode once.
  uint64_t replaced = 0;   // Entries replaced (or directories re-described) by a later member.
  std::vector<std::string> replaced_examples;  // The first few such paths.
  uint64_t dropped = 0;  // Members refused, as tar extraction would refuse them.
  // The first few: "shard S: member 'P' at byte N: reason".
  std::vector<std::string> dropped_examples;
  uint64_t index_bytes = 0;
};

class IndexWriter {
 public:
  // Registers a shard; ids are assigned in call order from 0. `meta.path` is
  // the path as the user gave it; Finish stores it relative to the index's
  // parent directory when the shard lies under it.
  ShardId AddShard(ShardMeta meta);

  // Adds a member. Members are replayed in call order (see the rules above).
  void AddMember(MemberEntry member);
  // Adds a sparse regular file: `extents` as index/schema.h describes them
  // (sorted, apart, non-empty, inside member.size, which is the logical
  // size), member.offset the first one's shard position (0 if none).
  void AddSparseMember(MemberEntry member, const std::vector<Extent>& extents);
  // Adds `batch` in order (a shard's members, say); when nothing was added
  // yet and its buffer can hold all that Reserve announced, the buffer is
  // taken over instead of copied. Then SetExtents makes sparse files of
  // some of them.
  void AddMembers(HugeVector<MemberEntry>&& batch);
  // Member number `member` (in call order) is sparse, as AddSparseMember.
  void SetExtents(size_t member, const std::vector<Extent>& extents);
  // Makes member `member` (a file) an encoded member stored as `encoding`.
  void SetEncoded(size_t member, const EncodedMember& encoding);

  // Makes room for `members` members in all, so that adding them does not
  // move the ones already added.
  void Reserve(size_t members) { members_.reserve(members); }

  size_t member_count() const { return members_.size(); }

  // Adds the 'Z' keys of a compressed tar shard (index/schema.h), any order;
  // the index is then written as schema version 4.
  void AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs);

  // Assembles the tree and publishes the index at `out_path`.
  // Returns what CheckOutputPath returns (a forced build replaces only a
  // shardfs index or an empty directory); IoError naming the path if
  // writing fails (what was at `out_path` is left there then).
  Result<WriteStats> Finish(const std::string& out_path, const WriteOptions& options);

 private:
  std::vector<ShardMeta> shards_;
  HugeVector<MemberEntry> members_;
  // Encoded extent lists of the sparse members, by index in members_; kept
  // aside so that other members pay nothing for them.
  std::unordered_map<uint32_t, std::string> extents_;
  std::vector<std::pair<std::string, std::string>> seek_kvs_;
};

// Checks early, before a long scan, that `out_path` can be published:
// AlreadyExists if something is there and !force; with force,
// InvalidArgument unless that is a shardfs index holding nothing else or an
// empty directory (CheckReplaceable: nothing else is ever replaced); IoError if its
// directory is not writable.
Status CheckOutputPath(const std::string& out_path, bool force);

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INDEX_WRITER_H_
