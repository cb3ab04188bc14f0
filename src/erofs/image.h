// An EROFS image of a view: the tree's metadata in the kernel's read-only
// filesystem format, its file data left where it lies in the tar shards.
// `shardfs mount --kernel` mounts the image with the shards as extra devices,
// and every read is then the kernel's own (no daemon, no FUSE round trip).
//
// Written from the format's specification (the kernel's
// Documentation/filesystems/erofs.rst and the on-disk layout of
// fs/erofs/erofs_fs.h); no other implementation's code. The image uses only
// what the kernel has read since 6.4: 512-byte blocks, extended inodes, a
// device table, chunk-based files and plain or inline metadata.
//
//   byte 0      1024        1152      1280             ...          block-aligned
//   | zero      | superblock | root    | device table   | inodes     | directory and
//   |           | (128 B)    | inode   | (128 B/shard)  | (32 B      | long-symlink
//   |           |            | (nid 36)|                |  aligned)  | data blocks
//
// - Blocks are 512 bytes, like tar's, so a member's data (always at a
//   512-byte boundary of its shard) is a run of whole blocks of a device.
// - Every shard that holds a file of the view is an extra device, numbered
//   1..N in ascending shard id; ErofsImageInfo::shards says which is which,
//   and the mount must pass them in that order.
// - Every inode is extended (64 bytes: 32-bit ids, 64-bit size, per-inode
//   mtime in ns, 32-bit nlink), with the index's mode, owner, mtime and link
//   count. A hard link is one inode named by several directory entries.
// - A regular file with data is chunk-based: one chunk index (device, start
//   block) per chunk, the chunk as large as the file needs, up to 2 GiB (one index for
//   most files). A sparse file takes the largest chunk size that its extents
//   are aligned to; a hole is a null chunk. An empty file has no data.
// - A sparse file whose extents are not block-aligned (GNU tar 1.13 writes a
//   last extent of one byte at the end, say) takes 512-byte chunks, and each
//   block that is neither all hole nor one whole aligned block of its shard
//   is composed (data and zeros) and stored in the image itself (device 0).
//   Those bytes are read from the shard when the image is written and
//   checked against the file's checksum first; at most kErofsMaxCopiedBytes
//   of such files' data are read per image.
// - A directory is plain: blocks of (nid, name offset, type) entries, then
//   the names, sorted by bytes, "." and ".." included, as the kernel's lookup
//   (a binary search) expects.
// - A symlink's target is inline after its inode when it fits in the same
//   block, else in a data block of its own.
// The root inode sits right after the superblock: the superblock holds its
// number in 16 bits.
//
// What the format cannot hold, a view with it cannot be written: a file of a
// remote shard, a member whose data is not at a 512-byte boundary, unaligned
// sparse files with more than kErofsMaxCopiedBytes of data, a shard of 2 TiB
// or more (32-bit block numbers), more than 65,535 shards. ErofsTreeFromIndex refuses those
// with NotSupported naming the file or shard; the mount then falls back to
// FUSE or refuses. src/erofs/tree.h makes the tree of a view.
#ifndef SHARDFS_SRC_EROFS_IMAGE_H_
#define SHARDFS_SRC_EROFS_IMAGE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "index/schema.h"

namespace shardfs::erofs {

inline constexpr uint32_t kErofsBlockBits = 9;
inline constexpr uint32_t kErofsBlockSize = 1u << kErofsBlockBits;
// The null block address: block numbers stop below it.
inline constexpr uint32_t kErofsNullAddr = 0xFFFFFFFF;
inline constexpr uint64_t ErofsAlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
// The most extra devices the superblock can name.
inline constexpr size_t kErofsMaxDevices = 65535;
// The most data of unaligned sparse files read to compose blocks, per image.
inline constexpr uint64_t kErofsMaxCopiedBytes = 256 << 20;

// One inode of the tree. Files name a device (1-based) and a byte offset in
// it; sparse files carry extents with physical offsets in that device.
struct ErofsNode {
  index::EntryType type = index::EntryType::kFile;
  uint32_t mode = 0;  // st_mode, type bits included.
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 1;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  // The index's inode number, kept in the 32-bit i_ino field (for 32-bit
  // stat); what stat shows on 64-bit machines is the kernel's own, the nid.
  uint64_t ino = 0;
  uint32_t device = 0;
  uint64_t offset = 0;
  bool sparse = false;
  std::vector<index::Extent> extents;  // Sparse files.
  // Unaligned sparse files: the composed 512-byte blocks stored in the image,
  // by block number in the file, ascending.
  std::vector<std::pair<uint64_t, std::string>> copied;
  std::string target;  // Symlinks.
  // Directories: children by name (bytes, sorted, no "." or ".."), and the
  // parent's node (the root is its own).
  std::vector<std::pair<std::string, uint32_t>> children;
  uint32_t parent = 0;
};

// A tree to write: node 0 is the root directory. `device_blocks[d - 1]` is
// the size in blocks of device d.
struct ErofsTree {
  std::vector<ErofsNode> nodes;
  std::vector<uint32_t> device_blocks;
  // Per device d (at d - 1): the shard id it is, for the mount.
  std::vector<index::ShardId> device_shards;
};

// The chunk size of file `n`, as bits above the block size: the smallest
// chunk that holds a whole plain file (one index, up to 2 GiB), for a sparse
// file the largest to which all its extents are aligned (so that every chunk
// is all data, contiguous in its device, or all hole), 0 for one with
// composed blocks. -1 for a sparse file that needs composed blocks and has
// none (an extent off a block boundary).
int ErofsChunkBits(const ErofsNode& n);

struct ErofsImageInfo {
  uint64_t bytes = 0;
  uint64_t inodes = 0;
  // Extra devices in order: the shard ids to pass as devices 1..N.
  std::vector<index::ShardId> shards;
};

// Writes the image of `tree` to `fd` from its current position, sequentially.
// `uuid` is the volume's (the same input gives the same image). InvalidArgument
// if the tree breaks the format's limits (see ErofsTreeFromIndex), IoError if
// a write fails.
Result<ErofsImageInfo> WriteErofsImage(const ErofsTree& tree, int fd,
                                       const std::array<uint8_t, 16>& uuid);

}  // namespace shardfs::erofs

#endif  // SHARDFS_SRC_EROFS_IMAGE_H_
