#include "index/inode_set.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/coding.h"

namespace shardfs::index {

bool InodeSet::Contains(uint64_t inode) const {
  // The first run that ends after `inode`.
  auto it = std::upper_bound(runs_.begin(), runs_.end(), inode,
                             [](uint64_t v, const Run& r) { return v < r.end; });
  return it != runs_.end() && it->start <= inode;
}

void InodeSet::Append(uint64_t start, uint64_t end) {
  if (start >= end) return;
  size_ += end - start;
  if (!runs_.empty() && runs_.back().end == start) {
    runs_.back().end = end;
  } else {
    runs_.push_back({start, end});
  }
}

void InodeSet::Encode(std::string* out) const {
  PutVarint64(out, runs_.size());
  uint64_t prev_end = 0;
  for (const Run& r : runs_) {
    PutVarint64(out, r.start - prev_end);
    PutVarint64(out, r.end - r.start - 1);
    prev_end = r.end;
  }
}

Result<InodeSet> InodeSet::Decode(std::string_view data) {
  InodeSet set;
  uint64_t count = 0;
  if (!GetVarint64(&data, &count) || count > data.size()) {
    return Status::Corruption("inode set: bad run count");
  }
  set.runs_.reserve(count);
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t gap = 0, len = 0;
    if (!GetVarint64(&data, &gap) || !GetVarint64(&data, &len)) {
      return Status::Corruption(fmt::format("inode set: run {} of {} is cut short", i, count));
    }
    uint64_t start = prev_end + gap;
    uint64_t end = start + len + 1;
    // Runs after the first are apart from the one before (gap > 0), and
    // nothing wraps.
    if ((i > 0 && gap == 0) || start < prev_end || end <= start) {
      return Status::Corruption(fmt::format("inode set: run {} overlaps or wraps", i));
    }
    set.runs_.push_back({start, end});
    set.size_ += end - start;
    prev_end = end;
  }
  if (!data.empty()) return Status::Corruption("inode set: trailing bytes");
  return set;
}

InodeSet InodeSet::FromUnsorted(std::vector<uint64_t> inodes) {
  std::sort(inodes.begin(), inodes.end());
  InodeSet set;
  for (size_t i = 0; i < inodes.size();) {
    size_t j = i + 1;
    while (j < inodes.size() && inodes[j] <= inodes[j - 1] + 1) ++j;
    set.Append(inodes[i], inodes[j - 1] + 1);
    i = j;
  }
  return set;
}

InodeSet InodeSet::Union(const InodeSet& a, const InodeSet& b) {
  InodeSet set;
  size_t i = 0, j = 0;
  while (i < a.runs_.size() || j < b.runs_.size()) {
    Run r;
    if (j == b.runs_.size() || (i < a.runs_.size() && a.runs_[i].start <= b.runs_[j].start)) {
      r = a.runs_[i++];
    } else {
      r = b.runs_[j++];
    }
    if (!set.runs_.empty() && r.start <= set.runs_.back().end) {
      if (r.end > set.runs_.back().end) {
        set.size_ += r.end - set.runs_.back().end;
        set.runs_.back().end = r.end;
      }
    } else {
      set.Append(r.start, r.end);
    }
  }
  return set;
}

}  // namespace shardfs::index
