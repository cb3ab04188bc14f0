#include "base/storage.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <array>
#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "base/parse.h"

namespace shardfs {

namespace {

struct KnownFs {
  int64_t magic;
  std::string_view name;
  bool network;
};

// Magic numbers from the kernel's include/uapi/linux/magic.h and the
// out-of-tree clients' own headers (Lustre, GPFS, BeeGFS, PanFS).
constexpr std::array<KnownFs, 27> kKnown = {{
    {0x6969, "nfs", true},          {0x517B, "smb", true},           {0xFF534D42, "cifs", true},
    {0xFE534D42, "smb2", true},     {0x0BD00BD0, "lustre", true},    {0x00C36400, "ceph", true},
    {0x47504653, "gpfs", true},     {0x19830326, "beegfs", true},    {0x01021997, "9p", true},
    {0x5346414F, "afs", true},      {0x6B414653, "afs", true},       {0x73757245, "coda", true},
    {0x7461636F, "ocfs2", true},    {0x01161970, "gfs2", true},      {0xAAD7AAEA, "panfs", true},
    {0x20030528, "orangefs", true}, {0x65735546, "fuse", false},  // Decided by the subtype.
    {0xEF53, "ext4", false},        {0x58465342, "xfs", false},      {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false},   {0x794C7630, "overlay", false},  {0x2FC12FC1, "zfs", false},
    {0xF2F52010, "f2fs", false},    {0x73717368, "squashfs", false}, {0xE0F5E1E2, "erofs", false},
    {0x858458F6, "ramfs", false},
}};

constexpr int64_t kFuseMagic = 0x65735546;

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

}  // namespace

bool ParseStorageMode(std::string_view text, StorageMode* out) {
  if (text == "auto") {
    *out = StorageMode::kAuto;
  } else if (text == "local") {
    *out = StorageMode::kLocal;
  } else if (text == "network") {
    *out = StorageMode::kNetwork;
  } else {
    return false;
  }
  return true;
}

std::string_view FilesystemName(int64_t f_type, bool* network) {
  for (const KnownFs& k : kKnown) {
    if (k.magic == f_type) {
      *network = k.network;
      return k.name;
    }
  }
  *network = false;
  return {};
}

bool IsNetworkFuseSubtype(std::string_view subtype) {
  // Clients of remote storage that mount through FUSE, by the subtype they
  // set (or the source, for those that set none).
  static constexpr std::string_view kNetwork[] = {
      "sshfs",     "s3fs",         "rclone",    "gcsfuse",   "goofys",        "blobfuse",
      "blobfuse2", "juicefs",      "glusterfs", "ceph-fuse", "ceph",          "mfs",
      "seaweedfs", "alluxio-fuse", "curlftpfs", "cvmfs2",    "s3ql",          "ossfs",
      "cosfs",     "davfs",        "lustre",    "beegfs",    "mountpoint-s3", "weed",
      "geesefs",   "s3backer",     "nfs",       "smbnetfs",  "httpdirfs",     "sshfs-ng"};
  for (std::string_view n : kNetwork) {
    if (subtype == n) return true;
  }
  return false;
}

bool ParseMountinfoLine(std::string_view line, MountinfoLine* out) {
  std::vector<std::string_view> f = Split(line, ' ');
  if (f.size() < 10) return false;
  std::string_view dev = f[2];
  size_t colon = dev.find(':');
  if (colon == std::string_view::npos) return false;
  std::optional<uint64_t> ma = ParseDecimal(dev.substr(0, colon));
  std::optional<uint64_t> mi = ParseDecimal(dev.substr(colon + 1));
  if (!ma || !mi) return false;
  size_t dash = 6;
  while (dash < f.size() && f[dash] != "-") ++dash;
  if (dash + 2 >= f.size()) return false;
  out->major = static_cast<unsigned>(*ma);
  out->minor = static_cast<unsigned>(*mi);
  out->root = f[3];
  out->mountpoint = f[4];
  out->fstype = f[dash + 1];
  out->source = f[dash + 2];
  out->super_options = dash + 3 < f.size() ? f[dash + 3] : std::string_view();
  return true;
}

std::string UnescapeMountinfo(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    auto octal = [&](size_t k) { return field[k] >= '0' && field[k] <= '7'; };
    if (field[i] == '\\' && i + 3 < field.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

std::string MountinfoFstype(std::string_view mountinfo, unsigned major, unsigned minor,
                            std::string* source) {
  // The last line for the device wins: a later mount over the same
  // filesystem shows the same device, and they agree on the type.
  std::string found;
  for (std::string_view line : Split(mountinfo, '\n')) {
    MountinfoLine m;
    if (!ParseMountinfoLine(line, &m)) continue;
    if (m.major != major || m.minor != minor) continue;
    found = std::string(m.fstype);
    if (source != nullptr) *source = std::string(m.source);
  }
  return found;
}

Result<StorageInfo> DetectStorage(const std::string& path) {
  struct statfs sf {};
  if (::statfs(path.c_str(), &sf) != 0) return Status::FromErrno(errno, path);
  StorageInfo out;
  std::string_view name = FilesystemName(static_cast<int64_t>(sf.f_type), &out.network);
  out.fstype =
      name.empty() ? fmt::format("{:#x}", static_cast<uint64_t>(sf.f_type)) : std::string(name);
  if (static_cast<int64_t>(sf.f_type) != kFuseMagic) return out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  const std::string mountinfo = text.str();
  std::string source;
  std::string fstype = MountinfoFstype(mountinfo, major(st.st_dev), minor(st.st_dev), &source);
  if (fstype.empty()) return out;
  out.fstype = fstype;
  std::string_view sub = fstype;
  if (sub.starts_with("fuse."))
    sub.remove_prefix(5);
  else if (sub.starts_with("fuseblk."))
    sub.remove_prefix(8);
  else
    sub = {};
  out.network = IsNetworkFuseSubtype(sub) || (sub.empty() && IsNetworkFuseSubtype(source));
  return out;
}

}  // namespace shardfs
