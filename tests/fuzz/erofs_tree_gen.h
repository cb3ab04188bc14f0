// Test support for the EROFS image writer (src/erofs/image.h): a tree made
// from arbitrary bytes (the fuzzer's input, or a seeded PRNG's), written,
// read back with the independent checker (src/erofs/check.h) and compared
// entry by entry. Header-only: the fuzz target and the unit tests include it.
#ifndef SHARDFS_TESTS_FUZZ_EROFS_TREE_GEN_H_
#define SHARDFS_TESTS_FUZZ_EROFS_TREE_GEN_H_

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "src/erofs/check.h"
#include "src/erofs/image.h"

namespace shardfs::erofs_test {

using erofs::ErofsNode;
using erofs::ErofsTree;
using index::EntryType;

// Numbers from bytes; zeros once they run out.
class ByteSource {
 public:
  explicit ByteSource(std::string_view bytes) : bytes_(bytes) {}
  uint64_t Next(uint64_t bound) {  // In [0, bound): as many bytes as the bound needs.
    uint64_t v = 0;
    for (uint64_t range = 1; range < bound && pos_ < bytes_.size(); range <<= 8) {
      v = (v << 8) | static_cast<uint8_t>(bytes_[pos_++]);
    }
    return bound == 0 ? 0 : v % bound;
  }
  bool empty() const { return pos_ >= bytes_.size(); }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// A tree of up to `max_nodes` entries shaped by `src`: directories, files
// (empty, plain, aligned sparse, unaligned sparse with composed blocks),
// symlinks around the inline limit, hard links; names of 1..255 bytes of
// any value but '/' and NUL; ids, modes, link counts and mtimes that take
// both inode forms. `devices` devices of `device_bytes` each.
inline ErofsTree MakeTree(ByteSource& src, size_t max_nodes, uint32_t devices = 3,
                          uint64_t device_bytes = 1ull << 30) {
  ErofsTree t;
  t.device_blocks.assign(devices, static_cast<uint32_t>(device_bytes / 512));
  for (uint32_t d = 0; d < devices; ++d) t.device_shards.push_back(index::ShardId{d});
  const int64_t times[] = {0, 1'600'000'000'000'000'123, -5'000'000'001, 4'200'000'000'999'999'999};
  auto fill = [&](ErofsNode& n) {
    n.uid = src.Next(3) == 0 ? static_cast<uint32_t>(src.Next(1u << 31)) : 1000;
    n.gid = src.Next(3) == 0 ? static_cast<uint32_t>(src.Next(1u << 31)) : 1000;
    n.mtime_ns = src.Next(2) == 0 ? times[1] : times[src.Next(4)] + int64_t(src.Next(1000));
    n.ino = t.nodes.size() + 1;
  };
  ErofsNode root;
  root.type = EntryType::kDir;
  root.mode = S_IFDIR | 0755;
  root.nlink = 2;
  fill(root);
  t.nodes.push_back(root);
  std::vector<uint32_t> dirs{0};
  std::vector<uint32_t> linkable;
  std::vector<std::set<std::string>> names(1);
  auto add = [&](uint32_t parent, ErofsNode n) -> uint32_t {
    std::string name;
    size_t len = src.Next(4) == 0 ? 1 + src.Next(255) : 1 + src.Next(12);
    for (size_t i = 0; i < len; ++i) {
      char c = static_cast<char>(src.Next(256));
      if (c == '/' || c == '\0') c = '_';
      name.push_back(c);
    }
    if (name == "." || name == "..") name += "x";
    while (!names[parent].insert(name).second) name += "+";
    n.parent = parent;
    uint32_t id = static_cast<uint32_t>(t.nodes.size());
    t.nodes.push_back(std::move(n));
    t.nodes[parent].children.emplace_back(name, id);
    names.emplace_back();
    return id;
  };
  uint64_t next_offset = 0;
  while (t.nodes.size() < max_nodes && !src.empty()) {
    uint32_t parent = dirs[src.Next(dirs.size())];
    ErofsNode n;
    fill(n);
    switch (src.Next(6)) {
      case 0: {
        n.type = EntryType::kDir;
        n.mode = S_IFDIR | 0750;
        n.nlink = 2;
        dirs.push_back(add(parent, std::move(n)));
        t.nodes[parent].nlink++;
        break;
      }
      case 1:
      case 2: {
        n.type = EntryType::kFile;
        n.mode = S_IFREG | static_cast<uint32_t>(src.Next(07777));
        const uint64_t sizes[] = {0, 1, 511, 512, 513, 4096, 100000, 5ull << 30};
        n.size = src.Next(2) ? sizes[src.Next(8)] : src.Next(1 << 20);
        n.device = 1 + static_cast<uint32_t>(src.Next(t.device_blocks.size()));
        n.offset = (next_offset += 512 * (1 + src.Next(100000))) % (device_bytes / 2);
        if (n.size > device_bytes / 2) n.size = device_bytes / 2;
        if (n.size == 0) n.device = 0;
        linkable.push_back(add(parent, std::move(n)));
        break;
      }
      case 3: {  // Sparse: extents on 4 KiB, or not (composed blocks).
        n.type = EntryType::kFile;
        n.mode = S_IFREG | 0644;
        n.sparse = true;
        n.size = 1 + src.Next(1 << 22);
        n.device = 1;
        bool aligned = src.Next(2);
        uint64_t at = 0, physical = 512 * src.Next(1000);
        while (at < n.size && n.extents.size() < 6) {
          at += aligned ? 4096 * src.Next(64) : src.Next(300000);
          if (at >= n.size) break;
          uint64_t len =
              std::min(n.size - at, aligned ? 4096 * (1 + src.Next(8)) : 1 + src.Next(9000));
          if (aligned && at + len != n.size && len % 4096) len -= len % 4096;
          if (len == 0) break;
          n.extents.push_back({at, len, physical});
          physical += aligned ? (len + 511) / 512 * 512 : len;
          at += len;
        }
        if (!aligned) {
          // What ErofsTreeFromIndex composes: every block an extent touches
          // that is not one whole aligned block of it (bytes made up here).
          std::map<uint64_t, std::string> blocks;
          for (const index::Extent& e : n.extents) {
            for (uint64_t b = e.logical / 512; b * 512 < e.logical + e.length; ++b) {
              uint64_t lo = b * 512, hi = std::min(lo + 512, n.size);
              bool whole = e.logical <= lo && e.logical + e.length >= hi &&
                           (e.physical + lo - e.logical) % 512 == 0;
              if (!whole) blocks.emplace(b, std::string(512, static_cast<char>('a' + b % 26)));
            }
          }
          n.copied.assign(blocks.begin(), blocks.end());
        }
        add(parent, std::move(n));
        break;
      }
      case 4: {
        n.type = EntryType::kSymlink;
        n.mode = S_IFLNK | 0777;
        const size_t lens[] = {1, 447, 448, 449, 480, 511, 512, 4095};
        size_t len = src.Next(2) ? lens[src.Next(8)] : 1 + src.Next(4095);
        n.target.assign(len, 'a');
        uint64_t seed = src.Next(1ull << 32);  // The target's bytes from one number.
        for (char& c : n.target)
          c = static_cast<char>('a' + (seed = seed * 6364136223846793005ull + 1) % 26);
        n.size = len;
        linkable.push_back(add(parent, std::move(n)));
        break;
      }
      default: {  // Another name of a file or symlink.
        if (linkable.empty()) break;
        uint32_t target = linkable[src.Next(linkable.size())];
        std::string name =
            "link" + std::to_string(t.nodes.size()) + "-" + std::to_string(src.Next(99));
        if (!names[parent].insert(name).second) break;
        t.nodes[parent].children.emplace_back(name, target);
        t.nodes[target].nlink++;
        break;
      }
    }
  }
  for (ErofsNode& n : t.nodes) {
    std::sort(n.children.begin(), n.children.end());
  }
  return t;
}

// Writes `tree` to a memory file and returns the image bytes.
inline Result<std::string> WriteImage(const ErofsTree& tree) {
  UniqueFd fd(::memfd_create("erofs-test", MFD_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "memfd_create");
  std::array<uint8_t, 16> uuid{};
  SHARDFS_ASSIGN_OR_RETURN(erofs::ErofsImageInfo info,
                           erofs::WriteErofsImage(tree, fd.get(), uuid));
  std::string image(info.bytes, '\0');
  SHARDFS_RETURN_IF_ERROR(PreadExact(fd.get(), image.data(), image.size(), 0));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != info.bytes) {
    return Status::Corruption("the image is not as long as the writer says");
  }
  return image;
}

// Whether `got` (the checker's reading of `image`) is `t`: "" if so, else
// the first difference.
inline std::string CompareTree(const ErofsTree& t, const std::vector<erofs::ErofsEntry>& got,
                               std::string_view image) {
  std::vector<std::pair<std::string, uint32_t>> want;  // Depth first, by name.
  std::vector<std::pair<std::string, uint32_t>> stack{{"", 0}};
  while (!stack.empty()) {
    auto [path, id] = stack.back();
    stack.pop_back();
    want.emplace_back(path, id);
    const ErofsNode& n = t.nodes[id];
    if (n.type != EntryType::kDir) continue;
    for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) {
      stack.emplace_back(path.empty() ? it->first : path + "/" + it->first, it->second);
    }
  }
  if (want.size() != got.size()) {
    return "entries: " + std::to_string(got.size()) + " read, " + std::to_string(want.size()) +
           " written";
  }
  std::map<uint32_t, uint64_t> nid_of;
  std::set<uint64_t> nids;
  for (size_t i = 0; i < want.size(); ++i) {
    const ErofsNode& n = t.nodes[want[i].second];
    const erofs::ErofsEntry& g = got[i];
    const std::string at = "'" + want[i].first + "': ";
    if (g.path != want[i].first) return at + "read as '" + g.path + "'";
    if (g.type != n.type || g.mode != n.mode || g.uid != n.uid || g.gid != n.gid ||
        g.nlink != n.nlink || g.mtime_ns != n.mtime_ns || g.target != n.target) {
      return at + "attributes differ";
    }
    if (n.type != EntryType::kDir && g.size != n.size) return at + "size differs";
    auto [it, fresh] = nid_of.emplace(want[i].second, g.nid);
    if (it->second != g.nid) return at + "one inode, two nids";
    if (fresh && !nids.insert(g.nid).second) return at + "two inodes, one nid";
    if (n.type != EntryType::kFile || n.size == 0) {
      if (!g.pieces.empty()) return at + "data where none was written";
      continue;
    }
    if (!n.sparse) {
      std::vector<erofs::ErofsPiece> one{{0, n.size, n.device, n.offset}};
      if (g.pieces != one) return at + "data is elsewhere";
      continue;
    }
    // Block by block: composed blocks hold their bytes in the image, the
    // rest are where the extents say, holes nowhere.
    size_t k = 0, p = 0;
    for (uint64_t b = 0; b * 512 < n.size; ++b) {
      uint64_t lo = b * 512, len = std::min<uint64_t>(512, n.size - lo);
      while (p < g.pieces.size() && g.pieces[p].logical + g.pieces[p].length <= lo) ++p;
      const erofs::ErofsPiece* piece =
          p < g.pieces.size() && g.pieces[p].logical <= lo ? &g.pieces[p] : nullptr;
      auto where = [&] { return at + "block " + std::to_string(b) + ": "; };
      if (k < n.copied.size() && n.copied[k].first == b) {
        if (piece == nullptr || piece->device != 0) return where() + "not in the image";
        uint64_t phys = piece->physical + (lo - piece->logical);
        if (image.substr(phys, len) != std::string_view(n.copied[k].second).substr(0, len)) {
          return where() + "composed bytes differ";
        }
        ++k;
        continue;
      }
      const index::Extent* e = nullptr;
      for (const index::Extent& x : n.extents) {
        if (x.logical <= lo && lo < x.logical + x.length) e = &x;
      }
      if (e == nullptr) {
        if (piece != nullptr) return where() + "a hole that is not";
        continue;
      }
      if (piece == nullptr || piece->device != n.device ||
          piece->physical + (lo - piece->logical) != e->physical + (lo - e->logical)) {
        return where() + "data is elsewhere";
      }
    }
  }
  return "";
}

}  // namespace shardfs::erofs_test

#endif  // SHARDFS_TESTS_FUZZ_EROFS_TREE_GEN_H_
