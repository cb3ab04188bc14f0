// Building an index in bounded memory: the same database as IndexWriter,
// key for key, whatever the number of members, in about `memory` bytes.
//
// How it stays exact. The members are spilled as sorted runs keyed by
// (path in tree order, archive position) and merged into one stream in tree
// order. The stream is cut into chunks of consecutive paths; each chunk is
// replayed by the in-memory tree builder (index/tree_builder.h) in archive
// order, and the chunks' trees are joined into one in a streaming pass. A
// chunk replays exactly as the whole archive would when nothing outside it
// can change what happens inside it, so a cut between paths A and B is made
// only where
//  - every directory that holds both A and B is "plain": every member of
//    its own path is a directory. A plain directory is a directory (or not
//    there yet) at every point of the archive, so it never refuses what
//    lies below it, and whether it has entries changes nothing for it;
//  - no hard link spans the cut: a link and its target path (and the
//    directories and links they depend on) replay in one chunk.
// Paths that are not plain (a file, symlink or link member whose path also
// has members below it) hold their whole subtree in one chunk; so do hard
// links, from the first path to the last they join. Such a chunk may exceed
// the budget: the bound holds for archives whose non-plain subtrees and hard
// link spans are small, which is what tar archives of datasets are.
//
// Joining (index/tree_joiner.h): inodes are numbered in tree order as the
// chunks' nodes stream by; a directory's keys wait on a stack until its
// subtree is done (its link count and, if implied, its mtime need all of
// it). Keys go to more
// external sorts ('D' keys by parent inode; 'I' keys by inode, those of
// files and symlinks already in order), merged into the table files that
// index_publish.h publishes (SstFileWriter, then one ingest): every table
// file is written in one sorted pass, as IndexWriter writes them, with no
// memtable and no compaction, so the database is the in-memory build's,
// file for file.
//
// Spill files live in a temporary directory beside the output (named like
// a publish's, OUT.tmp-HOST-PID-RANDOM: base/temp_dirs.h), removed when the
// writer is destroyed, on success and failure alike, and when SIGINT,
// SIGTERM or SIGHUP ends the process; Create first removes such directories
// of this output left by builds of this host that are gone
// (RemoveStaleBuildDirs).
#ifndef SHARDFS_INDEX_BOUNDED_BUILD_H_
#define SHARDFS_INDEX_BOUNDED_BUILD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "index/external_sort.h"
#include "index/index_writer.h"
#include "index/schema.h"
#include "index/tree_builder.h"

namespace shardfs::index {

class BoundedIndexWriter;
class TreeJoiner;

// Spills the members of the shards one thread scans. Not thread-safe: one
// per thread.
// A member of a slice shard of the shard being spilled (`index build
// --recursive`: a compressed tar inside it; index/schema.h, "Slice
// shards"): MemberSpiller::Add takes its shard as kSliceMember | k, k the
// slice's number within the shard from 0, and Finish gives it the id that
// SetSliceIds registered. Its archive position stays its outer shard's.
inline constexpr uint32_t kSliceMember = uint32_t{1} << 31;

class MemberSpiller {
 public:
  // The members that follow are shard `shard`'s, numbered from 0 in
  // archive order.
  void BeginShard(ShardId shard);
  // Forgets what was added for the current shard (its scan starts over).
  void RestartShard();
  // Adds the next member of the current shard; `extents` if it is sparse
  // (as IndexWriter::AddSparseMember). IoError naming a spill file.
  // `encoded`: an encoded member's trailer (EncodeEncodedTrailer), or empty.
  Status Add(const MemberEntry& member, const std::vector<Extent>* extents,
             std::string_view encoded = {});

 private:
  friend class BoundedIndexWriter;
  MemberSpiller(BoundedIndexWriter* owner, RunWriter runs)
      : owner_(owner), runs_(std::move(runs)) {}

  BoundedIndexWriter* owner_;
  RunWriter runs_;
  ShardId shard_;
  uint32_t generation_ = 0;
  uint64_t next_ = 0;
  std::string key_, value_;
};

class BoundedIndexWriter {
 public:
  // Makes the spill directory beside `out_path` for a build of at most about
  // `memory` bytes (the process's own ~40 MB included; below 80 MB, half of
  // it goes to the build) whose members come from `spillers` threads.
  // IoError if it cannot be made.
  static Result<std::unique_ptr<BoundedIndexWriter>> Create(const std::string& out_path,
                                                            uint64_t memory, int spillers);
  ~BoundedIndexWriter();  // Removes the spill directory.

  // Spiller `i` < spillers, for one scanning thread.
  MemberSpiller* spiller(int i) { return spillers_[static_cast<size_t>(i)].get(); }

  // Registers a shard, as IndexWriter::AddShard (ids in call order from 0).
  ShardId AddShard(ShardMeta meta);
  // As IndexWriter::AddSeekKeys.
  void AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs);
  // The slices of shard `shard` (kSliceMember) have ids first, first + 1, ...
  // REQUIRES: before Finish, from one thread.
  void SetSliceIds(ShardId shard, uint32_t first) { slice_ids_[shard.value] = first; }

  // Publishes the index, as IndexWriter::Finish: the same keys and values
  // as an IndexWriter given the same shards and members in archive order.
  // REQUIRES: every spiller is done.
  Result<WriteStats> Finish(const std::string& out_path, const WriteOptions& options);

  // The number of chunks, after Finish (for tests: a tiny budget gives
  // many).
  size_t chunks() const { return chunks_; }

 private:
  friend class MemberSpiller;
  BoundedIndexWriter(std::string dir, uint64_t memory) : dir_(std::move(dir)), memory_(memory) {}

  void NoteLink(std::string lo, std::string hi);
  void NoteRestart(ShardId shard, uint32_t generation);

  // Finish's steps, in order; each returns the Status Finish documents.
  // Flushes every spiller; returns the member runs.
  Result<std::vector<std::string>> FlushSpillers();
  // Merges the member runs into one stream in tree order, cuts it into
  // chunks (about a quarter of the budget each) and hands them to `joiner`.
  Status JoinMembers(const std::vector<std::string>& member_runs, size_t read_buffer,
                     TreeJoiner* joiner);
  // Decodes a spilled member (key and value of a member run). *current is
  // false for a member of a scan that started over since (a later
  // generation of its shard holds it); a slice member gets its slice's id.
  Status ReadSpilled(std::string_view key, std::string_view value, MemberEntry* m, uint64_t* seq,
                     std::string* sparse, bool* current) const;
  // Writes and publishes the index from the joined tree's runs and the
  // small keys; returns the index's bytes.
  Result<uint64_t> Publish(const std::string& out_path, const WriteOptions& options,
                           const TreeJoiner& joiner, const std::vector<std::string>& dirent_runs,
                           const std::vector<std::string>& inode_runs, size_t read_buffer);

  std::string dir_;
  uint64_t memory_;
  std::atomic<uint64_t> run_counter_{0};
  std::vector<std::unique_ptr<MemberSpiller>> spillers_;
  std::vector<ShardMeta> shards_;
  std::vector<std::pair<std::string, std::string>> seek_kvs_;
  std::mutex mu_;
  // Tree-order spans of hard links (the link's and its target's path keys).
  std::vector<std::pair<std::string, std::string>> link_spans_;  // Guarded by mu_.
  std::unordered_map<uint32_t, uint32_t> generations_;           // Guarded by mu_.
  std::unordered_map<uint32_t, uint32_t> slice_ids_;  // By outer shard; set before Finish.
  size_t largest_chunk_ = 0;
  size_t chunks_ = 0;
};

// The memory `index build` gives itself without --memory: a quarter of the
// machine's RAM, at most 4 GiB (at least 256 MiB).
uint64_t DefaultBuildMemory();

// About how many bytes IndexWriter takes per member (the in-memory build).
inline constexpr uint64_t kInMemoryBytesPerMember = 400;

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_BOUNDED_BUILD_H_
