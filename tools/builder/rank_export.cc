#include "tools/builder/rank_export.h"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardfs::builder {

using index::EntryRecord;
using index::EntryType;
using index::InodeId;

namespace {

// One export: the writer it fills and what it has given ids so far.
class RankExporter {
 public:
  explicit RankExporter(const index::IndexReader& reader)
      : reader_(reader), shard_of_(reader.shards().size(), -1) {}

  // The root's own mode, owner and mtime: a member with the empty path.
  Status AddRoot() {
    EntryRecord root;
    index::RecordHolder holder;
    SHARDFS_RETURN_IF_ERROR(reader_.GetInode(index::kRootInode, &root, &holder));
    index::MemberEntry m;
    m.type = EntryType::kDir;
    m.mode = root.mode & 07777;
    m.uid = root.uid;
    m.gid = root.gid;
    m.mtime_ns = root.mtime_ns;
    writer_.AddMember(std::move(m));
    return Status::Ok();
  }

  // Every entry below the root, depth first, in name order: a directory's
  // member before its entries.
  Status AddTree() {
    std::vector<std::pair<InodeId, std::string>> stack{{index::kRootInode, ""}};
    while (!stack.empty()) {
      InodeId dir = stack.back().first;
      std::string dir_path = std::move(stack.back().second);
      stack.pop_back();
      std::vector<std::pair<InodeId, std::string>> subdirs;
      Status failed;
      Status s = reader_.ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& rec) {
        failed = AddEntry(dir_path, name, rec, &subdirs);
        return failed.ok();
      });
      SHARDFS_RETURN_IF_ERROR(s);
      SHARDFS_RETURN_IF_ERROR(failed);
      stack.insert(stack.end(), std::make_move_iterator(subdirs.rbegin()),
                   std::make_move_iterator(subdirs.rend()));
    }
    ++stats_.entries;  // The root.
    return Status::Ok();
  }

  // A compressed shard's seek keys (its table, windows and whatever else is
  // kept under 'Z' shard), under the shard's id in the export.
  Status CopySeekKeys() {
    std::vector<std::pair<std::string, std::string>> seek;
    for (uint32_t id = 0; id < shard_of_.size(); ++id) {
      if (shard_of_[id] < 0 || reader_.shards()[id].codec() == index::Codec::kNone) continue;
      const std::string prefix =
          index::EncodeSeekKeyPrefix(index::ShardId{static_cast<uint32_t>(shard_of_[id])});
      SHARDFS_RETURN_IF_ERROR(reader_.ForEachSeekKey(
          index::ShardId{id}, [&](std::string_view suffix, std::string_view value) {
            seek.emplace_back(prefix + std::string(suffix), std::string(value));
            return true;
          }));
    }
    writer_.AddSeekKeys(std::move(seek));
    return Status::Ok();
  }

  Result<RankExportStats> Finish(const std::string& out, const index::WriteOptions& options) {
    SHARDFS_ASSIGN_OR_RETURN(stats_.written, writer_.Finish(out, options));
    return stats_;
  }

 private:
  // The export's id of source shard `id`, given on first use.
  index::ShardId Shard(index::ShardId id) {
    if (shard_of_[id.value] < 0) {
      index::ShardMeta meta = reader_.shards()[id.value];
      meta.path = reader_.ShardPath(id);  // Resolved; the writer makes it relative again.
      meta.flags &= static_cast<uint8_t>(~index::kShardPathRelative);
      shard_of_[id.value] = writer_.AddShard(std::move(meta)).value;
      ++stats_.shards;
    }
    return index::ShardId{static_cast<uint32_t>(shard_of_[id.value])};
  }

  // Adds entry `name` of the directory at `dir_path`: a later name of a
  // hard-linked file or symlink as a hard link to its first, a directory
  // also to *subdirs.
  Status AddEntry(const std::string& dir_path, std::string_view name, const EntryRecord& rec,
                  std::vector<std::pair<InodeId, std::string>>* subdirs) {
    index::MemberEntry m;
    m.path = dir_path.empty() ? std::string(name) : dir_path + "/" + std::string(name);
    m.type = rec.type;
    m.mode = rec.mode & 07777;
    m.uid = rec.uid;
    m.gid = rec.gid;
    m.mtime_ns = rec.mtime_ns;
    ++stats_.entries;
    if (rec.type != EntryType::kDir && rec.nlink > 1) {
      auto [it, first] = first_path_.emplace(rec.inode.value, m.path);
      if (!first) {
        m.is_hardlink = true;
        m.link_target = it->second;
        writer_.AddMember(std::move(m));
        return Status::Ok();
      }
    }
    if (rec.type == EntryType::kDir) {
      subdirs->emplace_back(rec.inode, m.path);
    } else if (rec.type == EntryType::kSymlink) {
      m.link_target = std::string(rec.target);
    } else {
      return AddFile(std::move(m), rec);
    }
    writer_.AddMember(std::move(m));
    return Status::Ok();
  }

  // Adds file `m` where `rec` says its bytes are.
  Status AddFile(index::MemberEntry m, const EntryRecord& rec) {
    SHARDFS_RETURN_IF_ERROR(reader_.CheckFileRange(rec));
    m.size = rec.size;
    m.shard = Shard(rec.shard);
    m.offset = rec.offset;
    m.has_checksum = rec.has_checksum();
    m.xxh3 = rec.xxh3;
    if (rec.sparse()) {
      std::vector<index::Extent> extents;
      for (size_t i = 0; i < index::ExtentCount(rec); ++i) {
        extents.push_back(index::GetExtent(rec, i));
      }
      writer_.AddSparseMember(std::move(m), extents);
      return Status::Ok();
    }
    if (rec.encoded()) writer_.SetEncoded(writer_.member_count(), rec.encoding);
    writer_.AddMember(std::move(m));
    return Status::Ok();
  }

  const index::IndexReader& reader_;
  index::IndexWriter writer_;
  RankExportStats stats_;
  // Source shard id -> the export's, -1 until used.
  std::vector<int64_t> shard_of_;
  // Later names of a hard-linked file or symlink: its first path.
  std::unordered_map<uint64_t, std::string> first_path_;
};

}  // namespace

Result<RankExportStats> ExportIndex(const index::IndexReader& reader, const std::string& out,
                                    const index::WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(index::CheckOutputPath(out, options.force));
  RankExporter exporter(reader);
  SHARDFS_RETURN_IF_ERROR(exporter.AddRoot());
  SHARDFS_RETURN_IF_ERROR(exporter.AddTree());
  SHARDFS_RETURN_IF_ERROR(exporter.CopySeekKeys());
  return exporter.Finish(out, options);
}

}  // namespace shardfs::builder
