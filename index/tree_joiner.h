// Joining the chunks' trees of a bounded build (index/bounded_build.h) into
// the keys of one tree: each chunk is replayed by the in-memory tree builder
// (index/tree_builder.h) in archive order, and its nodes stream by in tree
// order. Inodes are numbered as they come; a directory's keys wait on a
// stack until its subtree is done (its link count and, if implied, its
// mtime need all of it). 'D' keys and 'I' keys go to run writers
// (index/external_sort.h), merged later into the index's table files.
//
// Not thread-safe: one joiner, fed from one thread.
#ifndef SHARDFS_INDEX_TREE_JOINER_H_
#define SHARDFS_INDEX_TREE_JOINER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "index/external_sort.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "index/tree_builder.h"
#include "index/tree_emitter.h"

namespace shardfs::index {

class TreeJoiner {
 public:
  // Directories' 'I' keys go to `dir_inodes`, the others' to `inodes` (in
  // inode order: their runs need no sort). `shards` must outlive the joiner.
  TreeJoiner(const std::vector<ShardMeta>& shards, RunWriter* dirents, RunWriter* inodes,
             RunWriter* dir_inodes)
      : shards_(shards),
        dirents_(dirents),
        inodes_(inodes),
        dir_inodes_(dir_inodes),
        shard_bytes_(shards.size(), 0) {}

  // Replays a chunk (members in tree order, `seqs` their archive positions)
  // and adds its tree. A chunk must start at a path outside every
  // directory an earlier chunk left open, or inside the innermost; else
  // Corruption. IoError from a run writer.
  Status AddChunk(std::vector<MemberEntry>* members, std::vector<uint64_t>* seqs,
                  SparseExtents* extents);
  // Puts a chunk (members, their positions, extents by member) in archive
  // order.
  static void SortByArchiveOrder(std::vector<MemberEntry>* members, std::vector<uint64_t>* seqs,
                                 SparseExtents* extents);
  // Replays a chunk in archive order and adds its tree.
  Status AddTree(const std::vector<MemberEntry>& members, const std::vector<uint64_t>& seqs,
                 const SparseExtents& extents);
  // Closes every open directory.
  Status Finish();

  // After Finish: what the joined tree holds, as IndexWriter reports it.
  WriteStats Stats();
  const TreeCounts& counts() const { return counts_; }
  bool all_checksummed() const { return all_checksummed_; }
  bool any_sparse() const { return any_sparse_; }
  bool any_encoded() const { return any_encoded_; }
  const std::vector<uint64_t>& shard_bytes() const { return shard_bytes_; }

 private:
  // A directory whose subtree is still streaming by.
  struct OpenDir {
    std::string path;
    uint64_t inode = 0;
    uint64_t parent_inode = 0;
    uint32_t nlink = 2;
    bool implied = false;
    int64_t mtime_ns = INT64_MIN;  // Implied: the newest child's so far.
    EntryRecord rec;
  };

  // The first few examples by archive position.
  class Examples {
   public:
    void Offer(uint64_t seq, std::string text);
    std::vector<std::string> Take();

   private:
    std::vector<std::pair<uint64_t, std::string>> items_;
  };

  // AddTree's steps. Counts the tree builder's report (replaced and dropped
  // members), with examples by archive position.
  void NoteReport(const Tree& tree, const std::vector<MemberEntry>& members,
                  const std::vector<uint64_t>& seqs);
  // Adds node `k` of `nodes`: closes the open directories it is not under,
  // then puts its keys (a directory: opens it). (*inode_of)[k] gets its
  // inode.
  Status AddNode(const HugeVector<TreeNode>& nodes, size_t k, const TreeEmitter& emitter,
                 const std::vector<MemberEntry>& members, std::vector<uint64_t>* inode_of);
  // Opens directory node `n`, whose record `rec` is numbered.
  void OpenDirectory(const TreeNode& n, EntryRecord rec);
  // Counts a file or symlink record in the totals.
  void CountLeaf(const TreeNode& n, const EntryRecord& rec, bool has_checksum);

  Status Put(RunWriter* w, std::string_view key, const EntryRecord& rec);
  Status PutDirent(uint64_t parent, std::string_view path, const EntryRecord& rec);
  Status PutInode(const EntryRecord& rec);
  // An implied parent's mtime is its newest child's.
  void ChildMtime(int64_t mtime_ns);
  // Closes the innermost open directory: its keys, now that its link
  // count and mtime are known.
  Status Pop();

  const std::vector<ShardMeta>& shards_;
  RunWriter* dirents_;
  RunWriter* inodes_;
  RunWriter* dir_inodes_;
  std::vector<OpenDir> stack_;
  uint64_t next_inode_ = kRootInode.value;
  TreeCounts counts_;
  bool all_checksummed_ = true;
  bool any_sparse_ = false;
  bool any_encoded_ = false;
  std::vector<uint64_t> shard_bytes_;
  uint64_t replaced_ = 0;
  uint64_t dropped_ = 0;
  Examples replaced_examples_, dropped_examples_;
  std::string value_;
  DirentKeyBuffer dkey_;
  InodeKeyBuffer ikey_;
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_TREE_JOINER_H_
