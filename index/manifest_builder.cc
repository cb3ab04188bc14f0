#include "index/manifest_builder.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "index/child_cursor.h"
#include "index/inode_set.h"

namespace shardfs::index {
namespace {

struct Copy {
  uint32_t partition = 0;
  EntryRecord rec;
};

class UnionBuilder {
 public:
  UnionBuilder(const std::vector<const IndexReader*>& parts, const std::vector<std::string>& names)
      : parts_(parts), names_(names), hidden_(parts.size()) {}

  Result<ManifestTree> Build() {
    uint64_t base = 0;
    for (size_t p = 0; p < parts_.size(); ++p) {
      const VersionInfo& v = parts_[p]->version();
      tree_.part_views.push_back(v.record.view == kDefaultView ? "" : v.label());
      tree_.part_max_inode.push_back(parts_[p]->max_inode());
      SHARDFS_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes, parts_[p]->ShardBytes());
      tree_.shard_bytes.push_back(std::move(bytes));
      tree_.files += v.record.files;
      tree_.dirs += v.record.dirs;
      tree_.symlinks += v.record.symlinks;
      tree_.bytes += v.record.bytes;
      bases_.push_back(base);
      base += parts_[p]->max_inode();
    }
    std::vector<Copy> roots;
    for (uint32_t p = 0; p < parts_.size(); ++p) {
      Copy& c = roots.emplace_back();
      c.partition = p;
      RecordHolder holder;
      SHARDFS_RETURN_IF_ERROR(parts_[p]->GetInode(kRootInode, &c.rec, &holder));
      c.rec.target = {};
    }
    SHARDFS_RETURN_IF_ERROR(MergeDirectory(roots, kRootInode, "").status());
    SHARDFS_RETURN_IF_ERROR(SettleLinks());
    for (size_t p = 0; p < parts_.size(); ++p) {
      InodeSet::FromUnsorted(std::move(hidden_[p])).Encode(&tree_.hidden.emplace_back());
    }
    return std::move(tree_);
  }

 private:
  uint64_t Global(const Copy& c) const { return bases_[c.partition] + c.rec.inode.value; }
  std::string PathOf(std::string_view dir, std::string_view name) const {
    return dir.empty() ? std::string(name) : fmt::format("{}/{}", dir, name);
  }

  Result<bool> HasChildren(const Copy& c) const {
    bool any = false;
    SHARDFS_RETURN_IF_ERROR(parts_[c.partition]->ForEachChild(
        c.rec.inode, "", [&](std::string_view, const EntryRecord&) { return !(any = true); }));
    return any;
  }

  // A name the union no longer shows. A file or symlink with other names
  // loses one link; its inode goes when it has none left (SettleLinks).
  void Hide(const Copy& c) {
    if (c.rec.type != EntryType::kDir && c.rec.nlink > 1) {
      ++unlinked_[{c.partition, c.rec.inode.value}];
      return;
    }
    HideInode(c);
  }
  void HideInode(const Copy& c) {
    hidden_[c.partition].push_back(c.rec.inode.value);
    switch (c.rec.type) {
      case EntryType::kDir:
        --tree_.dirs;
        break;
      case EntryType::kSymlink:
        --tree_.symlinks;
        break;
      case EntryType::kFile:
        --tree_.files;
        tree_.bytes -= c.rec.size;
        break;
    }
  }

  Status SettleLinks() {
    for (const auto& [key, lost] : unlinked_) {
      RecordHolder holder;
      Copy c;
      c.partition = key.first;
      SHARDFS_RETURN_IF_ERROR(parts_[key.first]->GetInode(InodeId{key.second}, &c.rec, &holder));
      if (lost >= c.rec.nlink) {
        HideInode(c);
      } else {
        tree_.nlinks.push_back({key.first, key.second, c.rec.nlink - lost});
      }
    }
    return Status::Ok();
  }

  Status Conflict(const std::string& path, const Copy& first, const Copy& later,
                  std::string_view why) const {
    return Status::InvalidArgument(
        fmt::format("'{}' is a {} in partition {} ({}) and a {} in partition {} ({}): {}", path,
                    EntryTypeName(first.rec.type), first.partition, names_[first.partition],
                    EntryTypeName(later.rec.type), later.partition, names_[later.partition], why));
  }

  // What a name of the union is, from its entries in partition order: the
  // directory copies it unites, or the one file or symlink that wins.
  struct Outcome {
    std::vector<Copy> dirs;
    std::optional<Copy> other;
  };
  Result<Outcome> Resolve(const std::string& path, std::vector<Copy>& entries) {
    Outcome o;
    for (Copy& e : entries) {
      if (e.rec.type == EntryType::kDir) {
        if (o.other) {
          SHARDFS_ASSIGN_OR_RETURN(bool full, HasChildren(e));
          if (full) {
            return Conflict(path, *o.other, e,
                            "a single build would keep or drop the directory's entries by member "
                            "order, which the partitions do not hold; build these shards as one "
                            "partition");
          }
          Hide(*o.other);
          o.other.reset();
        }
        o.dirs.push_back(e);
        continue;
      }
      if (!o.dirs.empty()) {
        bool full = false;
        for (const Copy& d : o.dirs) {
          SHARDFS_ASSIGN_OR_RETURN(full, HasChildren(d));
          if (full) break;
        }
        if (full) {
          // tar refuses it: "File exists". Its other names (hard links made
          // in its own partition) would have been refused too.
          if (e.rec.nlink > 1) {
            return Conflict(path, o.dirs.front(), e,
                            "the file would be dropped (a directory with entries is there), but "
                            "it has other names (hard links)");
          }
          HideInode(e);
          if (tree_.dropped_examples.size() < 5) {
            tree_.dropped_examples.push_back(
                fmt::format("partition {} ({}): '{}': a directory with entries is there",
                            e.partition, names_[e.partition], path));
          }
          ++tree_.dropped;
          continue;
        }
        for (const Copy& d : o.dirs) Hide(d);
        o.dirs.clear();
      } else if (o.other) {
        Hide(*o.other);
      }
      o.other = e;
    }
    return o;
  }

  struct DirSummary {
    uint64_t subdirs = 0;
    int64_t newest = INT64_MIN;
  };

  // Merges the entries of `copies` (one directory, numbered `global`) and
  // records every union directory below it, then the directory itself when
  // it has several copies.
  Result<DirSummary> MergeDirectory(const std::vector<Copy>& copies, InodeId parent,
                                    const std::string& path) {
    std::vector<ChildCursor> cursors;
    for (const Copy& c : copies)
      cursors.emplace_back(parts_[c.partition], c.partition, c.rec.inode);
    DirSummary sum;
    const uint64_t global = Global(copies.front());
    std::vector<Copy> entries;
    for (;;) {
      const std::string* least = nullptr;
      for (ChildCursor& c : cursors) {
        SHARDFS_ASSIGN_OR_RETURN(bool valid, c.Valid());
        if (valid && (!least || c.name() < *least)) least = &c.name();
      }
      if (!least) break;
      const std::string name = *least;
      entries.clear();
      for (ChildCursor& c : cursors) {
        SHARDFS_ASSIGN_OR_RETURN(bool valid, c.Valid());
        if (valid && c.name() == name) {
          entries.push_back({c.partition(), c.record()});
          entries.back().rec.target = {};
          entries.back().rec.extents = {};
          c.Next();
        }
      }
      const std::string child_path = PathOf(path, name);
      SHARDFS_ASSIGN_OR_RETURN(Outcome o, Resolve(child_path, entries));
      int64_t mtime = INT64_MIN;
      if (o.dirs.size() > 1) {
        SHARDFS_ASSIGN_OR_RETURN(DirSummary below,
                                 MergeDirectory(o.dirs, InodeId{global}, child_path));
        mtime = tree_.union_dirs.back().record.mtime_ns;
        (void)below;
      } else if (o.dirs.size() == 1) {
        mtime = o.dirs.front().rec.mtime_ns;
      } else if (o.other) {
        mtime = o.other->rec.mtime_ns;
      } else {
        continue;  // Dropped.
      }
      if (!o.dirs.empty()) ++sum.subdirs;
      sum.newest = std::max(sum.newest, mtime);
    }
    if (copies.size() > 1 || global == kRootInode.value) {
      UnionDir& d = tree_.union_dirs.emplace_back();
      // The last copy a member describes gives the metadata, as the last
      // directory member does; without one, the implied rule.
      const Copy* described = nullptr;
      for (const Copy& c : copies) {
        if (!(c.rec.flags & kEntryImplied)) described = &c;
      }
      d.record = described ? described->rec : copies.back().rec;
      if (!described) {
        d.record.flags = kEntryImplied;
        d.record.mode = S_IFDIR | 0755;
        d.record.uid = d.record.gid = 0;
        d.record.mtime_ns = sum.newest == INT64_MIN ? 0 : sum.newest;
      }
      d.record.inode = InodeId{global};
      d.record.parent = global == kRootInode.value ? kRootInode : parent;
      d.record.nlink = static_cast<uint32_t>(2 + sum.subdirs);
      for (size_t i = 0; i < copies.size(); ++i) {
        d.copies.emplace_back(copies[i].partition, copies[i].rec.inode.value);
        if (i > 0) HideInode(copies[i]);
      }
    }
    return sum;
  }

  const std::vector<const IndexReader*>& parts_;
  const std::vector<std::string>& names_;
  std::vector<uint64_t> bases_;
  std::vector<std::vector<uint64_t>> hidden_;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> unlinked_;
  ManifestTree tree_;
};

}  // namespace

Result<ManifestTree> BuildUnionTree(const std::vector<const IndexReader*>& parts,
                                    const std::vector<std::string>& names) {
  return UnionBuilder(parts, names).Build();
}

}  // namespace shardfs::index
