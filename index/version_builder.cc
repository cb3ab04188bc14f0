#include "index/version_builder.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>

#include "index/member_path.h"

namespace shardfs::index {

Result<std::unique_ptr<VersionBuilder>> VersionBuilder::Load(const IndexReader& source) {
  std::unique_ptr<VersionBuilder> b(new VersionBuilder(source));
  SHARDFS_RETURN_IF_ERROR(b->LoadAll());
  return b;
}

NodeId VersionBuilder::NewNode(uint64_t inode, NodeId parent, std::string_view name, EntryType type,
                               std::string_view record, bool from_base) {
  Node n;
  n.inode = inode;
  n.parent = parent;
  n.type = type;
  n.from_base = from_base;
  n.name_off = arena_.size();
  n.name_len = static_cast<uint32_t>(name.size());
  arena_.append(name);
  n.rec_off = arena_.size();
  n.rec_len = static_cast<uint32_t>(record.size());
  arena_.append(record);
  nodes_.push_back(n);
  return static_cast<NodeId>(nodes_.size() - 1);
}

Status VersionBuilder::LoadAll() {
  const VersionRecord& v = source_.version().record;
  base_max_ = v.base_max_inode;
  next_inode_ = v.max_inode + 1;
  const VersionSets* sets = source_.version_sets();
  source_hidden_ = sets ? &sets->hidden : nullptr;
  EntryRecord root;
  RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(source_.GetInode(kRootInode, &root, &holder));
  std::string encoded;
  EncodeEntry(root, &encoded);
  // Names and records of the whole tree: reserved once, or the arena's
  // regrowth copies it about twice over (most of the load time at 1M).
  const uint64_t entries = v.files + v.dirs + v.symlinks + 1;
  nodes_.reserve(entries);
  arena_.reserve(entries * (kEntryFixedSize + 40));
  auto in_base = [&](uint64_t inode) {
    return inode <= base_max_ && !(source_hidden_ && source_hidden_->Contains(inode));
  };
  NewNode(kRootInode.value, kRootNode, "", EntryType::kDir, encoded, in_base(kRootInode.value));
  // Breadth first: each directory's children land contiguous, in name order.
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].type != EntryType::kDir) continue;
    const NodeId begin = static_cast<NodeId>(nodes_.size());
    SHARDFS_RETURN_IF_ERROR(source_.ForEachChild(
        InodeId{nodes_[n].inode}, "", [&](std::string_view name, const EntryRecord& rec) {
          EncodeEntry(rec, &encoded);
          NewNode(rec.inode.value, n, name, rec.type, encoded, in_base(rec.inode.value));
          return true;
        }));
    nodes_[n].child_begin = begin;
    nodes_[n].child_count = static_cast<uint32_t>(nodes_.size() - begin);
  }
  loaded_ = static_cast<NodeId>(nodes_.size());
  return Status::Ok();
}

std::string_view VersionBuilder::name(NodeId n) const {
  return std::string_view(arena_).substr(nodes_[n].name_off, nodes_[n].name_len);
}

EntryRecord VersionBuilder::record(NodeId n) const {
  EntryRecord rec;
  // Encoded by this builder from a checked record: decodes.
  (void)DecodeEntry(std::string_view(arena_).substr(nodes_[n].rec_off, nodes_[n].rec_len), &rec);
  return rec;
}

std::vector<NodeId> VersionBuilder::children(NodeId n) const {
  std::vector<NodeId> out;
  for (uint32_t i = 0; i < nodes_[n].child_count; ++i) out.push_back(nodes_[n].child_begin + i);
  return out;
}

NodeId VersionBuilder::Child(NodeId dir, std::string_view child) const {
  const Node& d = nodes_[dir];
  NodeId lo = d.child_begin, hi = d.child_begin + d.child_count;
  while (lo < hi) {
    NodeId mid = lo + (hi - lo) / 2;
    if (name(mid) < child) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < d.child_begin + d.child_count && name(lo) == child && nodes_[lo].alive &&
      !nodes_[lo].moved) {
    return lo;
  }
  auto extra = extra_children_.find(dir);
  if (extra != extra_children_.end()) {
    auto c = extra->second.find(std::string(child));
    if (c != extra->second.end() && nodes_[c->second].alive && nodes_[c->second].parent == dir) {
      return c->second;
    }
  }
  return kNoNode;
}

NodeId VersionBuilder::Find(std::string_view path) const {
  NodeId n = kRootNode;
  for (std::string_view comp : PathComponents(path)) {
    if (nodes_[n].type != EntryType::kDir) return kNoNode;
    n = Child(n, comp);
    if (n == kNoNode) return kNoNode;
  }
  return n;
}

void VersionBuilder::Remove(NodeId n) {
  std::vector<NodeId> stack{n};
  while (!stack.empty()) {
    NodeId m = stack.back();
    stack.pop_back();
    if (!nodes_[m].alive) continue;
    nodes_[m].alive = false;
    if (nodes_[m].type != EntryType::kDir) continue;
    for (uint32_t i = 0; i < nodes_[m].child_count; ++i) {
      NodeId c = nodes_[m].child_begin + i;
      if (!nodes_[c].moved) stack.push_back(c);
    }
    auto extra = extra_children_.find(m);
    if (extra != extra_children_.end()) {
      for (const auto& [unused, c] : extra->second) {
        if (nodes_[c].parent == m) stack.push_back(c);
      }
    }
  }
}

void VersionBuilder::Attach(NodeId dir, NodeId n, std::string_view child) {
  Node& node = nodes_[n];
  node.parent = dir;
  node.name_off = arena_.size();
  node.name_len = static_cast<uint32_t>(child.size());
  arena_.append(child);
  extra_children_[dir][std::string(child)] = n;
}

Result<NodeId> VersionBuilder::MakeDirs(std::string_view path) {
  NodeId n = kRootNode;
  for (std::string_view comp : PathComponents(path)) {
    NodeId c = Child(n, comp);
    if (c == kNoNode) {
      // A new directory: the root's owner, rwxr-xr-x; its mtime is set
      // from its children in Finish.
      EntryRecord rec = record(kRootNode);
      rec.mode = S_IFDIR | 0755;
      rec.flags = 0;
      rec.size = 0;
      std::string encoded;
      EncodeEntry(rec, &encoded);
      c = NewNode(next_inode_++, n, comp, EntryType::kDir, encoded, false);
      nodes_[c].changed = true;
      nodes_[c].moved = true;  // Not in any source range.
      Attach(n, c, comp);
    } else if (nodes_[c].type != EntryType::kDir) {
      return Status::NotADirectory(fmt::format(
          "'{}' is not a directory", path.substr(0, comp.data() + comp.size() - path.data())));
    }
    n = c;
  }
  return n;
}

Status VersionBuilder::Move(NodeId n, std::string_view new_path) {
  if (n == kRootNode) return Status::InvalidArgument("the root cannot be renamed");
  if (Find(new_path) != kNoNode) {
    return Status::InvalidArgument(fmt::format("'{}' already exists", new_path));
  }
  if (BaseName(new_path).empty()) return Status::InvalidArgument("an empty name");
  SHARDFS_ASSIGN_OR_RETURN(NodeId dir, MakeDirs(ParentPath(new_path)));
  for (NodeId a = dir;; a = nodes_[a].parent) {
    if (a == n) {
      return Status::InvalidArgument(
          fmt::format("'{}' would be inside the directory it moves", new_path));
    }
    if (a == kRootNode) break;
  }
  nodes_[n].moved = true;
  Attach(dir, n, BaseName(new_path));
  return Status::Ok();
}

Result<NodeId> VersionBuilder::AddEntry(NodeId dir, std::string_view child, const EntryRecord& rec,
                                        NodeId link_to) {
  if (NodeId old = Child(dir, child); old != kNoNode) Remove(old);
  std::string encoded;
  EncodeEntry(rec, &encoded);
  const uint64_t inode = link_to == kNoNode ? next_inode_++ : nodes_[link_to].inode;
  NodeId c = NewNode(inode, dir, child, rec.type,
                     link_to == kNoNode ? std::string_view(encoded) : std::string_view(), false);
  if (link_to != kNoNode) {
    nodes_[c].rec_off = nodes_[link_to].rec_off;
    nodes_[c].rec_len = nodes_[link_to].rec_len;
  }
  nodes_[c].changed = true;
  nodes_[c].moved = true;
  Attach(dir, c, child);
  return c;
}

void VersionBuilder::Redescribe(NodeId n, const EntryRecord& rec) {
  EntryRecord r = record(n);
  r.mode = rec.mode;
  r.uid = rec.uid;
  r.gid = rec.gid;
  r.mtime_ns = rec.mtime_ns;
  std::string encoded;
  EncodeEntry(r, &encoded);
  nodes_[n].rec_off = arena_.size();
  nodes_[n].rec_len = static_cast<uint32_t>(encoded.size());
  arena_.append(encoded);
  nodes_[n].changed = true;
}

struct VersionBuilder::Census {
  // Per inode: its live names, its first live node, whether it changed.
  std::vector<uint32_t> names;
  std::vector<NodeId> first;
  std::vector<uint8_t> touched;
  // Per node: its live subdirectories, its live children's newest mtime.
  std::vector<uint32_t> subdirs;
  std::vector<int64_t> newest;
  uint64_t moved = 0;  // Live nodes of the source that moved.
};

void VersionBuilder::TakeCensus(Census* c) const {
  const uint64_t max_inode = next_inode_ - 1;
  c->names.assign(max_inode + 1, 0);
  c->first.assign(max_inode + 1, kNoNode);
  c->touched.assign(max_inode + 1, 0);
  c->subdirs.assign(nodes_.size(), 0);
  c->newest.assign(nodes_.size(), INT64_MIN);
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    if (!node.from_base || !node.alive || node.moved || node.changed) c->touched[node.inode] = 1;
    if (!node.alive) continue;
    if (node.moved && n < loaded_) ++c->moved;
    ++c->names[node.inode];
    if (c->first[node.inode] == kNoNode) c->first[node.inode] = n;
    if (n != kRootNode) {
      if (node.type == EntryType::kDir) ++c->subdirs[node.parent];
      c->newest[node.parent] = std::max(c->newest[node.parent], record(n).mtime_ns);
    }
  }
}

Result<BuiltVersion> VersionBuilder::Finish(uint32_t shard_count) const {
  BuiltVersion out;
  VersionSummary& sum = out.summary;
  const uint64_t max_inode = next_inode_ - 1;
  Census c;
  TakeCensus(&c);
  sum.moved = c.moved;
  std::vector<uint8_t> emitted(max_inode + 1, 0);
  std::vector<uint64_t> hidden, overlaid, parents;
  out.table.shard_bytes.assign(shard_count, 0);
  std::vector<uint8_t> counted(max_inode + 1, 0);
  std::vector<uint8_t> seen(max_inode + 1, 0);
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    const uint64_t inode = node.inode;
    if (n < loaded_) seen[inode] = 1;  // Was in the source.
    if (!node.alive) continue;
    EntryRecord rec = record(n);
    const uint32_t nlink = node.type == EntryType::kDir ? 2 + c.subdirs[n] : c.names[inode];
    if (rec.nlink != nlink) c.touched[inode] = 1;
    if (node.type == EntryType::kDir && node.changed && node.inode > base_max_ &&
        c.newest[n] != INT64_MIN) {
      rec.mtime_ns = c.newest[n];  // A made directory: its newest child's mtime.
    }
    if (!counted[inode]) {
      counted[inode] = 1;
      switch (node.type) {
        case EntryType::kDir:
          ++sum.dirs;
          break;
        case EntryType::kSymlink:
          ++sum.symlinks;
          break;
        case EntryType::kFile:
          ++sum.files;
          sum.bytes += rec.size;
          if (rec.shard.value < shard_count)
            out.table.shard_bytes[rec.shard.value] += StoredBytes(rec);
          break;
      }
    }
    if (!c.touched[inode]) continue;
    rec.inode = InodeId{inode};
    rec.parent =
        InodeId{n == kRootNode ? kRootInode.value : nodes_[nodes_[c.first[inode]].parent].inode};
    rec.nlink = nlink;
    std::string encoded;
    EncodeEntry(rec, &encoded);
    if (!emitted[inode]) {
      emitted[inode] = 1;
      overlaid.push_back(inode);
      out.table.inodes.emplace_back(inode, encoded);
    }
    if (n != kRootNode) {
      const uint64_t parent = nodes_[node.parent].inode;
      parents.push_back(parent);
      out.table.dirents.emplace_back(std::make_pair(parent, std::string(name(n))),
                                     std::move(encoded));
    }
  }
  for (uint64_t i = 1; i <= max_inode; ++i) {
    if (c.touched[i] && i <= base_max_) hidden.push_back(i);
    if (seen[i] && !counted[i]) ++sum.removed;
    if (!seen[i] && counted[i]) ++sum.added;
  }
  // Touched entries of the source that no name of this version keeps, and
  // the source's own hidden inodes.
  out.table.sets.hidden = InodeSet::FromUnsorted(std::move(hidden));
  if (source_hidden_)
    out.table.sets.hidden = InodeSet::Union(out.table.sets.hidden, *source_hidden_);
  out.table.sets.overlaid = InodeSet::FromUnsorted(std::move(overlaid));
  out.table.sets.parents = InodeSet::FromUnsorted(std::move(parents));
  sum.max_inode = std::max(max_inode, base_max_);
  return out;
}

}  // namespace shardfs::index
