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
#include "index/tree_joiner.h"
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

// What a member costs in a chunk: itself (twice while the chunk is put in
// archive order), its strings, and the tree builder's names, objects, nodes
// and tables for it (measured: about 350 bytes).
size_t ChunkCost(const MemberEntry& m) {
  return 2 * sizeof(MemberEntry) + m.path.capacity() + m.link_target.capacity() + 350;
}

// Where the members' stream, in tree order, may be cut into chunks (see the
// header): between two paths, where no path open above the cut is not
// plain and no hard link's span reaches across it.
class ChunkCutter {
 public:
  // `link_spans`: the hard links' spans, sorted; must outlive the cutter.
  explicit ChunkCutter(const std::vector<std::pair<std::string, std::string>>& link_spans)
      : link_spans_(link_spans) {}

  // Takes the next member `m`, of path key `path_key`. Returns true if the
  // chunk so far may, and `over_budget` says should, end before it.
  bool Next(std::string_view path_key, const MemberEntry& m, bool over_budget) {
    bool cut = false;
    if (path_key != current_) {
      // The members of `current_` are all in: may the chunk end here?
      if (!current_.empty() && !current_plain_ && current_ != kRootKey) {
        not_plain_.push_back(current_);
      }
      while (!not_plain_.empty() && !KeyBelow(path_key, not_plain_.back())) {
        not_plain_.pop_back();
      }
      while (next_span_ < link_spans_.size() && link_spans_[next_span_].first <= current_) {
        span_end_ = std::max(span_end_, link_spans_[next_span_].second);
        ++next_span_;
      }
      cut = over_budget && not_plain_.empty() && span_end_ < path_key;
      current_.assign(path_key);
      current_plain_ = true;
    }
    if (m.type != EntryType::kDir || m.is_hardlink) current_plain_ = false;
    return cut;
  }

 private:
  const std::vector<std::pair<std::string, std::string>>& link_spans_;
  std::string current_;                 // The path key (no position) of the last member.
  bool current_plain_ = true;           // Whether every member of it so far is a directory.
  std::vector<std::string> not_plain_;  // Open paths that are not plain (path keys).
  size_t next_span_ = 0;
  std::string span_end_;  // The last path key a hard link met so far reaches.
};

}  // namespace

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

Result<std::vector<std::string>> BoundedIndexWriter::FlushSpillers() {
  std::vector<std::string> member_runs;
  for (auto& s : spillers_) {
    SHARDFS_RETURN_IF_ERROR(s->runs_.Flush());
    member_runs.insert(member_runs.end(), s->runs_.runs().begin(), s->runs_.runs().end());
  }
  // Runs sort equal keys by run order; keys are unique (archive positions),
  // so the order of the runs does not matter.
  return member_runs;
}

Status BoundedIndexWriter::ReadSpilled(std::string_view key, std::string_view value, MemberEntry* m,
                                       uint64_t* seq, std::string* sparse, bool* current) const {
  uint32_t generation = 0;
  uint64_t slice = 0;
  if (!DecodeMember(key, value, m, &generation, seq, sparse, &slice)) {
    return Status::IoError(fmt::format("{}: a spilled member is damaged", dir_));
  }
  *current = true;
  if (!generations_.empty()) {
    auto it = generations_.find(m->shard.value);
    if (generation != (it == generations_.end() ? 0 : it->second)) {
      *current = false;
      return Status::Ok();
    }
  }
  if (slice != 0) {
    auto it = slice_ids_.find(m->shard.value);
    if (it == slice_ids_.end()) {
      return Status::IoError(fmt::format(
          "{}: a spilled member of a slice of shard {} with no slice ids", dir_, m->shard.value));
    }
    m->shard = ShardId{static_cast<uint32_t>(it->second + slice - 1)};
  }
  return Status::Ok();
}

Status BoundedIndexWriter::JoinMembers(const std::vector<std::string>& member_runs,
                                       size_t read_buffer, TreeJoiner* joiner) {
  std::sort(link_spans_.begin(), link_spans_.end());
  // The rest of the budget (see Finish): a quarter for a chunk.
  const size_t chunk_budget = static_cast<size_t>(memory_ / 4);
  std::vector<MemberEntry> chunk;
  std::vector<uint64_t> seqs;
  SparseExtents extents;
  size_t chunk_cost = 0;
  auto flush_chunk = [&]() -> Status {
    if (chunk.empty()) return Status::Ok();
    ++chunks_;
    largest_chunk_ = std::max(largest_chunk_, chunk.size());
    SHARDFS_RETURN_IF_ERROR(joiner->AddChunk(&chunk, &seqs, &extents));
    chunk.clear();
    seqs.clear();
    extents.clear();
    chunk_cost = 0;
    return Status::Ok();
  };

  ChunkCutter cutter(link_spans_);
  MemberEntry m;
  std::string sparse;
  Status merged = MergeRuns(
      member_runs,
      [&](std::string_view key, std::string_view value) -> Status {
        uint64_t seq = 0;
        bool current = false;
        SHARDFS_RETURN_IF_ERROR(ReadSpilled(key, value, &m, &seq, &sparse, &current));
        if (!current) return Status::Ok();  // A scan that started over since.
        const std::string_view path_key = key.substr(0, key.size() - kSeqSize);
        if (cutter.Next(path_key, m, chunk_cost >= chunk_budget)) {
          SHARDFS_RETURN_IF_ERROR(flush_chunk());
        }
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
  return flush_chunk();
}

Result<uint64_t> BoundedIndexWriter::Publish(const std::string& out_path,
                                             const WriteOptions& options, const TreeJoiner& joiner,
                                             const std::vector<std::string>& dirent_runs,
                                             const std::vector<std::string>& inode_runs,
                                             size_t read_buffer) {
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
  return PublishTree(
      out_path, out_abs, [&](const KvSink& put) { return merge_into(dirent_runs, "dirents", put); },
      [&](const KvSink& put) { return merge_into(inode_runs, "inodes", put); }, small_kvs,
      joiner.shard_bytes(), seek_kvs_);
}

Result<WriteStats> BoundedIndexWriter::Finish(const std::string& out_path,
                                              const WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckOutputPath(out_path, options.force));
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("bounded build: {} at {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  SHARDFS_ASSIGN_OR_RETURN(const std::vector<std::string> member_runs, FlushSpillers());

  // The rest of the budget: a quarter for a chunk (JoinMembers), an eighth
  // for the 'D' keys and as much for the 'I' keys, a sixteenth for the
  // merges' read buffers.
  const size_t read_buffer =
      std::clamp<size_t>(static_cast<size_t>(memory_ / 16 / 64), 16 << 10, 1 << 20);
  RunWriter dirents(dir_, "dirents", static_cast<size_t>(memory_ / 8), &run_counter_);
  RunWriter inodes(dir_, "inodes", static_cast<size_t>(memory_ / 16), &run_counter_);
  RunWriter dir_inodes(dir_, "dir-inodes", static_cast<size_t>(memory_ / 16), &run_counter_);
  TreeJoiner joiner(shards_, &dirents, &inodes, &dir_inodes);
  SHARDFS_RETURN_IF_ERROR(JoinMembers(member_runs, read_buffer, &joiner));
  SHARDFS_RETURN_IF_ERROR(joiner.Finish());
  SHARDFS_RETURN_IF_ERROR(dirents.Flush());
  SHARDFS_RETURN_IF_ERROR(inodes.Flush());
  SHARDFS_RETURN_IF_ERROR(dir_inodes.Flush());
  std::vector<std::string> inode_runs = inodes.runs();
  inode_runs.insert(inode_runs.end(), dir_inodes.runs().begin(), dir_inodes.runs().end());
  phase("tree joined");
  for (const std::string& run : member_runs) ::unlink(run.c_str());

  WriteStats stats = joiner.Stats();
  SHARDFS_ASSIGN_OR_RETURN(stats.index_bytes, Publish(out_path, options, joiner, dirents.runs(),
                                                      inode_runs, read_buffer));
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
