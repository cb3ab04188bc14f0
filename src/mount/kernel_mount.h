// `shardfs mount --kernel`: the view served by the kernel's EROFS driver.
//
// The mount writes an EROFS image of the view (src/erofs/image.h: the
// tree's metadata; the file data stays in the tar shards), keeps it in an
// image cache, and mounts it with the new mount API (fsopen, fsconfig,
// fsmount, move_mount), each shard given as an extra device. No daemon is
// left: reads, lookups and ioctls never leave the kernel.
//
// The image cache is DIR/shardfs-erofs-v1 under -o cache_dir=DIR, else under
// /var/cache/shardfs; both are checked as the chunk cache's are (ours, 0700,
// no symlink; src/reader/cache_dir.h). An image is named by a hash of what it
// depends on: the index database's id (new with every build, index add and
// view create keep it but add versions), where the index is, the version's
// record, the shard table, the rank partition and the writer's format: two
// copies of one index (`cp -a` keeps the id) that each made their own
// versions never share an image. An index without a database id gets a fresh image that
// is unlinked once mounted. Images not in use are removed when more than
// kKeptImages are there, oldest first. An image is reused only while each
// of its shards is the very file it was made from (its composed sparse
// blocks were read from them): its trailer holds the stamp each shard's file
// had then (inode, size, mtime, ctime: base/open_file.h), and a shard whose
// stamp moved since (rewritten with its mtime set back, replaced by a copy,
// chmod) has the image written again.
//
// The shards. Each is opened once, before anything reads it, without
// opening anything but a regular file (base/open_file.h), and checked on that
// descriptor against the index: size, mtime and fingerprint, as the FUSE path
// checks them (index::OpenCheckedShard). The image's composed sparse blocks
// are read from it, and the kernel is given it as /proc/self/fd/N: the kernel
// holds the very file that was checked, and no path length limit applies.
// An index fetched by URL, or one (or a manifest partition) not owned by the
// mounting user or root, may not name a shard by absolute path, nor reach one
// through a symbolic link or "..": a kernel mount is visible to every user,
// and such an index would publish any file root can read. -o
// unsafe_shard_paths lifts that (the fingerprint is checked still). Before 6.13 (or
// with -o kernel_devices=loop) the image and each shard are attached to
// read-only, self-detaching loop devices instead. The kernel then
// reads it as long as the mount lives: a shard replaced by a rename while
// mounted goes on being read as it was; one rewritten in place is read as it
// is now, with no checksum and no EIO (see the man page).
//
// When the kernel path cannot serve (KernelUnavailable): not root
// (CAP_SYS_ADMIN), no EROFS in the kernel, a kernel older than 6.4 (512-byte
// blocks; 6.4 to 6.11 need loop devices), a remote shard, a file the format
// cannot place (src/erofs/image.h), a shard changed since indexed, or an
// option only the daemon can honor (verify=first|always, uid, gid, umask).
// Each is a Status of code NotSupported whose message says why.
#ifndef SHARDFS_SRC_MOUNT_KERNEL_MOUNT_H_
#define SHARDFS_SRC_MOUNT_KERNEL_MOUNT_H_

#include <string>

#include "base/status.h"
#include "src/mount/mount_options.h"

namespace shardfs::mount {

inline constexpr char kKernelImageSubdir[] = "shardfs-erofs-v1";
inline constexpr char kDefaultImageCache[] = "/var/cache/shardfs";
inline constexpr size_t kKeptImages = 8;

// Mounts view of `index` (absolute) at `mountpoint` (absolute, checked) with
// the kernel's EROFS driver. NotSupported with the reason if the kernel path
// cannot serve it (nothing mounted); any other error is a failure.
// `fetched`: `index` is a copy fetched by URL (or unpacked from a bundle),
// which, like an index not owned by the mounting user or root, is not
// trusted to name files on this machine (see the top).
Status MountKernel(const std::string& index, bool fetched, const std::string& mountpoint,
                   const mount::MountOptions& options);

// Whether the mount at `mountpoint` is a kernel (EROFS) mount of shardfs's,
// and if so its image (for `shardfs stats` and `shardfs umount`).
bool IsKernelMount(const std::string& mountpoint, std::string* image);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_KERNEL_MOUNT_H_
