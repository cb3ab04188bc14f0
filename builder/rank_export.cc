#include "builder/rank_export.h"

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

Result<RankExportStats> ExportIndex(const index::IndexReader& reader, const std::string& out,
                                    const index::WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(index::CheckOutputPath(out, options.force));
  index::IndexWriter writer;
  RankExportStats stats;
  // Source shard id -> the export's, given on first use.
  std::vector<int64_t> shard_of(reader.shards().size(), -1);
  auto shard = [&](index::ShardId id) {
    if (shard_of[id.value] < 0) {
      index::ShardMeta meta = reader.shards()[id.value];
      meta.path = reader.ShardPath(id);  // Resolved; the writer makes it relative again.
      meta.flags &= static_cast<uint8_t>(~index::kShardPathRelative);
      shard_of[id.value] = writer.AddShard(std::move(meta)).value;
      ++stats.shards;
    }
    return index::ShardId{static_cast<uint32_t>(shard_of[id.value])};
  };
  // The root's own mode, owner and mtime: a member with the empty path.
  {
    EntryRecord root;
    index::RecordHolder holder;
    SHARDFS_RETURN_IF_ERROR(reader.GetInode(index::kRootInode, &root, &holder));
    index::MemberEntry m;
    m.type = EntryType::kDir;
    m.mode = root.mode & 07777;
    m.uid = root.uid;
    m.gid = root.gid;
    m.mtime_ns = root.mtime_ns;
    writer.AddMember(std::move(m));
  }
  // Later names of a hard-linked file or symlink: its first path.
  std::unordered_map<uint64_t, std::string> first_path;
  std::vector<std::pair<InodeId, std::string>> stack{{index::kRootInode, ""}};
  Status failed;
  while (!stack.empty()) {
    InodeId dir = stack.back().first;
    std::string dir_path = std::move(stack.back().second);
    stack.pop_back();
    std::vector<std::pair<InodeId, std::string>> subdirs;
    Status s = reader.ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& rec) {
      index::MemberEntry m;
      m.path = dir_path.empty() ? std::string(name) : dir_path + "/" + std::string(name);
      m.type = rec.type;
      m.mode = rec.mode & 07777;
      m.uid = rec.uid;
      m.gid = rec.gid;
      m.mtime_ns = rec.mtime_ns;
      ++stats.entries;
      if (rec.type != EntryType::kDir && rec.nlink > 1) {
        auto [it, first] = first_path.emplace(rec.inode.value, m.path);
        if (!first) {
          m.is_hardlink = true;
          m.link_target = it->second;
          writer.AddMember(std::move(m));
          return true;
        }
      }
      if (rec.type == EntryType::kDir) {
        subdirs.emplace_back(rec.inode, m.path);
      } else if (rec.type == EntryType::kSymlink) {
        m.link_target = std::string(rec.target);
      } else {
        Status range = reader.CheckFileRange(rec);
        if (!range.ok()) {
          failed = range;
          return false;
        }
        m.size = rec.size;
        m.shard = shard(rec.shard);
        m.offset = rec.offset;
        m.has_checksum = rec.has_checksum();
        m.xxh3 = rec.xxh3;
        if (rec.sparse()) {
          std::vector<index::Extent> extents;
          for (size_t i = 0; i < index::ExtentCount(rec); ++i) {
            extents.push_back(index::GetExtent(rec, i));
          }
          writer.AddSparseMember(std::move(m), extents);
          return true;
        }
        if (rec.encoded()) {
          writer.SetEncoded(writer.member_count(), rec.encoding);
        }
      }
      writer.AddMember(std::move(m));
      return true;
    });
    SHARDFS_RETURN_IF_ERROR(s);
    SHARDFS_RETURN_IF_ERROR(failed);
    // Depth first, in name order: a directory's member before its entries.
    stack.insert(stack.end(), std::make_move_iterator(subdirs.rbegin()),
                 std::make_move_iterator(subdirs.rend()));
  }
  ++stats.entries;  // The root.
  // A compressed shard's seek keys (its table, windows and whatever else is
  // kept under 'Z' shard), under the shard's id in the export.
  std::vector<std::pair<std::string, std::string>> seek;
  for (uint32_t id = 0; id < shard_of.size(); ++id) {
    if (shard_of[id] < 0 || reader.shards()[id].codec() == index::Codec::kNone) continue;
    const std::string prefix =
        index::EncodeSeekKeyPrefix(index::ShardId{static_cast<uint32_t>(shard_of[id])});
    SHARDFS_RETURN_IF_ERROR(reader.ForEachSeekKey(
        index::ShardId{id}, [&](std::string_view suffix, std::string_view value) {
          seek.emplace_back(prefix + std::string(suffix), std::string(value));
          return true;
        }));
  }
  writer.AddSeekKeys(std::move(seek));
  SHARDFS_ASSIGN_OR_RETURN(stats.written, writer.Finish(out, options));
  return stats;
}

}  // namespace shardfs::builder
