// IndexReader's state over a manifest (index_reader_union.cc); internal to
// the reader's .cc files.
#ifndef SHARDFS_INDEX_INDEX_READER_UNION_H_
#define SHARDFS_INDEX_INDEX_READER_UNION_H_

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <vector>

#include "index/index_reader.h"
#include "index/inode_set.h"
#include "index/manifest.h"

namespace shardfs::index {

// Immutable after OpenManifest; shared by every thread without a lock.
struct IndexReader::Union {
  Manifest manifest;
  size_t tree = 0;
  bool ranked = false;
  std::vector<std::unique_ptr<IndexReader>> parts;  // nullptr: not opened (another rank's).
  std::vector<uint64_t> bases;                      // Inodes before partition p; [P] = all.
  std::vector<uint32_t> shard_bases;                // Shards before partition p.
  std::vector<InodeSet> hidden;
  std::unordered_map<uint64_t, size_t> dirs;      // Global inode -> its union_dirs index.
  std::unordered_map<uint64_t, uint64_t> copies;  // Key(p, local) -> global inode.
  std::unordered_map<uint64_t, uint32_t> nlinks;  // Key(p, local) -> link count.

  const ManifestTree& t() const { return manifest.trees[tree]; }
  static uint64_t Key(uint32_t p, uint64_t local) { return uint64_t{p} << 48 | local; }
  // REQUIRES: 1 <= global <= bases.back().
  uint32_t PartitionOf(uint64_t global) const {
    auto it = std::lower_bound(bases.begin() + 1, bases.end(), global);
    return static_cast<uint32_t>(it - bases.begin() - 1);
  }
  const UnionDir* FindDir(uint64_t global) const {
    auto it = dirs.find(global);
    return it == dirs.end() ? nullptr : &t().union_dirs[it->second];
  }
  // Renumbers a partition's record into the union's numbers.
  void Translate(uint32_t p, EntryRecord* rec) const {
    if (rec->type == EntryType::kDir) {
      if (auto it = copies.find(Key(p, rec->inode.value)); it != copies.end()) {
        *rec = FindDir(it->second)->record;
        return;
      }
    }
    const uint64_t local = rec->inode.value;
    rec->inode = InodeId{bases[p] + local};
    auto parent = copies.find(Key(p, rec->parent.value));
    rec->parent = InodeId{parent != copies.end() ? parent->second : bases[p] + rec->parent.value};
    if (rec->type != EntryType::kDir) {
      if (auto n = nlinks.find(Key(p, local)); n != nlinks.end()) rec->nlink = n->second;
    }
    if (rec->type == EntryType::kFile) rec->shard = ShardId{shard_bases[p] + rec->shard.value};
  }
  // A union directory is shown if a copy of it is (a rank shows a directory
  // holding something of the rank).
  bool Visible(const UnionDir& d) const {
    if (!ranked || d.record.inode == kRootInode) return true;
    for (const auto& [p, local] : d.copies) {
      EntryRecord rec;
      RecordHolder holder;
      if (parts[p] && parts[p]->GetInode(InodeId{local}, &rec, &holder).ok()) return true;
    }
    return false;
  }
  // The entry a name of a union directory resolves to among candidates in
  // partition order, from the last back: a union directory, or the first
  // entry the union does not hide. False if none.
  bool Pick(uint32_t p, EntryRecord* rec) const {
    if (rec->type == EntryType::kDir && copies.contains(Key(p, rec->inode.value))) {
      const UnionDir* d = FindDir(copies.at(Key(p, rec->inode.value)));
      if (!Visible(*d)) return false;
      *rec = d->record;
      return true;
    }
    if (hidden[p].Contains(rec->inode.value)) return false;
    Translate(p, rec);
    return true;
  }
};

}  // namespace shardfs::index

#endif  // SHARDFS_INDEX_INDEX_READER_UNION_H_
