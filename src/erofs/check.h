// A reader of the EROFS images src/erofs/image.h writes, independent of the
// writer: it follows the kernel's rules for the on-disk format (fs/erofs) and
// the stricter ones the writer promises, and gives back the tree it finds.
// The unit tests and the image fuzzer write trees, read them back with this,
// and compare; the integration tests have the kernel itself read them.
//
// Checked: the superblock (magic, 512-byte blocks, only the features the
// writer uses, the device table), every inode reachable from the root
// (inside the image, not across a block, a known layout, no xattrs),
// directories (entries of 12 bytes, name offsets in order, names non-empty
// without '/' or NUL, sorted by bytes across blocks, "." and ".." naming the
// directory and its parent, entry types matching the inodes, no directory
// reached twice), symlinks (inline within the inode's block, or blocks inside
// the image) and files (chunk indexes inside the image, devices that exist,
// every byte of the file inside its device or the image).
#ifndef SHARDFS_SRC_EROFS_CHECK_H_
#define SHARDFS_SRC_EROFS_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::erofs {

// Where `length` bytes of a file at `logical` are: device 0 is the image.
// Holes are not listed.
struct ErofsPiece {
  uint64_t logical = 0;
  uint64_t length = 0;
  uint32_t device = 0;
  uint64_t physical = 0;
  friend bool operator==(const ErofsPiece&, const ErofsPiece&) = default;
};

struct ErofsEntry {
  std::string path;  // From the root, '/'-separated; "" for the root.
  index::EntryType type = index::EntryType::kFile;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t nid = 0;                // Names of one inode share it.
  std::string target;              // Symlinks.
  std::vector<ErofsPiece> pieces;  // Files, merged where contiguous.
};

// The tree of `image` in depth-first, name order. `device_bytes[d - 1]` is
// the size of device d. Corruption naming the byte offset and what is wrong
// for the first rule broken.
Result<std::vector<ErofsEntry>> CheckErofsImage(std::string_view image,
                                                const std::vector<uint64_t>& device_bytes);

}  // namespace shardfs::erofs

#endif  // SHARDFS_SRC_EROFS_CHECK_H_
