#include "tools/builder/index_add.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <span>
#include <thread>

#include "base/log.h"
#include "base/strings.h"
#include "index/index_publish.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/member_path.h"
#include "index/tree_builder.h"
#include "index/tree_emitter.h"

namespace shardfs::builder {
namespace fs = std::filesystem;
namespace {

using index::NodeId;
using index::VersionBuilder;

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What replaying `added` after the live tree of `tree` depends on: the
// entries at their paths and at their hard links' targets, the directories
// above them, and one child of each such directory (whether it is empty
// decides what replacing it does). Marks them in `relevant`.
void MarkRelevant(const VersionBuilder& tree, std::span<const index::MemberEntry> added,
                  std::vector<uint8_t>* relevant) {
  auto mark_path = [&](std::string_view path) {
    NodeId n = index::kRootNode;
    for (std::string_view comp : index::PathComponents(path)) {
      if (tree.type(n) != index::EntryType::kDir) return;
      n = tree.Child(n, comp);
      if (n == VersionBuilder::kNoNode) return;
      (*relevant)[n] = 1;
    }
    if (tree.type(n) == index::EntryType::kDir) {
      for (NodeId c : tree.children(n)) {
        if (tree.alive(c)) {
          (*relevant)[c] = 1;
          break;
        }
      }
    }
  };
  for (const index::MemberEntry& m : added) {
    mark_path(m.path);
    if (m.is_hardlink) mark_path(m.link_target);
  }
}

// The relevant part of the live tree of `tree` as archive members, in tree
// order (MarkRelevant). `node_of[m]` is member m's node; a later relevant
// name of an inode becomes a hard link to the first.
void Synthesize(const VersionBuilder& tree, const std::vector<uint8_t>& relevant,
                std::vector<index::MemberEntry>* members, index::SparseExtents* extents,
                std::vector<NodeId>* node_of) {
  std::unordered_map<uint64_t, std::string> first_name;  // Inodes with several names.
  std::string path;
  std::function<void(NodeId)> visit = [&](NodeId dir) {
    for (NodeId c : tree.children(dir)) {
      if (!relevant[c] || !tree.alive(c)) continue;
      const size_t len = path.size();
      if (!path.empty()) path.push_back('/');
      path.append(tree.name(c));
      const index::EntryRecord rec = tree.record(c);
      index::MemberEntry m;
      m.path = path;
      m.type = rec.type;
      m.mode = rec.mode & 07777;
      m.uid = rec.uid;
      m.gid = rec.gid;
      m.mtime_ns = rec.mtime_ns;
      m.size = rec.size;
      m.shard = rec.shard;
      m.offset = rec.offset;
      m.has_checksum = rec.has_checksum();
      m.xxh3 = rec.xxh3;
      if (rec.type == index::EntryType::kSymlink) m.link_target = rec.target;
      if (rec.type != index::EntryType::kDir && rec.nlink > 1) {
        auto [it, fresh] = first_name.emplace(rec.inode.value, path);
        if (!fresh) {
          m.is_hardlink = true;
          m.link_target = it->second;
        }
      }
      if (rec.sparse() && !m.is_hardlink) {
        (*extents)[static_cast<uint32_t>(members->size())] = std::string(rec.extents);
      }
      if (rec.encoded() && !m.is_hardlink) {
        (*extents)[static_cast<uint32_t>(members->size())] =
            index::EncodeEncodedTrailer(rec.encoding);
      }
      members->push_back(std::move(m));
      node_of->push_back(c);
      if (rec.type == index::EntryType::kDir) visit(c);
      path.resize(len);
    }
  };
  visit(index::kRootNode);
}

// Makes `tree` what the replayed `built` tree says: entries of members
// beyond `synthesized` are added or replace what was there; entries the
// replay dropped go.
Status Apply(const index::Tree& built, const index::TreeEmitter& emitter, size_t synthesized,
             const std::vector<NodeId>& node_of, VersionBuilder* tree) {
  std::vector<NodeId> node(built.nodes.size(), VersionBuilder::kNoNode);
  std::vector<uint8_t> present(tree->node_count(), 0);
  node[0] = index::kRootNode;
  present[index::kRootNode] = 1;
  for (size_t i = 1; i < built.nodes.size(); ++i) {
    const index::TreeNode& tn = built.nodes[i];
    const bool old = tn.member >= 0 && static_cast<size_t>(tn.member) < synthesized;
    const NodeId parent = node[tn.parent_node];
    const std::string_view name = index::BaseName(tn.path);
    if (tn.type == index::EntryType::kDir) {
      if (old) {
        node[i] = node_of[tn.member];
        present[node[i]] = 1;
        continue;
      }
      // An implied directory or one a new member describes: the existing
      // one stays (re-described), or a new one.
      NodeId d = tree->Child(parent, name);
      if (d != VersionBuilder::kNoNode && tree->type(d) == index::EntryType::kDir) {
        if (tn.member >= 0) tree->Redescribe(d, emitter.Record(tn));
      } else {
        // New, or in place of what the replay replaced.
        SHARDFS_ASSIGN_OR_RETURN(d, tree->AddEntry(parent, name, emitter.Record(tn)));
      }
      node[i] = d;
      if (d < present.size()) present[d] = 1;
      continue;
    }
    // A file or symlink. The replay names objects by their first name in
    // tree order, which may be a new hard link to an old file: the object
    // is old if its member is, and this name is old if it already names it.
    const NodeId object =
        tn.hardlink ? node[tn.link_node] : (old ? node_of[tn.member] : VersionBuilder::kNoNode);
    if (object != VersionBuilder::kNoNode) {
      const NodeId existing = tree->Child(parent, name);
      if (existing != VersionBuilder::kNoNode && tree->inode(existing) == tree->inode(object)) {
        node[i] = existing;
        if (existing < present.size()) present[existing] = 1;
        continue;
      }
    }
    const NodeId link_to = object;
    SHARDFS_ASSIGN_OR_RETURN(node[i], tree->AddEntry(parent, name, emitter.Record(tn), link_to));
  }
  // What the replay no longer has of what it was given (replaced, or
  // refused on top of a new member) goes, with whatever is below it.
  for (size_t m = 0; m < synthesized; ++m) {
    const NodeId n = node_of[m];
    if (!present[n] && tree->alive(n)) tree->Remove(n);
  }
  return Status::Ok();
}

// InvalidArgument if a new shard is one of the index's already.
Status CheckNotIndexed(const index::IndexReader& reader,
                       const std::vector<index::ShardMeta>& shards) {
  std::unordered_map<std::string, size_t> known;
  // A path by its canonical form, a URL as it is.
  auto canonical = [](const std::string& path, bool remote, std::string* out) {
    if (remote) {
      *out = path;
      return true;
    }
    std::error_code ec;
    *out = fs::weakly_canonical(path, ec).string();
    return !ec;
  };
  std::string p;
  for (size_t i = 0; i < reader.shards().size(); ++i) {
    if (canonical(reader.ShardPath(index::ShardId{static_cast<uint32_t>(i)}),
                  reader.shards()[i].remote(), &p)) {
      known.emplace(p, i);
    }
  }
  for (const index::ShardMeta& s : shards) {
    if (!canonical(s.path, s.remote(), &p)) continue;
    if (auto it = known.find(p); it != known.end()) {
      return Status::InvalidArgument(
          fmt::format("shard {}: already in index {} (shard {}); a changed shard needs a new name",
                      RedactLocation(s.path), reader.path(), it->second));
    }
  }
  return Status::Ok();
}

// Replays the scanned members over the part of `tree` they meet (the rest
// cannot change) and applies the result to `tree`; sets report->replay.
Status ReplayNewMembers(ScannedShards* scanned, std::chrono::steady_clock::time_point start,
                        VersionBuilder* tree, IndexAddReport* report) {
  std::vector<index::MemberEntry> members;
  index::SparseExtents extents;
  std::vector<NodeId> node_of;
  {
    std::vector<uint8_t> relevant(tree->node_count(), 0);
    relevant[index::kRootNode] = 1;
    MarkRelevant(*tree, scanned->members, &relevant);
    Synthesize(*tree, relevant, &members, &extents, &node_of);
  }
  const size_t synthesized = members.size();
  for (auto& [m, e] : scanned->extents)
    extents[static_cast<uint32_t>(m + synthesized)] = std::move(e);
  for (auto& m : scanned->members) members.push_back(std::move(m));
  log::Debug("index add: members synthesized at {:.3f}s", Since(start));
  const index::Tree built = index::BuildTree(members);
  report->replay = built.report;
  log::Debug("index add: replayed at {:.3f}s", Since(start));
  const index::TreeEmitter emitter(built, members, extents);
  SHARDFS_RETURN_IF_ERROR(Apply(built, emitter, synthesized, node_of, tree));
  log::Debug("index add: applied at {:.3f}s", Since(start));
  return Status::Ok();
}

// Sets report->created: the next version of the default view over `source`,
// of `shard_count` shards (`new_shards` of them new), with `summary`.
Status DescribeVersion(const index::IndexReader& source, const index::VersionSummary& summary,
                       uint32_t shard_count, size_t new_shards, const std::string& message,
                       IndexAddReport* report) {
  index::VersionInfo& info = report->created;
  info.name = index::kDefaultViewName;
  SHARDFS_ASSIGN_OR_RETURN(auto versions, source.catalog().Versions(info.name));
  info.version = versions.back().version + 1;
  SHARDFS_ASSIGN_OR_RETURN(uint32_t max_view, source.catalog().MaxViewId());
  index::VersionRecord& rec = info.record;
  rec.view = index::ViewId{max_view + 1};
  rec.shard_count = shard_count;
  rec.base_max_inode = source.version().record.base_max_inode;
  rec.max_inode = summary.max_inode;
  rec.files = summary.files;
  rec.dirs = summary.dirs;
  rec.symlinks = summary.symlinks;
  rec.bytes = summary.bytes;
  rec.created_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  rec.kind = index::VersionKind::kAdd;
  rec.from = report->from;
  rec.message = message.empty() ? fmt::format("index add: {} shard(s)", new_shards) : message;
  return Status::Ok();
}

}  // namespace

Result<IndexAddReport> AddShards(const IndexAddOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  IndexAddReport report;
  if (index::IsManifestFile(o.index)) {
    return Status::InvalidArgument(fmt::format(
        "index add {}: a manifest; add the shards to one of its partitions (or build a new "
        "partition) and make the manifest again",
        o.index));
  }
  SHARDFS_ASSIGN_OR_RETURN(auto editor, index::IndexEditor::Open(o.index));
  index::ReaderOptions ro;
  ro.view = index::kDefaultViewName;
  SHARDFS_ASSIGN_OR_RETURN(auto source, index::IndexReader::Open(o.index, ro));
  report.from = source->version().label();
  const uint32_t first_id = static_cast<uint32_t>(source->shards().size());

  IndexBuildOptions scan_options;
  scan_options.inputs = o.inputs;
  scan_options.checksum = o.checksum;
  scan_options.jobs = o.jobs;
  scan_options.quiet = o.quiet;
  scan_options.remote = o.remote;
  scan_options.nest = o.nest;
  // The tree loads while the new shards are scanned: neither waits for
  // the other.
  Result<std::unique_ptr<VersionBuilder>> loaded = Status::IoError("the tree was not loaded");
  double loaded_at = 0;
  std::thread loader([&] {
    try {
      loaded = VersionBuilder::Load(*source);
    } catch (const std::bad_alloc&) {
      loaded = Status::IoError("out of memory while loading the tree");
    }
    loaded_at = Since(start);
  });
  Result<ScannedShards> scan = ScanNewShards(scan_options, first_id);
  report.scan_seconds = Since(start);
  loader.join();
  SHARDFS_ASSIGN_OR_RETURN(ScannedShards scanned, std::move(scan));
  SHARDFS_ASSIGN_OR_RETURN(auto tree, std::move(loaded));
  SHARDFS_RETURN_IF_ERROR(CheckNotIndexed(*source, scanned.shards));
  report.scan = scanned.report;
  log::Debug("index add: scanned at {:.3f}s, tree loaded at {:.3f}s", report.scan_seconds,
             loaded_at);
  SHARDFS_RETURN_IF_ERROR(ReplayNewMembers(&scanned, start, tree.get(), &report));

  const uint32_t shard_count = first_id + static_cast<uint32_t>(scanned.shards.size());
  SHARDFS_ASSIGN_OR_RETURN(index::BuiltVersion version, tree->Finish(shard_count));
  log::Debug("index add: difference worked out at {:.3f}s", Since(start));
  SHARDFS_ASSIGN_OR_RETURN(const fs::path index_abs, index::AbsoluteIndexPath(o.index));
  std::vector<index::ShardMeta> stored;
  for (const index::ShardMeta& s : scanned.shards) {
    SHARDFS_ASSIGN_OR_RETURN(index::ShardMeta m,
                             index::StoredShardMeta(s, index_abs.parent_path().string()));
    stored.push_back(std::move(m));
  }

  SHARDFS_RETURN_IF_ERROR(DescribeVersion(*source, version.summary, shard_count,
                                          scanned.shards.size(), o.message, &report));
  const index::VersionInfo& info = report.created;
  source.reset();
  SHARDFS_RETURN_IF_ERROR(
      editor->AddVersion(info, version.table, stored, std::move(scanned.seek_keys)));
  report.summary = version.summary;
  report.seconds = Since(start);
  return report;
}

}  // namespace shardfs::builder
