#include "tools/builder/view_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <new>
#include <thread>
#include <utility>

namespace shardfs::builder {
namespace {

using index::EntryRecord;
using index::EntryType;
using index::IndexReader;
using index::InodeId;

// Moves the elements of `v` whose value is in sorted `drop` out of it;
// REQUIRES: v sorted.
void EraseSorted(std::vector<std::string>* v, const std::vector<std::string>& drop) {
  if (drop.empty()) return;
  std::vector<std::string> kept;
  kept.reserve(v->size());
  auto d = drop.begin();
  for (auto& s : *v) {
    while (d != drop.end() && *d < s) ++d;
    if (d != drop.end() && *d == s) continue;
    kept.push_back(std::move(s));
  }
  *v = std::move(kept);
}

}  // namespace

std::string ViewNameOf(const IndexReader& reader) { return reader.version().label(); }

Status WalkTree(
    const IndexReader& reader,
    const std::function<Status(std::string_view, std::string_view, const EntryRecord&)>& fn) {
  // Directories still to list: (inode, path with its trailing '/'). A stack,
  // not recursion: a deep tree must not exhaust ours.
  std::vector<std::pair<InodeId, std::string>> todo;
  todo.emplace_back(index::kRootInode, "");
  while (!todo.empty()) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const InodeId dir = todo.back().first;
    const std::string prefix = std::move(todo.back().second);
    todo.pop_back();
    Status bad;
    Status s = reader.ForEachChild(dir, "", [&](std::string_view name, const EntryRecord& e) {
      if (e.type == EntryType::kDir) todo.emplace_back(e.inode, fmt::format("{}{}/", prefix, name));
      bad = fn(prefix, name, e);
      return bad.ok();
    });
    if (s.ok()) s = bad;
    if (!s.ok()) return s.WithContext(fmt::format("listing /{}", prefix));
  }
  return Status::Ok();
}

Result<ViewEntries> WalkView(const IndexReader& reader) {
  ViewEntries out;
  out.Reserve(reader.MetaNumber(index::kMetaMaxInode));
  SHARDFS_RETURN_IF_ERROR(
      WalkTree(reader, [&](std::string_view prefix, std::string_view name, const EntryRecord& e) {
        out.Add(e.inode.value, prefix, name, e.type == EntryType::kDir);
        return Status::Ok();
      }));
  return out;
}

namespace {

// Sorts the lists of `d` and moves to d->replaced the paths that are in
// both views under different inodes.
void SortAndFindReplaced(ViewDiff* d) {
  std::sort(d->added.begin(), d->added.end());
  std::sort(d->removed.begin(), d->removed.end());
  std::sort(d->renamed.begin(), d->renamed.end(), [](const ViewRename& x, const ViewRename& y) {
    return x.from != y.from ? x.from < y.from : x.to < y.to;
  });
  // A path that left A's side (removed, or renamed away) and arrived on B's
  // side under another inode (added, or renamed to) is in both views under
  // different inodes: replaced. Under one inode it would have been unchanged.
  std::vector<std::string> gone = d->removed, came = d->added;
  for (const auto& r : d->renamed) {
    gone.push_back(r.from);
    came.push_back(r.to);
  }
  std::sort(gone.begin(), gone.end());
  std::sort(came.begin(), came.end());
  std::set_intersection(gone.begin(), gone.end(), came.begin(), came.end(),
                        std::back_inserter(d->replaced));
  EraseSorted(&d->added, d->replaced);
  EraseSorted(&d->removed, d->replaced);
}

}  // namespace

ViewDiff DiffEntries(const ViewEntries& a, const ViewEntries& b) {
  // Sorted (inode, position) pairs: sorting 16 bytes a side beats moving
  // entries around.
  auto by_inode = [](const ViewEntries& v) {
    std::vector<std::pair<uint64_t, uint32_t>> order(v.size());
    for (size_t k = 0; k < v.size(); ++k) order[k] = {v.inode(k), static_cast<uint32_t>(k)};
    auto by_inode_then_path = [&](const auto& x, const auto& y) {
      if (x.first != y.first) return x.first < y.first;
      return v.path(x.second) < v.path(y.second);
    };
    if (!std::is_sorted(order.begin(), order.end(), by_inode_then_path)) {
      std::sort(order.begin(), order.end(), by_inode_then_path);
    }
    return order;
  };
  const auto oa = by_inode(a), ob = by_inode(b);
  auto path_a = [&](size_t k) { return a.path(oa[k].second); };
  auto path_b = [&](size_t k) { return b.path(ob[k].second); };
  ViewDiff d;
  std::vector<std::string> old_only, new_only;
  size_t i = 0, j = 0;
  while (i < oa.size() || j < ob.size()) {
    bool in_a = i < oa.size() && (j >= ob.size() || oa[i].first <= ob[j].first);
    bool in_b = j < ob.size() && (i >= oa.size() || ob[j].first <= oa[i].first);
    uint64_t inode = in_a ? oa[i].first : ob[j].first;
    size_t i_end = i, j_end = j;
    if (in_a)
      while (i_end < oa.size() && oa[i_end].first == inode) ++i_end;
    if (in_b)
      while (j_end < ob.size() && ob[j_end].first == inode) ++j_end;
    if (!in_b) {
      for (; i < i_end; ++i) d.removed.emplace_back(path_a(i));
      continue;
    }
    if (!in_a) {
      for (; j < j_end; ++j) d.added.emplace_back(path_b(j));
      continue;
    }
    if (i_end - i == 1 && j_end - j == 1) {  // The common case: one path a side.
      if (path_a(i) != path_b(j))
        d.renamed.push_back({std::string(path_a(i)), std::string(path_b(j))});
      ++i, ++j;
      continue;
    }
    // Both sides' paths of this inode are sorted: one merge splits them.
    old_only.clear();
    new_only.clear();
    while (i < i_end || j < j_end) {
      if (j == j_end || (i < i_end && path_a(i) < path_b(j))) {
        old_only.emplace_back(path_a(i++));
      } else if (i == i_end || path_b(j) < path_a(i)) {
        new_only.emplace_back(path_b(j++));
      } else {
        ++i, ++j;
      }
    }
    size_t pairs = std::min(old_only.size(), new_only.size());
    for (size_t k = 0; k < pairs; ++k) {
      d.renamed.push_back({std::move(old_only[k]), std::move(new_only[k])});
    }
    for (size_t k = pairs; k < old_only.size(); ++k) d.removed.push_back(std::move(old_only[k]));
    for (size_t k = pairs; k < new_only.size(); ++k) d.added.push_back(std::move(new_only[k]));
  }
  SortAndFindReplaced(&d);
  return d;
}

Result<ViewDiff> DiffViews(const std::string& index_path, const std::string& spec_a,
                           const std::string& spec_b, const index::PartitionResolver& resolve) {
  ViewEntries sides[2];
  std::string names[2];
  Status status[2];
  const std::string* specs[2] = {&spec_a, &spec_b};
  // The two sides are walked at once, each on its own thread.
  auto walk = [&](int k) {
    const std::string& spec = *specs[k];
    index::ReaderOptions options;
    options.view = spec;
    options.resolve_partition = resolve;
    auto reader = IndexReader::Open(index_path, options);
    if (!reader.ok()) {
      // Open's messages name the index, and the view when it is the problem.
      const Status& s = reader.status();
      status[k] = spec.empty() || s.message().find(spec) != std::string::npos
                      ? s
                      : s.WithContext(fmt::format("view {}", spec));
      return;
    }
    names[k] = ViewNameOf(**reader);
    auto entries = WalkView(**reader);
    if (!entries.ok()) {
      status[k] =
          entries.status().WithContext(fmt::format("index {}: view {}", index_path, names[k]));
      return;
    }
    sides[k] = std::move(*entries);
  };
  std::thread other([&] {
    try {
      walk(1);
    } catch (const std::bad_alloc&) {
      status[1] = Status::IoError("out of memory while listing a view");
    }
  });
  walk(0);
  other.join();
  SHARDFS_RETURN_IF_ERROR(status[0]);
  SHARDFS_RETURN_IF_ERROR(status[1]);
  ViewDiff d = DiffEntries(sides[0], sides[1]);
  d.a = std::move(names[0]);
  d.b = std::move(names[1]);
  return d;
}

std::string FormatDiffText(const ViewDiff& diff) {
  // (sort path, line); lines of one path keep the order - + R M.
  std::vector<std::pair<std::string_view, std::string>> lines;
  lines.reserve(diff.added.size() + diff.removed.size() + diff.renamed.size() +
                diff.replaced.size());
  for (const auto& p : diff.removed) lines.emplace_back(p, "- " + p);
  for (const auto& p : diff.added) lines.emplace_back(p, "+ " + p);
  for (const auto& r : diff.renamed)
    lines.emplace_back(r.from, fmt::format("R {} -> {}", r.from, r.to));
  for (const auto& p : diff.replaced) lines.emplace_back(p, "M " + p);
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string out;
  for (const auto& [_, line] : lines) out.append(line).push_back('\n');
  out += fmt::format("{} -> {}: {} added, {} removed, {} renamed, {} replaced\n", diff.a, diff.b,
                     diff.added.size(), diff.removed.size(), diff.renamed.size(),
                     diff.replaced.size());
  return out;
}

}  // namespace shardfs::builder
