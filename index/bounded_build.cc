#include "index/bounded_build.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "base/coding.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/temp_dirs.h"
#include "index/index_files.h"
#include "index/index_publish.h"
#include "index/member_path.h"
#include "index/tree_emitter.h"
#include "index/view_store.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

// A path as a key whose bytewise order is tree order (TreeOrderLess): '/'
// becomes 0, below every byte a name can hold, and "\0\0" ends it (no name
// is empty, so a path's key never holds two 0 bytes in a row).
void AppendPathKey(std::string_view path, std::string* out) {
  for (char c : path) out->push_back(c == '/' ? '\0' : c);
  out->append(2, '\0');
}

std::string PathKey(std::string_view path) {
  std::string key;
  AppendPathKey(path, &key);
  return key;
}

constexpr size_t kSeqSize = 8;

// A member's archive position: its shard, then its number in the shard.
uint64_t Seq(ShardId shard, uint64_t number) {
  return (static_cast<uint64_t>(shard.value) << 32) | number;
}

enum MemberFlags : uint8_t { kHardlink = 1, kChecksum = 2, kSparse = 4, kEncoded = 8, kSlice = 16 };

// `encoded`: an encoded member's trailer (EncodeEncodedTrailer), or empty.
void EncodeMember(const MemberEntry& m, uint32_t generation, const std::vector<Extent>* extents,
                  std::string_view encoded, std::string* out) {
  out->clear();
  out->push_back(static_cast<char>(m.type));
  const bool slice = m.shard.value & kSliceMember;
  out->push_back(static_cast<char>((m.is_hardlink ? kHardlink : 0) |
                                   (m.has_checksum ? kChecksum : 0) | (extents ? kSparse : 0) |
                                   (encoded.empty() ? 0 : kEncoded) | (slice ? kSlice : 0)));
  PutVarint64(out, generation);
  PutVarint64(out, m.mode);
  PutVarint64(out, m.uid);
  PutVarint64(out, m.gid);
  PutFixed64(out, static_cast<uint64_t>(m.mtime_ns));
  PutVarint64(out, m.size);
  PutVarint64(out, m.offset);
  PutFixed64(out, m.xxh3);
  PutVarint64(out, m.header_offset);
  PutVarint64(out, m.link_target.size());
  out->append(m.link_target);
  if (slice) PutVarint64(out, m.shard.value & ~kSliceMember);
  if (extents) out->append(EncodeExtents(*extents));
  out->append(encoded);
}

// Decodes a spilled member (path from its key); `extents` gets the encoded
// extent list of a sparse one, *slice 1 + the number of its slice (0: none;
// m->shard is then still the outer shard). False if the record is damaged.
bool DecodeMember(std::string_view key, std::string_view in, MemberEntry* m, uint32_t* generation,
                  uint64_t* seq, std::string* extents, uint64_t* slice) {
  if (key.size() < 2 + kSeqSize || in.size() < 2) return false;
  *seq = DecodeBigEndian64(key.data() + key.size() - kSeqSize);
  std::string_view path = key.substr(0, key.size() - 2 - kSeqSize);
  m->path.assign(path);
  std::replace(m->path.begin(), m->path.end(), '\0', '/');
  m->shard = ShardId{static_cast<uint32_t>(*seq >> 32)};
  m->type = static_cast<EntryType>(in[0]);
  const uint8_t flags = static_cast<uint8_t>(in[1]);
  m->is_hardlink = flags & kHardlink;
  m->has_checksum = flags & kChecksum;
  in.remove_prefix(2);
  uint64_t gen = 0, mode = 0, uid = 0, gid = 0, size = 0, offset = 0, header = 0, tlen = 0;
  if (!GetVarint64(&in, &gen) || !GetVarint64(&in, &mode) || !GetVarint64(&in, &uid) ||
      !GetVarint64(&in, &gid) || in.size() < 8) {
    return false;
  }
  m->mtime_ns = static_cast<int64_t>(DecodeFixed64(in.data()));
  in.remove_prefix(8);
  if (!GetVarint64(&in, &size) || !GetVarint64(&in, &offset) || in.size() < 8) return false;
  m->xxh3 = DecodeFixed64(in.data());
  in.remove_prefix(8);
  if (!GetVarint64(&in, &header) || !GetVarint64(&in, &tlen) || in.size() < tlen) return false;
  m->link_target.assign(in.substr(0, tlen));
  in.remove_prefix(tlen);
  *slice = 0;
  if (flags & kSlice) {
    if (!GetVarint64(&in, slice) || *slice >= kSliceMember) return false;
    ++*slice;
  }
  *generation = static_cast<uint32_t>(gen);
  m->mode = static_cast<uint32_t>(mode);
  m->uid = static_cast<uint32_t>(uid);
  m->gid = static_cast<uint32_t>(gid);
  m->size = size;
  m->offset = offset;
  m->header_offset = header;
  extents->clear();
  // The record's tail: an extent list or an encoded member's trailer.
  if (flags & (kSparse | kEncoded)) extents->assign(in);
  return true;
}

// The path key of the root.
constexpr std::string_view kRootKey("\0\0", 2);

// Whether path key `key` is below the directory whose path key is `dir`:
// `dir`'s path, then '/' (0), then a byte of a name (never 0).
bool KeyBelow(std::string_view key, std::string_view dir) {
  const std::string_view prefix = dir.substr(0, dir.size() - 1);
  return key.size() > prefix.size() && key.starts_with(prefix) && key[prefix.size()] != '\0';
}

bool IsAncestorOrSelf(std::string_view dir, std::string_view path) {
  return dir.empty() || path == dir ||
         (path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/');
}

// What a member costs in a chunk: itself (twice while the chunk is put in
// archive order), its strings, and the tree builder's names, objects, nodes
// and tables for it (measured: about 350 bytes).
size_t ChunkCost(const MemberEntry& m) {
  return 2 * sizeof(MemberEntry) + m.path.capacity() + m.link_target.capacity() + 350;
}

// The first few examples by archive position.
class Examples {
 public:
  void Offer(uint64_t seq, std::string text) {
    if (items_.size() == kReportExamples && seq >= items_.back().first) return;
    items_.emplace_back(seq, std::move(text));
    std::sort(items_.begin(), items_.end());
    if (items_.size() > kReportExamples) items_.pop_back();
  }
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    for (auto& [seq, text] : items_) out.push_back(std::move(text));
    return out;
  }

 private:
  std::vector<std::pair<uint64_t, std::string>> items_;
};

}  // namespace

// Joins the chunks' trees into the keys of one tree (see the header).
class TreeJoiner {
 public:
  // Directories' 'I' keys go to `dir_inodes`, the others' to `inodes` (in
  // inode order: their runs need no sort).
  TreeJoiner(const std::vector<ShardMeta>& shards, RunWriter* dirents, RunWriter* inodes,
             RunWriter* dir_inodes)
      : shards_(shards),
        dirents_(dirents),
        inodes_(inodes),
        dir_inodes_(dir_inodes),
        shard_bytes_(shards.size(), 0) {}

  // Replays a chunk (members in tree order, `seqs` their archive positions)
  // and adds its tree.
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
  Status Finish() {
    while (!stack_.empty()) SHARDFS_RETURN_IF_ERROR(Pop());
    counts_.max_inode = next_inode_ - 1;
    return Status::Ok();
  }

  WriteStats Stats() {
    WriteStats stats;
    stats.files = counts_.files;
    stats.dirs = counts_.dirs;
    stats.synthesized_dirs = counts_.implied_dirs;
    stats.symlinks = counts_.symlinks;
    stats.hardlinks = counts_.hardlinks;
    stats.bytes = counts_.bytes;
    stats.replaced = replaced_;
    stats.replaced_examples = replaced_examples_.Take();
    stats.dropped = dropped_;
    stats.dropped_examples = dropped_examples_.Take();
    return stats;
  }
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

  Status Put(RunWriter* w, std::string_view key, const EntryRecord& rec) {
    EncodeEntry(rec, &value_);
    return w->Add(key, value_);
  }
  Status PutDirent(uint64_t parent, std::string_view path, const EntryRecord& rec) {
    return Put(dirents_, EncodeDirentKey(kDefaultView, InodeId{parent}, BaseName(path), dkey_),
               rec);
  }
  Status PutInode(const EntryRecord& rec) {
    return Put(rec.type == EntryType::kDir ? dir_inodes_ : inodes_,
               EncodeInodeKey(kDefaultView, rec.inode, ikey_), rec);
  }
  void ChildMtime(int64_t mtime_ns) {
    OpenDir& parent = stack_.back();
    if (parent.implied) parent.mtime_ns = std::max(parent.mtime_ns, mtime_ns);
  }
  // Closes the innermost open directory: its keys, now that its link
  // count and mtime are known.
  Status Pop() {
    OpenDir d = std::move(stack_.back());
    stack_.pop_back();
    d.rec.nlink = d.nlink;
    if (d.implied) d.rec.mtime_ns = d.mtime_ns == INT64_MIN ? 0 : d.mtime_ns;
    SHARDFS_RETURN_IF_ERROR(PutInode(d.rec));
    if (stack_.empty()) return Status::Ok();  // The root has no name.
    SHARDFS_RETURN_IF_ERROR(PutDirent(d.parent_inode, d.path, d.rec));
    ChildMtime(d.implied ? d.mtime_ns : d.rec.mtime_ns);
    return Status::Ok();
  }

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

Status TreeJoiner::AddChunk(std::vector<MemberEntry>* members_ptr, std::vector<uint64_t>* seqs_ptr,
                            SparseExtents* extents) {
  std::vector<MemberEntry>& members = *members_ptr;
  std::vector<uint64_t>& seqs = *seqs_ptr;
  // The tree builder replays in the order it is given: archive order (a
  // chunk of a shard written in tree order is in it already).
  if (!std::is_sorted(seqs.begin(), seqs.end())) SortByArchiveOrder(&members, &seqs, extents);
  return AddTree(members, seqs, *extents);
}

void TreeJoiner::SortByArchiveOrder(std::vector<MemberEntry>* members_ptr,
                                    std::vector<uint64_t>* seqs_ptr, SparseExtents* extents) {
  std::vector<MemberEntry>& members = *members_ptr;
  std::vector<uint64_t>& seqs = *seqs_ptr;
  std::vector<uint32_t> order(members.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return seqs[a] < seqs[b]; });
  {
    std::vector<MemberEntry> by_seq;
    by_seq.reserve(members.size());
    std::vector<uint64_t> seq_by_seq;
    seq_by_seq.reserve(members.size());
    SparseExtents ext_by_seq;
    for (uint32_t k = 0; k < order.size(); ++k) {
      by_seq.push_back(std::move(members[order[k]]));
      seq_by_seq.push_back(seqs[order[k]]);
      if (!extents->empty()) {
        auto it = extents->find(order[k]);
        if (it != extents->end()) ext_by_seq[k] = std::move(it->second);
      }
    }
    members.swap(by_seq);
    seqs.swap(seq_by_seq);
    extents->swap(ext_by_seq);
  }
}

Status TreeJoiner::AddTree(const std::vector<MemberEntry>& members,
                           const std::vector<uint64_t>& seqs, const SparseExtents& extents_ref) {
  const SparseExtents* extents = &extents_ref;
  const Tree tree = BuildTree(members);

  // The report: counts, and examples by archive position.
  replaced_ += tree.report.replaced;
  for (size_t k = 0; k < tree.report.replaced_examples.size(); ++k) {
    replaced_examples_.Offer(seqs[tree.report.replaced_example_members[k]],
                             tree.report.replaced_examples[k]);
  }
  dropped_ += tree.report.refusals.size();
  for (const Refusal& refusal : tree.report.refusals) {
    const MemberEntry& m = members[refusal.member];
    const std::string shard =
        m.shard.value < shards_.size() ? RedactLocation(shards_[m.shard.value].path) : "?";
    dropped_examples_.Offer(seqs[refusal.member],
                            fmt::format("shard {}: member '{}' at byte {}: {}", shard, m.path,
                                        m.header_offset, refusal.reason));
  }

  const TreeEmitter emitter(tree, members, *extents);
  const HugeVector<TreeNode>& nodes = tree.nodes;
  std::vector<uint64_t> inode_of(nodes.size(), 0);  // Global inodes of this chunk's nodes.
  for (size_t k = 0; k < nodes.size(); ++k) {
    const TreeNode& n = nodes[k];
    if (!stack_.empty() && IsAncestorOrSelf(n.path, stack_.back().path)) {
      // A directory an earlier chunk opened (this chunk implied it again).
      auto open = std::find_if(stack_.rbegin(), stack_.rend(),
                               [&](const OpenDir& d) { return d.path == n.path; });
      if (open == stack_.rend()) {
        return Status::Corruption(fmt::format("bounded build: '{}' is not open", n.path));
      }
      inode_of[k] = open->inode;
      continue;
    }
    while (!stack_.empty() && !IsAncestorOrSelf(stack_.back().path, n.path)) {
      SHARDFS_RETURN_IF_ERROR(Pop());
    }
    if (k > 0 && stack_.empty()) {
      return Status::Corruption(fmt::format("bounded build: '{}' has no open parent", n.path));
    }
    const uint64_t parent_inode = stack_.empty() ? kRootInode.value : stack_.back().inode;
    if (n.hardlink) {
      EntryRecord rec = emitter.Record(n);
      rec.inode = InodeId{inode_of[n.link_node]};
      rec.parent = InodeId{inode_of[nodes[n.link_node].parent_node]};
      SHARDFS_RETURN_IF_ERROR(PutDirent(parent_inode, n.path, rec));
      ChildMtime(rec.mtime_ns);
      ++counts_.hardlinks;
      continue;
    }
    const uint64_t inode = next_inode_++;
    inode_of[k] = inode;
    EntryRecord rec = emitter.Record(n);
    rec.inode = InodeId{inode};
    rec.parent = InodeId{parent_inode};
    if (n.type == EntryType::kDir) {
      if (!stack_.empty()) ++stack_.back().nlink;
      ++counts_.dirs;
      if (n.member == kImplied) ++counts_.implied_dirs;
      OpenDir d;
      d.path.assign(n.path);
      d.inode = inode;
      d.parent_inode = parent_inode;
      d.implied = n.member == kImplied;
      d.mtime_ns = d.implied ? INT64_MIN : rec.mtime_ns;
      d.rec = std::move(rec);
      stack_.push_back(std::move(d));
      continue;
    }
    if (n.type == EntryType::kSymlink) ++counts_.symlinks;
    if (n.type == EntryType::kFile) {
      ++counts_.files;
      counts_.bytes += rec.size;
      if (!members[n.member].has_checksum) all_checksummed_ = false;
      if (rec.flags & kEntrySparse) any_sparse_ = true;
      if (rec.flags & kEntryEncoded) any_encoded_ = true;
      if (rec.shard.value < shard_bytes_.size()) shard_bytes_[rec.shard.value] += StoredBytes(rec);
    }
    SHARDFS_RETURN_IF_ERROR(PutInode(rec));
    SHARDFS_RETURN_IF_ERROR(PutDirent(parent_inode, n.path, rec));
    ChildMtime(rec.mtime_ns);
  }
  return Status::Ok();
}

void MemberSpiller::BeginShard(ShardId shard) {
  shard_ = shard;
  generation_ = 0;
  next_ = 0;
}

void MemberSpiller::RestartShard() {
  ++generation_;
  next_ = 0;
  owner_->NoteRestart(shard_, generation_);
}

Status MemberSpiller::Add(const MemberEntry& m, const std::vector<Extent>* extents,
                          std::string_view encoded) {
  key_.clear();
  AppendPathKey(m.path, &key_);
  const size_t path_key = key_.size();
  key_.resize(path_key + kSeqSize);
  EncodeBigEndian64(key_.data() + path_key, Seq(shard_, next_++));
  if (m.is_hardlink) {
    // From the first of the two paths to the end of the target's subtree:
    // whether the target is there, and what it is, may depend on what is
    // below it (a directory with entries refuses the link for that reason).
    std::string target = PathKey(m.link_target);
    std::string self = key_.substr(0, path_key);
    std::string target_end = target.substr(0, target.size() - 2) + '\x01';
    owner_->NoteLink(std::min(self, target), std::max(self, target_end));
  }
  EncodeMember(m, generation_, extents, encoded, &value_);
  return runs_.Add(key_, value_);
}

Result<std::unique_ptr<BoundedIndexWriter>> BoundedIndexWriter::Create(const std::string& out_path,
                                                                       uint64_t memory,
                                                                       int spillers) {
  SHARDFS_ASSIGN_OR_RETURN(const fs::path out_abs, AbsoluteIndexPath(out_path));
  RemoveStaleBuildDirs(out_abs);
  const std::string dir = TempPathBeside(out_abs.string());
  SHARDFS_RETURN_IF_ERROR(MakeTempDir(dir));
  // What the program takes before any member (code, RocksDB, libarchive:
  // about 40 MB resident) comes out of the budget first.
  constexpr uint64_t kBaseline = uint64_t{40} << 20;
  memory = memory >= 2 * kBaseline ? memory - kBaseline : memory / 2;
  std::unique_ptr<BoundedIndexWriter> w(new BoundedIndexWriter(dir, memory));
  // Three eighths of the budget for the scanning threads' runs (their
  // windows of the shards and their allocations take some more).
  const size_t per_spiller = static_cast<size_t>(memory * 3 / 8 / std::max(1, spillers));
  for (int i = 0; i < std::max(1, spillers); ++i) {
    w->spillers_.emplace_back(new MemberSpiller(
        w.get(), RunWriter(dir, fmt::format("members-{}", i), per_spiller, &w->run_counter_)));
  }
  return w;
}

BoundedIndexWriter::~BoundedIndexWriter() { RemoveBuildDir(dir_); }

ShardId BoundedIndexWriter::AddShard(ShardMeta meta) {
  shards_.push_back(std::move(meta));
  return ShardId{static_cast<uint32_t>(shards_.size() - 1)};
}

void BoundedIndexWriter::AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs) {
  seek_kvs_.insert(seek_kvs_.end(), std::make_move_iterator(kvs.begin()),
                   std::make_move_iterator(kvs.end()));
}

void BoundedIndexWriter::NoteLink(std::string lo, std::string hi) {
  std::lock_guard<std::mutex> lock(mu_);
  link_spans_.emplace_back(std::move(lo), std::move(hi));
}

void BoundedIndexWriter::NoteRestart(ShardId shard, uint32_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  generations_[shard.value] = generation;
}

Result<WriteStats> BoundedIndexWriter::Finish(const std::string& out_path,
                                              const WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckOutputPath(out_path, options.force));
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("bounded build: {} at {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  std::vector<std::string> member_runs;
  for (auto& s : spillers_) {
    SHARDFS_RETURN_IF_ERROR(s->runs_.Flush());
    member_runs.insert(member_runs.end(), s->runs_.runs().begin(), s->runs_.runs().end());
  }
  // Runs sort equal keys by run order; keys are unique (archive positions),
  // so the order of the runs does not matter.
  std::sort(link_spans_.begin(), link_spans_.end());

  // The rest of the budget: a quarter for a chunk, an eighth for the 'D'
  // keys and as much for the 'I' keys, a sixteenth for the merges' read
  // buffers.
  const size_t chunk_budget = static_cast<size_t>(memory_ / 4);
  const size_t read_buffer =
      std::clamp<size_t>(static_cast<size_t>(memory_ / 16 / 64), 16 << 10, 1 << 20);
  RunWriter dirents(dir_, "dirents", static_cast<size_t>(memory_ / 8), &run_counter_);
  RunWriter inodes(dir_, "inodes", static_cast<size_t>(memory_ / 16), &run_counter_);
  RunWriter dir_inodes(dir_, "dir-inodes", static_cast<size_t>(memory_ / 16), &run_counter_);
  TreeJoiner joiner(shards_, &dirents, &inodes, &dir_inodes);

  std::vector<MemberEntry> chunk;
  std::vector<uint64_t> seqs;
  SparseExtents extents;
  size_t chunk_cost = 0;
  auto flush_chunk = [&]() -> Status {
    if (chunk.empty()) return Status::Ok();
    ++chunks_;
    largest_chunk_ = std::max(largest_chunk_, chunk.size());
    SHARDFS_RETURN_IF_ERROR(joiner.AddChunk(&chunk, &seqs, &extents));
    chunk.clear();
    seqs.clear();
    extents.clear();
    chunk_cost = 0;
    return Status::Ok();
  };

  std::string current;                 // The path key (no position) of the last member.
  bool current_plain = true;           // Whether every member of it so far is a directory.
  std::vector<std::string> not_plain;  // Open paths that are not plain (path keys).
  size_t next_span = 0;
  std::string span_end;  // The last path key a hard link met so far reaches.
  MemberEntry m;
  std::string sparse;
  Status merged = MergeRuns(
      member_runs,
      [&](std::string_view key, std::string_view value) -> Status {
        uint32_t generation = 0;
        uint64_t seq = 0, slice = 0;
        if (!DecodeMember(key, value, &m, &generation, &seq, &sparse, &slice)) {
          return Status::IoError(fmt::format("{}: a spilled member is damaged", dir_));
        }
        if (!generations_.empty()) {
          auto it = generations_.find(m.shard.value);
          if (generation != (it == generations_.end() ? 0 : it->second)) return Status::Ok();
        }
        if (slice != 0) {
          auto it = slice_ids_.find(m.shard.value);
          if (it == slice_ids_.end()) {
            return Status::IoError(
                fmt::format("{}: a spilled member of a slice of shard {} with no slice ids", dir_,
                            m.shard.value));
          }
          m.shard = ShardId{static_cast<uint32_t>(it->second + slice - 1)};
        }
        const std::string_view path_key = key.substr(0, key.size() - kSeqSize);
        if (path_key != current) {
          // The members of `current` are all in: may the chunk end here?
          if (!current.empty() && !current_plain && current != kRootKey) {
            not_plain.push_back(current);
          }
          while (!not_plain.empty() && !KeyBelow(path_key, not_plain.back())) {
            not_plain.pop_back();
          }
          while (next_span < link_spans_.size() && link_spans_[next_span].first <= current) {
            span_end = std::max(span_end, link_spans_[next_span].second);
            ++next_span;
          }
          if (chunk_cost >= chunk_budget && not_plain.empty() && span_end < path_key) {
            SHARDFS_RETURN_IF_ERROR(flush_chunk());
          }
          current.assign(path_key);
          current_plain = true;
        }
        if (m.type != EntryType::kDir || m.is_hardlink) current_plain = false;
        if (static_cast<uint8_t>(value[1]) & (kSparse | kEncoded)) {
          extents[static_cast<uint32_t>(chunk.size())] = sparse;
        }
        chunk_cost += ChunkCost(m);
        seqs.push_back(seq);
        chunk.push_back(std::move(m));
        m = MemberEntry{};
        return Status::Ok();
      },
      read_buffer, dir_, "members");
  SHARDFS_RETURN_IF_ERROR(merged);
  SHARDFS_RETURN_IF_ERROR(flush_chunk());
  SHARDFS_RETURN_IF_ERROR(joiner.Finish());
  SHARDFS_RETURN_IF_ERROR(dirents.Flush());
  SHARDFS_RETURN_IF_ERROR(inodes.Flush());
  SHARDFS_RETURN_IF_ERROR(dir_inodes.Flush());
  std::vector<std::string> inode_runs = inodes.runs();
  inode_runs.insert(inode_runs.end(), dir_inodes.runs().begin(), dir_inodes.runs().end());
  phase("tree joined");
  for (const std::string& run : member_runs) ::unlink(run.c_str());

  WriteStats stats = joiner.Stats();
  SHARDFS_ASSIGN_OR_RETURN(const fs::path out_abs, AbsoluteIndexPath(out_path));
  SHARDFS_ASSIGN_OR_RETURN(KeyValues small_kvs, ShardKeys(shards_, out_abs.parent_path().string()));
  for (auto& kv : MetaKeysOf(joiner.counts(), joiner.all_checksummed(), joiner.any_sparse(),
                             MetaText{options.build_options, options.created_by, options.partition,
                                      options.partition_shards, AnyCodec(shards_, seek_kvs_),
                                      AnyBzip2(shards_), AnySlice(shards_)},
                             joiner.any_encoded())) {
    small_kvs.push_back(std::move(kv));
  }
  std::sort(small_kvs.begin(), small_kvs.end());
  std::sort(seek_kvs_.begin(), seek_kvs_.end());
  auto merge_into = [&](const std::vector<std::string>& runs, const char* prefix,
                        const KvSink& put) {
    return MergeRuns(runs, put, read_buffer, dir_, prefix);
  };
  SHARDFS_ASSIGN_OR_RETURN(
      stats.index_bytes,
      PublishTree(
          out_path, out_abs,
          [&](const KvSink& put) { return merge_into(dirents.runs(), "dirents", put); },
          [&](const KvSink& put) { return merge_into(inode_runs, "inodes", put); }, small_kvs,
          joiner.shard_bytes(), seek_kvs_));
  phase("published");
  log::Debug("bounded build: {} chunks, the largest {} members", chunks_, largest_chunk_);
  return stats;
}

uint64_t DefaultBuildMemory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t ram = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
  return std::clamp<uint64_t>(ram / 4, uint64_t{256} << 20, uint64_t{4} << 30);
}

}  // namespace shardfs::index
