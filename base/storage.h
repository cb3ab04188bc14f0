// Where a path's bytes live: on a local disk, or on network storage where
// every open, stat and uncached read is a round trip to a server (NFS, SMB,
// Lustre, Ceph, GPFS, BeeGFS, 9p, and FUSE clients of remote storage such as
// sshfs, s3fs, rclone or gcsfuse). The mount reads shards on network storage
// through a node-local chunk cache by default.
//
// How it is told: statfs(2)'s f_type, the filesystem's magic number, which
// the kernel sets for each filesystem type. A FUSE filesystem has one magic
// number for all; its subtype ("fuse.sshfs") is read from
// /proc/self/mountinfo, the line whose device number is the path's st_dev.
// Unknown types are local: a user whose storage is missed says
// -o storage=network.
#ifndef SHARDFS_BASE_STORAGE_H_
#define SHARDFS_BASE_STORAGE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs {

// -o storage: whether shards are on network storage (auto: detected).
enum class StorageMode { kAuto, kLocal, kNetwork };

// Parses "auto", "local" or "network".
bool ParseStorageMode(std::string_view text, StorageMode* out);

struct StorageInfo {
  bool network = false;
  // What messages name: "nfs", "lustre", "fuse.sshfs", "ext4", or
  // "0x58465342" for a type this file does not name.
  std::string fstype;
};

// The storage of `path` (any file or directory; symbolic links followed).
// IoError naming the path if it cannot be stat'd.
Result<StorageInfo> DetectStorage(const std::string& path);

// The name of the filesystem with magic number `f_type` ("" if unknown), and
// whether it is network storage (false if unknown).
std::string_view FilesystemName(int64_t f_type, bool* network);

// Whether a FUSE filesystem of this subtype ("sshfs" of "fuse.sshfs", or the
// mount's source for clients that set no subtype, as mountpoint-s3) is a
// client of remote storage.
bool IsNetworkFuseSubtype(std::string_view subtype);

// One line of /proc/self/mountinfo (proc(5)): ID PARENT MAJOR:MINOR ROOT
// MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS. The views
// point into the line; `root` and `mountpoint` keep the kernel's octal
// escapes (UnescapeMountinfo).
struct MountinfoLine {
  unsigned major = 0;
  unsigned minor = 0;
  std::string_view root;
  std::string_view mountpoint;
  std::string_view fstype;
  std::string_view source;
  std::string_view super_options;
};

// False if `line` is not a mountinfo line.
bool ParseMountinfoLine(std::string_view line, MountinfoLine* out);

// A mountinfo path field with its escapes ("\040" for a space) undone.
std::string UnescapeMountinfo(std::string_view field);

// The fstype field ("fuse.sshfs") of the line of `mountinfo` (the text of
// /proc/self/mountinfo) for device `major`:`minor`, and its source in
// `source` if not null; "" if there is no such line.
std::string MountinfoFstype(std::string_view mountinfo, unsigned major, unsigned minor,
                            std::string* source = nullptr);

}  // namespace shardfs

#endif  // SHARDFS_BASE_STORAGE_H_
