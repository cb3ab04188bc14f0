#include "index/tree_joiner.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/strings.h"
#include "index/member_path.h"

namespace shardfs::index {
namespace {

// Whether `path` is `dir` or below it; "" (the root) is above every path.
bool IsAncestorOrSelf(std::string_view dir, std::string_view path) {
  return dir.empty() || path == dir ||
         (path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/');
}

}  // namespace

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
                           const std::vector<uint64_t>& seqs, const SparseExtents& extents) {
  const Tree tree = BuildTree(members);
  NoteReport(tree, members, seqs);
  const TreeEmitter emitter(tree, members, extents);
  std::vector<uint64_t> inode_of(tree.nodes.size(), 0);  // Global inodes of this chunk's nodes.
  for (size_t k = 0; k < tree.nodes.size(); ++k) {
    SHARDFS_RETURN_IF_ERROR(AddNode(tree.nodes, k, emitter, members, &inode_of));
  }
  return Status::Ok();
}

void TreeJoiner::NoteReport(const Tree& tree, const std::vector<MemberEntry>& members,
                            const std::vector<uint64_t>& seqs) {
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
}

Status TreeJoiner::AddNode(const HugeVector<TreeNode>& nodes, size_t k, const TreeEmitter& emitter,
                           const std::vector<MemberEntry>& members,
                           std::vector<uint64_t>* inode_of) {
  const TreeNode& n = nodes[k];
  if (!stack_.empty() && IsAncestorOrSelf(n.path, stack_.back().path)) {
    // A directory an earlier chunk opened (this chunk implied it again).
    auto open = std::find_if(stack_.rbegin(), stack_.rend(),
                             [&](const OpenDir& d) { return d.path == n.path; });
    if (open == stack_.rend()) {
      return Status::Corruption(fmt::format("bounded build: '{}' is not open", n.path));
    }
    (*inode_of)[k] = open->inode;
    return Status::Ok();
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
    rec.inode = InodeId{(*inode_of)[n.link_node]};
    rec.parent = InodeId{(*inode_of)[nodes[n.link_node].parent_node]};
    SHARDFS_RETURN_IF_ERROR(PutDirent(parent_inode, n.path, rec));
    ChildMtime(rec.mtime_ns);
    ++counts_.hardlinks;
    return Status::Ok();
  }
  const uint64_t inode = next_inode_++;
  (*inode_of)[k] = inode;
  EntryRecord rec = emitter.Record(n);
  rec.inode = InodeId{inode};
  rec.parent = InodeId{parent_inode};
  if (n.type == EntryType::kDir) {
    OpenDirectory(n, std::move(rec));
    return Status::Ok();
  }
  CountLeaf(n, rec, n.type == EntryType::kFile && members[n.member].has_checksum);
  SHARDFS_RETURN_IF_ERROR(PutInode(rec));
  SHARDFS_RETURN_IF_ERROR(PutDirent(parent_inode, n.path, rec));
  ChildMtime(rec.mtime_ns);
  return Status::Ok();
}

void TreeJoiner::OpenDirectory(const TreeNode& n, EntryRecord rec) {
  if (!stack_.empty()) ++stack_.back().nlink;
  ++counts_.dirs;
  if (n.member == kImplied) ++counts_.implied_dirs;
  OpenDir d;
  d.path.assign(n.path);
  d.inode = rec.inode.value;
  d.parent_inode = rec.parent.value;
  d.implied = n.member == kImplied;
  d.mtime_ns = d.implied ? INT64_MIN : rec.mtime_ns;
  d.rec = std::move(rec);
  stack_.push_back(std::move(d));
}

void TreeJoiner::CountLeaf(const TreeNode& n, const EntryRecord& rec, bool has_checksum) {
  if (n.type == EntryType::kSymlink) ++counts_.symlinks;
  if (n.type != EntryType::kFile) return;
  ++counts_.files;
  counts_.bytes += rec.size;
  if (!has_checksum) all_checksummed_ = false;
  if (rec.flags & kEntrySparse) any_sparse_ = true;
  if (rec.flags & kEntryEncoded) any_encoded_ = true;
  if (rec.shard.value < shard_bytes_.size()) shard_bytes_[rec.shard.value] += StoredBytes(rec);
}

Status TreeJoiner::Finish() {
  while (!stack_.empty()) SHARDFS_RETURN_IF_ERROR(Pop());
  counts_.max_inode = next_inode_ - 1;
  return Status::Ok();
}

WriteStats TreeJoiner::Stats() {
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

Status TreeJoiner::Put(RunWriter* w, std::string_view key, const EntryRecord& rec) {
  EncodeEntry(rec, &value_);
  return w->Add(key, value_);
}

Status TreeJoiner::PutDirent(uint64_t parent, std::string_view path, const EntryRecord& rec) {
  return Put(dirents_, EncodeDirentKey(kDefaultView, InodeId{parent}, BaseName(path), dkey_), rec);
}

Status TreeJoiner::PutInode(const EntryRecord& rec) {
  return Put(rec.type == EntryType::kDir ? dir_inodes_ : inodes_,
             EncodeInodeKey(kDefaultView, rec.inode, ikey_), rec);
}

void TreeJoiner::ChildMtime(int64_t mtime_ns) {
  OpenDir& parent = stack_.back();
  if (parent.implied) parent.mtime_ns = std::max(parent.mtime_ns, mtime_ns);
}

Status TreeJoiner::Pop() {
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

void TreeJoiner::Examples::Offer(uint64_t seq, std::string text) {
  if (items_.size() == kReportExamples && seq >= items_.back().first) return;
  items_.emplace_back(seq, std::move(text));
  std::sort(items_.begin(), items_.end());
  if (items_.size() > kReportExamples) items_.pop_back();
}

std::vector<std::string> TreeJoiner::Examples::Take() {
  std::vector<std::string> out;
  for (auto& [seq, text] : items_) out.push_back(std::move(text));
  return out;
}

}  // namespace shardfs::index
