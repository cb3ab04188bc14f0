#include "index/tree_builder.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "base/log.h"
#include "index/member_path.h"

namespace shardfs::index {
namespace {

constexpr size_t kParallelSortMin = 1 << 14;
constexpr uint32_t kNoName = UINT32_MAX;

uint64_t HashPath(std::string_view path) { return std::hash<std::string_view>()(path); }

// The live names by path: open addressing over name ids, at most half full.
// A slot keeps the high bits of its path's hash, so a probe compares paths
// only when those match. (std::unordered_map cost a node allocation and two
// hashings per member: most of the replay's time at 1M members.)
class NameTable {
 public:
  NameTable(const HugeVector<TreeName>& names, size_t expected) : names_(names) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    slots_.assign(cap, Slot{});
  }

  size_t size() const { return size_; }

  // The live name of `path` (its hash `h`), or kNoName.
  uint32_t Find(std::string_view path, uint64_t h) const {
    const uint32_t tag = Tag(h);
    for (size_t i = h & Mask();; i = (i + 1) & Mask()) {
      const Slot& s = slots_[i];
      if (s.id_plus_one == 0) return kNoName;
      if (s.tag == tag && names_[s.id_plus_one - 1].path == path) return s.id_plus_one - 1;
    }
  }

  // Makes `id` the live name of `path`.
  void Set(std::string_view path, uint64_t h, uint32_t id) {
    if (2 * (size_ + 1) > slots_.size()) Grow();
    const uint32_t tag = Tag(h);
    for (size_t i = h & Mask();; i = (i + 1) & Mask()) {
      Slot& s = slots_[i];
      if (s.id_plus_one == 0) {
        s = Slot{tag, id + 1};
        ++size_;
        return;
      }
      if (s.tag == tag && names_[s.id_plus_one - 1].path == path) {
        s.id_plus_one = id + 1;
        return;
      }
    }
  }

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t id_plus_one = 0;  // 0: empty.
  };
  static uint32_t Tag(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
  size_t Mask() const { return slots_.size() - 1; }

  void Grow() {
    HugeVector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.id_plus_one == 0) continue;
      const uint64_t h = HashPath(names_[s.id_plus_one - 1].path);
      size_t i = h & Mask();
      while (slots_[i].id_plus_one != 0) i = (i + 1) & Mask();
      slots_[i] = s;
    }
  }

  const HugeVector<TreeName>& names_;
  HugeVector<Slot> slots_;
  size_t size_ = 0;
};

// Step 1 as an object: the tree so far, the live names by path, and the last
// parent directory (siblings usually follow each other).
class Replayer {
 public:
  explicit Replayer(std::span<const MemberEntry> members)
      : members_(members), by_path_(tree_.names, members.size() + 1) {
    tree_.objects.reserve(members.size() + 1);
    tree_.names.reserve(members.size() + 1);
    tree_.objects.push_back(TreeObject{});  // The root, implied unless a member names it.
    tree_.names.push_back(TreeName{"", 0, 0});
    by_path_.Set("", HashPath(""), 0);
  }

  void Replay(uint32_t i);

  ReplayedTree Take() {
    tree_.live_names = by_path_.size();
    return std::move(tree_);
  }

 private:
  void Refuse(uint32_t i, std::string reason) {
    tree_.report.refusals.push_back(Refusal{i, std::move(reason)});
  }
  void Replaced(std::string_view path) {
    ++tree_.report.replaced;
    auto& ex = tree_.report.replaced_examples;
    if (ex.size() < kReportExamples && std::find(ex.begin(), ex.end(), path) == ex.end()) {
      ex.emplace_back(path);
      tree_.report.replaced_example_members.push_back(current_);
    }
  }
  uint32_t AddName(std::string_view path, uint64_t hash, uint32_t object, uint32_t parent) {
    tree_.names.push_back(TreeName{path, object, parent});
    uint32_t id = static_cast<uint32_t>(tree_.names.size() - 1);
    by_path_.Set(path, hash, id);
    tree_.names[parent].has_children = true;
    return id;
  }
  uint32_t AddObject(int64_t member, EntryType type) {
    tree_.objects.push_back(TreeObject{member, type});
    return static_cast<uint32_t>(tree_.objects.size() - 1);
  }
  const TreeObject& ObjectOf(uint32_t name) const {
    return tree_.objects[tree_.names[name].object];
  }
  // The name of the directory `path` goes in, implying missing directories;
  // nullopt, after refusing member `i`, if a prefix is not a directory.
  std::optional<uint32_t> ParentOf(uint32_t i, std::string_view path);
  // Member `i`, a hard link: the object it names, or nullopt after refusing it.
  std::optional<uint32_t> LinkTarget(uint32_t i);

  std::span<const MemberEntry> members_;
  ReplayedTree tree_;
  NameTable by_path_;  // Live names only.
  std::string_view last_dir_path_;
  uint32_t last_dir_ = 0;
  uint32_t current_ = 0;  // The member being replayed.
};

std::optional<uint32_t> Replayer::ParentOf(uint32_t i, std::string_view path) {
  std::string_view parent_path = ParentPath(path);
  if (parent_path == last_dir_path_ && tree_.names[last_dir_].alive) return last_dir_;
  uint32_t parent = 0;
  for (size_t from = 0; from < parent_path.size();) {
    size_t slash = parent_path.find('/', from);
    if (slash == std::string_view::npos) slash = parent_path.size();
    std::string_view prefix = parent_path.substr(0, slash);
    from = slash + 1;
    const uint64_t hash = HashPath(prefix);
    const uint32_t found = by_path_.Find(prefix, hash);
    if (found == kNoName) {
      parent = AddName(prefix, hash, AddObject(kImplied, EntryType::kDir), parent);
    } else if (ObjectOf(found).type != EntryType::kDir) {
      Refuse(i, fmt::format("'{}' is not a directory", prefix));
      return std::nullopt;
    } else {
      parent = found;
    }
  }
  last_dir_path_ = parent_path;
  last_dir_ = parent;
  return parent;
}

std::optional<uint32_t> Replayer::LinkTarget(uint32_t i) {
  const MemberEntry& m = members_[i];
  const uint32_t target = by_path_.Find(m.link_target, HashPath(m.link_target));
  if (target == kNoName) {
    Refuse(i, fmt::format("hard link to '{}', which is not in the tree at this point of the "
                          "archive (missing, or only later)",
                          m.link_target));
    return std::nullopt;
  }
  uint32_t object = tree_.names[target].object;
  if (tree_.objects[object].type == EntryType::kDir) {
    Refuse(i, fmt::format("hard link to '{}', a directory", m.link_target));
    return std::nullopt;
  }
  return object;
}

void Replayer::Replay(uint32_t i) {
  current_ = i;
  const MemberEntry& m = members_[i];
  if (m.path.empty()) {
    if (m.type == EntryType::kDir && !m.is_hardlink) {
      if (tree_.objects[0].member != kImplied) Replaced("/");
      tree_.objects[0].member = i;
    } else {
      Refuse(i, "the root must be a directory");
    }
    return;
  }
  std::optional<uint32_t> parent = ParentOf(i, m.path);
  if (!parent) return;

  const uint64_t hash = HashPath(m.path);
  const uint32_t found = by_path_.Find(m.path, hash);
  TreeName* old = found == kNoName ? nullptr : &tree_.names[found];
  const TreeObject* old_object = old ? &tree_.objects[old->object] : nullptr;
  const bool over_dir = old_object && old_object->type == EntryType::kDir;
  uint32_t object = 0;
  if (m.is_hardlink) {
    std::optional<uint32_t> target = LinkTarget(i);
    if (!target) return;
    object = *target;
    if (old && old->object == object) return;  // Already a name of that inode.
  } else if (m.type == EntryType::kDir && over_dir) {
    if (old_object->member != kImplied) Replaced(m.path);
    tree_.objects[old->object].member = i;  // The directory and its entries stay.
    return;
  }
  if (over_dir && old->has_children) {
    Refuse(i,
           fmt::format("cannot replace directory '{}', which has entries (File exists)", m.path));
    return;
  }
  if (!m.is_hardlink) object = AddObject(i, m.type);
  if (old) {
    old->alive = false;
    Replaced(m.path);
  }
  AddName(m.path, hash, object, *parent);
}

}  // namespace

ReplayedTree ReplayMembers(std::span<const MemberEntry> members) {
  Replayer replayer(members);
  for (uint32_t i = 0; i < members.size(); ++i) replayer.Replay(i);
  return replayer.Take();
}

std::vector<uint32_t> SortLiveNames(const ReplayedTree& replayed) {
  const HugeVector<TreeName>& names = replayed.names;
  std::vector<uint32_t> order;
  order.reserve(replayed.live_names);
  for (uint32_t i = 0; i < names.size(); ++i) {
    if (names[i].alive) order.push_back(i);
  }
  auto less = [&](uint32_t a, uint32_t b) { return TreeOrderLess(names[a].path, names[b].path); };
  if (order.size() < kParallelSortMin) {
    std::sort(order.begin(), order.end(), less);
  } else if (!std::is_sorted(order.begin(), order.end(), less)) {
    auto mid = order.begin() + static_cast<ptrdiff_t>(order.size() / 2);
    std::thread first([&] { std::sort(order.begin(), mid, less); });
    std::sort(mid, order.end(), less);
    first.join();
    std::inplace_merge(order.begin(), mid, order.end(), less);
  }
  return order;
}

HugeVector<TreeNode> LinkNodes(const ReplayedTree& replayed, const std::vector<uint32_t>& order) {
  constexpr uint32_t kNone = UINT32_MAX;
  HugeVector<TreeNode> nodes(order.size());
  std::vector<uint32_t> node_of_name(replayed.names.size(), kNone);
  std::vector<uint32_t> node_of_object(replayed.objects.size(), kNone);
  for (uint32_t k = 0; k < order.size(); ++k) {
    const TreeName& name = replayed.names[order[k]];
    const TreeObject& obj = replayed.objects[name.object];
    TreeNode& n = nodes[k];
    n.path = name.path;
    n.member = obj.member;
    n.type = obj.type;
    n.parent_node = k == 0 ? 0 : node_of_name[name.parent];
    node_of_name[order[k]] = k;
    if (node_of_object[name.object] == kNone) {
      node_of_object[name.object] = k;
    } else {
      n.hardlink = true;
      n.link_node = node_of_object[name.object];
    }
  }
  return nodes;
}

TreeCounts AssignInodes(std::span<const MemberEntry> members, HugeVector<TreeNode>* nodes_ptr) {
  HugeVector<TreeNode>& nodes = *nodes_ptr;
  TreeCounts counts;
  uint64_t next_inode = kRootInode.value;
  for (size_t i = 0; i < nodes.size(); ++i) {
    TreeNode& n = nodes[i];
    if (n.hardlink) {
      ++nodes[n.link_node].nlink;
      ++counts.hardlinks;
      continue;
    }
    n.inode = next_inode++;
    if (n.type == EntryType::kDir) {
      n.nlink += 2;
      if (i > 0) ++nodes[n.parent_node].nlink;
      ++counts.dirs;
      if (n.member == kImplied) ++counts.implied_dirs;
    } else {
      n.nlink += 1;
      if (n.type == EntryType::kSymlink) ++counts.symlinks;
      if (n.type == EntryType::kFile) {
        ++counts.files;
        counts.bytes += members[n.member].size;
      }
    }
    if (n.member != kImplied) n.mtime_ns = members[n.member].mtime_ns;
  }
  counts.max_inode = next_inode - 1;
  // An implied directory takes the mtime of its newest child; children come
  // after parents in tree order, so walk backwards.
  for (size_t i = nodes.size(); i-- > 1;) {
    const TreeNode& n = nodes[i];
    TreeNode& parent = nodes[n.parent_node];
    int64_t child_mtime = n.hardlink ? nodes[n.link_node].mtime_ns : n.mtime_ns;
    if (parent.member == kImplied) parent.mtime_ns = std::max(parent.mtime_ns, child_mtime);
  }
  for (TreeNode& n : nodes) {
    if (n.mtime_ns == INT64_MIN) n.mtime_ns = 0;
  }
  return counts;
}

Tree BuildTree(std::span<const MemberEntry> members) {
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("index write: {} done at {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  ReplayedTree replayed = ReplayMembers(members);
  phase("replay");
  std::vector<uint32_t> order = SortLiveNames(replayed);
  phase("sort");
  Tree tree;
  tree.nodes = LinkNodes(replayed, order);
  phase("tree");
  tree.counts = AssignInodes(members, &tree.nodes);
  phase("inodes");
  tree.report = std::move(replayed.report);
  return tree;
}

}  // namespace shardfs::index
