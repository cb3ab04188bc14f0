#include "index/index_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include "base/log.h"
#include "base/strings.h"
#include "index/index_publish.h"
#include "index/tree_builder.h"
#include "index/tree_emitter.h"
#include "index/view_store.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

// The tree's counts and the replay's report as the build reports them.
WriteStats StatsOf(const Tree& tree, const std::vector<ShardMeta>& shards,
                   std::span<const MemberEntry> members) {
  WriteStats stats;
  const TreeCounts& c = tree.counts;
  stats.files = c.files;
  stats.dirs = c.dirs;
  stats.synthesized_dirs = c.implied_dirs;
  stats.symlinks = c.symlinks;
  stats.hardlinks = c.hardlinks;
  stats.bytes = c.bytes;
  stats.replaced = tree.report.replaced;
  stats.replaced_examples = tree.report.replaced_examples;
  stats.dropped = tree.report.refusals.size();
  for (const Refusal& refusal : tree.report.refusals) {
    if (stats.dropped_examples.size() >= kReportExamples) break;
    const MemberEntry& m = members[refusal.member];
    const std::string shard =
        m.shard.value < shards.size() ? RedactLocation(shards[m.shard.value].path) : "?";
    stats.dropped_examples.push_back(fmt::format("shard {}: member '{}' at byte {}: {}", shard,
                                                 m.path, m.header_offset, refusal.reason));
  }
  return stats;
}

}  // namespace

Status CheckOutputPath(const std::string& out_path, bool force) {
  struct stat st;
  if (::lstat(out_path.c_str(), &st) == 0 && !force) {
    return Status::AlreadyExists(
        fmt::format("{}: already exists (use --force to replace it)", out_path));
  }
  SHARDFS_ASSIGN_OR_RETURN(const fs::path out_abs, AbsoluteIndexPath(out_path));
  SHARDFS_RETURN_IF_ERROR(CheckReplaceable(out_path, out_abs));
  const fs::path parent = out_abs.parent_path();
  if (::access(parent.c_str(), W_OK) != 0) {
    return Status::FromErrno(errno,
                             fmt::format("{}: cannot write to {}", out_path, parent.string()));
  }
  return Status::Ok();
}

ShardId IndexWriter::AddShard(ShardMeta meta) {
  shards_.push_back(std::move(meta));
  return ShardId{static_cast<uint32_t>(shards_.size() - 1)};
}

void IndexWriter::AddMember(MemberEntry member) { members_.push_back(std::move(member)); }

void IndexWriter::AddSparseMember(MemberEntry member, const std::vector<Extent>& extents) {
  SetExtents(members_.size(), extents);
  members_.push_back(std::move(member));
}

void IndexWriter::AddMembers(HugeVector<MemberEntry>&& batch) {
  if (members_.empty() && batch.capacity() >= members_.capacity()) {
    members_.swap(batch);
    return;
  }
  members_.insert(members_.end(), std::make_move_iterator(batch.begin()),
                  std::make_move_iterator(batch.end()));
}

void IndexWriter::SetExtents(size_t member, const std::vector<Extent>& extents) {
  extents_[static_cast<uint32_t>(member)] = EncodeExtents(extents);
}

void IndexWriter::SetEncoded(size_t member, const EncodedMember& encoding) {
  extents_[static_cast<uint32_t>(member)] = EncodeEncodedTrailer(encoding);
}

void IndexWriter::AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs) {
  seek_kvs_.insert(seek_kvs_.end(), std::make_move_iterator(kvs.begin()),
                   std::make_move_iterator(kvs.end()));
}

Result<WriteStats> IndexWriter::Finish(const std::string& out_path, const WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckOutputPath(out_path, options.force));
  const auto start = std::chrono::steady_clock::now();
  const Tree tree = BuildTree(members_);
  WriteStats stats = StatsOf(tree, shards_, members_);

  SHARDFS_ASSIGN_OR_RETURN(const fs::path out_abs, AbsoluteIndexPath(out_path));
  SHARDFS_ASSIGN_OR_RETURN(KeyValues small_kvs, ShardKeys(shards_, out_abs.parent_path().string()));
  const TreeEmitter emitter(tree, members_, extents_);
  std::sort(seek_kvs_.begin(), seek_kvs_.end());
  for (auto& kv : emitter.MetaKeys(MetaText{
           options.build_options, options.created_by, options.partition, options.partition_shards,
           AnyCodec(shards_, seek_kvs_), AnyBzip2(shards_), AnySlice(shards_)})) {
    small_kvs.push_back(std::move(kv));
  }
  std::sort(small_kvs.begin(), small_kvs.end());
  // default@1's bytes per shard, for per-rank partitions of the full tree
  // ('V' 0 'B', in a table of its own: its key range is apart from the
  // versions' that views add later).
  std::vector<uint64_t> shard_bytes(shards_.size(), 0);
  for (const TreeNode& n : tree.nodes) {
    if (n.type != EntryType::kFile || n.hardlink) continue;
    const EntryRecord rec = emitter.Record(n);
    if (rec.shard.value < shard_bytes.size()) shard_bytes[rec.shard.value] += StoredBytes(rec);
  }
  SHARDFS_ASSIGN_OR_RETURN(
      stats.index_bytes,
      PublishTree(
          out_path, out_abs, [&](const KvSink& put) { return emitter.EmitDirents(put); },
          [&](const KvSink& put) { return emitter.EmitInodes(put); }, small_kvs, shard_bytes,
          seek_kvs_));
  log::Debug("index write: published at {:.3f}s",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return stats;
}

}  // namespace shardfs::index
