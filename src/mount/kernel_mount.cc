#include "src/mount/kernel_mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/coding.h"
#include "base/fd.h"
#include "base/io.h"
#include "base/log.h"
#include "base/open_file.h"
#include "base/paths.h"
#include "index/fingerprint.h"
#include "index/index_reader.h"
#include "src/erofs/image.h"
#include "src/erofs/tree.h"
#include "src/mount/control_socket.h"
#include "src/reader/cache_dir.h"

namespace shardfs::mount {

namespace {

// Bumped whenever the writer's output for the same view changes (3: a rank
// is a run of samples, no longer whole shards).
constexpr int kImageFormat = 3;
constexpr std::string_view kImageSuffix = ".erofs";
// After the image's last block: "SHARDFS-DEVICES", u32 count, per device its
// u32 shard id and the stamp its file had when the image was written (u64
// dev, ino, size, mtime ns, ctime ns: base/open_file.h), then the trailer's
// own offset (u64): the shards to pass as devices 1..N, without walking the
// view again, and what says that they are still the files the image was
// made from. The kernel reads only the blocks the superblock counts.
constexpr std::string_view kTrailerMagic = "SHARDFS-DEVICES";
constexpr size_t kDeviceEntrySize = 4 + 5 * 8;
constexpr int kCapSysAdmin = 21;
constexpr auto kCacheLockWait = std::chrono::seconds(30);

Status NotSupported(std::string why) { return Status::NotSupported(std::move(why)); }

// The effective capabilities of this process (CapEff in /proc/self/status).
bool HasSysAdmin() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("CapEff:")) continue;
    uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps >> kCapSysAdmin) & 1;
  }
  return false;
}

bool KernelHasErofs() {
  std::ifstream in("/proc/filesystems");
  for (std::string line; std::getline(in, line);) {
    if (line.ends_with("\terofs")) return true;
  }
  return false;
}

// What in the kernel or the options keeps the kernel path from serving;
// sets *loop when the image and shards go to the kernel as loop devices.
Status CheckKernel(const mount::MountOptions& o, bool* loop) {
  if (o.fs.verify != reader::VerifyMode::kOff) {
    return NotSupported("verify=first|always checks every read; the kernel path reads unchecked");
  }
  if (o.fs.uid >= 0 || o.fs.gid >= 0 || o.fs.umask >= 0) {
    return NotSupported("uid, gid and umask are applied by the FUSE daemon only");
  }
  if (!HasSysAdmin()) {
    return NotSupported("mounting a kernel filesystem needs root (CAP_SYS_ADMIN)");
  }
  if (!KernelHasErofs()) return NotSupported("the kernel has no EROFS (CONFIG_EROFS_FS)");
  struct utsname u;
  int major = 0, minor = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) {
    return NotSupported("cannot tell the kernel's version");
  }
  if (major < 6 || (major == 6 && minor < 4)) {
    return NotSupported(
        fmt::format("kernel {} has no EROFS with 512-byte blocks (6.4+)", u.release));
  }
  // Mounts of files came in 6.12, whose first releases read them with
  // direct I/O whenever the file allowed it (EIO on 4 KiB-sector disks);
  // buffered reads, the default since 6.13, are what auto waits for.
  bool files = major > 6 || minor >= 12;
  bool files_by_default = major > 6 || minor >= 13;
  if (o.kernel_devices == mount::KernelDevices::kFiles && !files) {
    return NotSupported(
        fmt::format("kernel {} mounts EROFS images from files only from 6.12 (kernel_devices=loop)",
                    u.release));
  }
  *loop = o.kernel_devices == mount::KernelDevices::kLoop ||
          (o.kernel_devices == mount::KernelDevices::kAuto && !files_by_default);
  if (*loop && ::access("/dev/loop-control", R_OK | W_OK) != 0) {
    return NotSupported(
        fmt::format("kernel {}: loop devices are needed before 6.13, and "
                    "/dev/loop-control cannot be used: {}",
                    u.release, std::strerror(errno)));
  }
  return Status::Ok();
}

// Attaches the open file `fd` read-only to a free loop device that detaches
// itself once its last user is gone (the mount, at unmount). Returns the
// device, open: until the mount holds it, closing it detaches it.
Result<UniqueFd> AttachLoop(int fd, const std::string& what, std::string* device) {
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control.valid()) return Status::FromErrno(errno, "/dev/loop-control");
  for (int attempt = 0; attempt < 64; ++attempt) {
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return Status::FromErrno(errno, "/dev/loop-control: no free loop device");
    *device = fmt::format("/dev/loop{}", n);
    UniqueFd loop(::open(device->c_str(), O_RDONLY | O_CLOEXEC));
    if (!loop.valid()) return Status::FromErrno(errno, *device);
    loop_config config;
    std::memset(&config, 0, sizeof config);
    config.fd = static_cast<uint32_t>(fd);
    config.block_size = erofs::kErofsBlockSize;
    // Direct I/O keeps the file's pages out of the page cache twice (as the
    // file's and as the device's); not every filesystem takes it.
    for (uint32_t direct : {uint32_t{LO_FLAGS_DIRECT_IO}, 0u}) {
      config.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR | direct;
      if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) return loop;
      if (errno == EBUSY) break;  // Taken meanwhile: ask for another.
    }
    if (errno != EBUSY) return Status::FromErrno(errno, fmt::format("{} for {}", *device, what));
  }
  return Status::IoError(fmt::format("no loop device could be had for {}", what));
}

// The shards the kernel will read, each opened once and checked against the
// index before anything reads it: regular file, size, mtime and fingerprint,
// on the very descriptor that composes sparse blocks and that the kernel
// gets. The kernel then reads them unchecked.
class CheckedShards {
 public:
  // `confine`: the index is not trusted to name files on this machine
  // (see IndexTrusted): a shard must be stored relative to its index and
  // is opened beneath its directory, through no symbolic link.
  CheckedShards(const index::IndexReader& r, bool confine) : r_(r), confine_(confine) {
    struct rlimit rl;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }

  // The checked descriptor of shard `id`, opened on first use.
  // NotSupported naming the shard and why if it is not the file indexed.
  Result<int> Get(index::ShardId id) {
    SHARDFS_ASSIGN_OR_RETURN(const Checked* c, Open(id));
    return c->fd.get();
  }

  // Its stamp as it was checked (base/open_file.h); opened as Get.
  Result<FileStamp> Stamp(index::ShardId id) {
    SHARDFS_ASSIGN_OR_RETURN(const Checked* c, Open(id));
    return c->stamp;
  }

 private:
  struct Checked {
    UniqueFd fd;
    FileStamp stamp;
  };

  Result<const Checked*> Open(index::ShardId id) {
    if (id.value >= r_.shards().size()) {
      return Status::Corruption(
          fmt::format("image names shard {}, the index has {}", id.value, r_.shards().size()));
    }
    auto it = fds_.find(id.value);
    if (it != fds_.end()) return &it->second;
    const std::string& path = r_.ShardPath(id);
    const index::ShardMeta& m = r_.shards()[id.value];
    index::ShardCheck check;
    check.mtime = true;
    if (confine_) {
      SHARDFS_ASSIGN_OR_RETURN(check.beneath, ConfinedBase(path, m));
    }
    FileStamp stamp;
    Result<UniqueFd> fd = index::OpenCheckedShard(path, m, check, &stamp);
    if (!fd.ok()) {
      return NotSupported(fmt::format(
          "shard {} is not the file indexed, and the kernel reads without checksums: {}", path,
          fd.status().message()));
    }
    return &fds_.emplace(id.value, Checked{std::move(*fd), stamp}).first->second;
  }

  // The directory a confined shard's relative path is taken from.
  static Result<std::string> ConfinedBase(const std::string& path, const index::ShardMeta& m) {
    if (!(m.flags & index::kShardPathRelative) || !path.ends_with("/" + m.path)) {
      return NotSupported(fmt::format(
          "shard {}: an index fetched by URL or not owned by you or root names a file by "
          "absolute path; a kernel mount, which every user can read, would publish it "
          "(-o unsafe_shard_paths allows it)",
          path));
    }
    return path.substr(0, path.size() - m.path.size() - 1);
  }

  const index::IndexReader& r_;
  const bool confine_;
  std::unordered_map<uint32_t, Checked> fds_;
};

// Whether the index at `path` may name files on this machine for a kernel
// mount: not a copy fetched by URL, and the index (each open partition of a
// manifest too) owned by the mounting user or root.
bool IndexTrusted(const index::IndexReader& r, bool fetched) {
  if (fetched) return false;
  auto owned = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && (st.st_uid == 0 || st.st_uid == ::geteuid());
  };
  if (!owned(r.path())) return false;
  for (const index::IndexReader* part : r.partitions()) {
    if (part != nullptr && !owned(part->path())) return false;
  }
  return true;
}

// The image's name: a hash of what the image is made of. Two copies of one
// index share their database id, and each may have gained its own versions
// (`view create`, `index add`) under the same labels since: the version's
// record (its counts, its source, when it was made), every shard's meta and
// path, and where the index is tell them apart.
std::string ImageName(const index::IndexReader& r, const mount::MountOptions& o) {
  const index::ReaderOptions& ro = o.reader;
  std::string where = r.path();
  if (Result<std::string> real = ResolvePath(r.path()); real.ok()) where = *real;
  std::string key = fmt::format(
      "erofs {}\ndb {}\nindex {}\nversion {}\nrank {} world {} seed {} dirs {}\n", kImageFormat,
      r.db_identity(), where, r.version().label(), ro.rank, ro.world, ro.seed, ro.rank_keep_dirs);
  std::string value;  // The encoders write whole values.
  index::EncodeVersionRecord(r.version().record, &value);
  key += value;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    index::EncodeShardMeta(r.shards()[i], &value);
    key += value;
    key += r.ShardPath(index::ShardId{i});
    key += '\0';
  }
  XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return fmt::format("{:016x}{:016x}{}", h.high64, h.low64, kImageSuffix);
}

std::array<uint8_t, 16> UuidOf(std::string_view name) {
  XXH128_hash_t h = XXH3_128bits(name.data(), name.size());
  std::array<uint8_t, 16> uuid;
  EncodeFixed64(reinterpret_cast<char*>(uuid.data()), h.low64);
  EncodeFixed64(reinterpret_cast<char*>(uuid.data()) + 8, h.high64);
  return uuid;
}

// A device of an image: its shard, and the stamp the shard's file had when
// the image was written.
struct Device {
  index::ShardId shard;
  FileStamp stamp;
};

// The devices of an image, from its trailer; Corruption if it has none.
Result<std::vector<Device>> ReadTrailer(int fd, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, what);
  auto bad = [&] { return Status::Corruption(fmt::format("{}: no device trailer", what)); };
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) return bad();
  char tail[8];
  SHARDFS_RETURN_IF_ERROR(PreadExact(fd, tail, 8, size - 8).WithContext(what));
  uint64_t at = DecodeFixed64(tail);
  uint64_t head = kTrailerMagic.size() + 4;
  if (at % erofs::kErofsBlockSize != 0 || at + head + 8 > size) return bad();
  std::string buf(size - 8 - at, '\0');
  SHARDFS_RETURN_IF_ERROR(PreadExact(fd, buf.data(), buf.size(), at).WithContext(what));
  uint32_t count = DecodeFixed32(buf.data() + kTrailerMagic.size());
  if (!std::string_view(buf).starts_with(kTrailerMagic) ||
      buf.size() != head + kDeviceEntrySize * count) {
    return bad();
  }
  std::vector<Device> devices;
  for (uint32_t i = 0; i < count; ++i) {
    const char* p = buf.data() + head + kDeviceEntrySize * i;
    Device d;
    d.shard = index::ShardId{DecodeFixed32(p)};
    d.stamp.dev = DecodeFixed64(p + 4);
    d.stamp.ino = DecodeFixed64(p + 12);
    d.stamp.size = DecodeFixed64(p + 20);
    d.stamp.mtime_ns = static_cast<int64_t>(DecodeFixed64(p + 28));
    d.stamp.ctime_ns = static_cast<int64_t>(DecodeFixed64(p + 36));
    devices.push_back(d);
  }
  return devices;
}

// Writes the image of the view under a temporary name, then renames it to
// `name`. NotSupported if the format cannot hold the view.
Status WriteImage(const index::IndexReader& r, const reader::CacheDir& dir, const std::string& name,
                  CheckedShards& shards) {
  auto started = std::chrono::steady_clock::now();
  SHARDFS_ASSIGN_OR_RETURN(
      erofs::ErofsTree tree,
      erofs::ErofsTreeFromIndex(r, [&](index::ShardId id) { return shards.Get(id); }));
  std::random_device rd;
  std::string tmp = reader::FormatTmpName((uint64_t{rd()} << 32) | rd());
  UniqueFd fd(::openat(dir.dir_fd.get(), tmp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  std::string what = fmt::format("{}/{}", dir.chunk_dir, tmp);
  if (!fd.valid()) return Status::FromErrno(errno, what);
  auto written = [&]() -> Result<erofs::ErofsImageInfo> {
    SHARDFS_ASSIGN_OR_RETURN(erofs::ErofsImageInfo info,
                             erofs::WriteErofsImage(tree, fd.get(), UuidOf(name)));
    std::string trailer(kTrailerMagic);
    PutFixed32(&trailer, static_cast<uint32_t>(info.shards.size()));
    for (index::ShardId s : info.shards) {
      SHARDFS_ASSIGN_OR_RETURN(FileStamp st, shards.Stamp(s));
      PutFixed32(&trailer, s.value);
      for (uint64_t v : {st.dev, st.ino, st.size, static_cast<uint64_t>(st.mtime_ns),
                         static_cast<uint64_t>(st.ctime_ns)}) {
        PutFixed64(&trailer, v);
      }
    }
    PutFixed64(&trailer, info.bytes);
    if (!WriteFully(fd.get(), trailer.data(), trailer.size()) || ::fdatasync(fd.get()) != 0) {
      return Status::FromErrno(errno, "write");
    }
    return info;
  }();
  if (!written.ok() ||
      ::renameat(dir.dir_fd.get(), tmp.c_str(), dir.dir_fd.get(), name.c_str()) != 0) {
    Status s = written.ok() ? Status::FromErrno(errno, "rename") : written.status();
    ::unlinkat(dir.dir_fd.get(), tmp.c_str(), 0);
    return s.code() == Status::Code::kNotSupported ? s : s.WithContext(what);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log::Info("kernel image {}/{}: {} inodes, {} bytes ({:.1f} per inode), {} shards, {:.2f} s",
            dir.chunk_dir, name, written->inodes, written->bytes,
            static_cast<double>(written->bytes) / static_cast<double>(written->inodes),
            written->shards.size(), secs);
  return Status::Ok();
}

// The image cache, waiting a while for another mount that is writing to it.
Result<reader::CacheDir> OpenImageCache(const std::string& dir) {
  auto deadline = std::chrono::steady_clock::now() + kCacheLockWait;
  for (;;) {
    Result<reader::CacheDir> d = reader::OpenCacheDir(dir, kKernelImageSubdir);
    if (d.ok() || d.status().message().find("in use by another") == std::string::npos ||
        std::chrono::steady_clock::now() >= deadline) {
      return d;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// What the kernel said about a failed fsconfig (the context's log).
std::string KernelMessages(int fs_fd) {
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fs_fd, buf, sizeof buf - 1)) > 0;) {
    if (!out.empty()) out += "; ";
    out.append(buf, static_cast<size_t>(n));
    while (!out.empty() && out.back() == '\n') out.pop_back();
  }
  return out;
}

// Mounts `image` with `devices` at `mountpoint`; *create_errno is the errno
// of a refused FSCONFIG_CMD_CREATE (0 otherwise).
Status MountImage(const std::string& image, const std::vector<std::string>& devices, bool directio,
                  const std::string& mountpoint, int* create_errno) {
  *create_errno = 0;
  UniqueFd fs(::fsopen("erofs", FSOPEN_CLOEXEC));
  if (!fs.valid()) return NotSupported(fmt::format("fsopen erofs: {}", std::strerror(errno)));
  auto set = [&](const char* key, const std::string& value) -> Status {
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) == 0) return Status::Ok();
    int err = errno;
    std::string said = KernelMessages(fs.get());
    return NotSupported(fmt::format("the kernel refused {}={}: {}{}", key, value,
                                    std::strerror(err), said.empty() ? "" : " (" + said + ")"));
  };
  // Read-only from the start: a read-only loop device is opened for reading
  // only then.
  if (::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0) {
    return NotSupported(fmt::format("the kernel refused ro: {}", std::strerror(errno)));
  }
  if (directio && ::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "directio", nullptr, 0) != 0) {
    return NotSupported(fmt::format("the kernel has no direct I/O for EROFS mounts of files: {}",
                                    std::strerror(errno)));
  }
  SHARDFS_RETURN_IF_ERROR(set("source", image));
  for (const std::string& device : devices) SHARDFS_RETURN_IF_ERROR(set("device", device));
  if (::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    int err = errno;
    *create_errno = err;
    std::string said = KernelMessages(fs.get());
    return NotSupported(fmt::format("the kernel refused the image {}: {}{}", image,
                                    std::strerror(err), said.empty() ? "" : " (" + said + ")"));
  }
  UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!mnt.valid()) return Status::FromErrno(errno, "fsmount");
  if (::move_mount(mnt.get(), "", AT_FDCWD, mountpoint.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return Status::FromErrno(errno, fmt::format("mount at {}", mountpoint));
  }
  return Status::Ok();
}

// A loop device's backing file as the kernel names it; other sources as
// they are.
std::string BackingFile(const std::string& source) {
  if (!source.starts_with("/dev/loop")) return source;
  std::ifstream in(fmt::format("/sys/block/{}/loop/backing_file", source.substr(5)));
  std::string file;
  return std::getline(in, file) ? file : source;
}

// The image files (names ending in .erofs) of the cache that no mount uses,
// oldest first, beyond the newest kKeptImages.
void PruneImages(const reader::CacheDir& dir, const std::string& keep) {
  std::vector<std::string> in_use;
  {
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      size_t at = line.find(" - erofs ");
      if (at != std::string::npos)
        in_use.push_back(line.substr(at + 9, line.find(' ', at + 9) - at - 9));
    }
  }
  std::vector<std::pair<int64_t, std::string>> images;
  UniqueFd listing(::openat(dir.dir_fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = listing.valid() ? ::fdopendir(listing.release()) : nullptr;
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!name.ends_with(kImageSuffix) || name == keep) continue;
    std::string path = fmt::format("{}/{}", dir.chunk_dir, name);
    if (std::find(in_use.begin(), in_use.end(), path) != in_use.end()) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    images.emplace_back(st.st_mtim.tv_sec, std::move(name));
  }
  std::sort(images.begin(), images.end());
  size_t extra = images.size() + 1 > kKeptImages ? images.size() + 1 - kKeptImages : 0;
  for (size_t i = 0; i < extra; ++i) {
    if (::unlinkat(::dirfd(d), images[i].second.c_str(), 0) == 0) {
      log::Debug("kernel image {}/{} removed (unused, oldest)", dir.chunk_dir, images[i].second);
    }
  }
  ::closedir(d);
}

// The devices of image `name` in `dir`, open as *fd: the image there if it
// was made from the very shard files checked now (their stamps), else
// written again (WriteImage) and read back.
Result<std::vector<Device>> ReuseOrWriteImage(const index::IndexReader& reader,
                                              CheckedShards& checked, const reader::CacheDir& dir,
                                              const std::string& name, UniqueFd* fd) {
  const std::string image = fmt::format("{}/{}", dir.chunk_dir, name);
  fd->reset(::openat(dir.dir_fd.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  Result<std::vector<Device>> devices = Status::NotFound(image);
  if (fd->valid()) devices = ReadTrailer(fd->get(), image);
  // Reused only while every shard is the file the image was made from (its
  // composed blocks were read from them): a shard rewritten with its mtime
  // set back, or replaced by a copy, passes the index's checks but not this.
  bool stale = false;
  for (size_t i = 0; devices.ok() && !stale && i < devices->size(); ++i) {
    const Device& d = (*devices)[i];
    SHARDFS_ASSIGN_OR_RETURN(FileStamp now, checked.Stamp(d.shard));
    if (now != d.stamp) {
      log::Info(
          "kernel image {}: shard {} is not the file the image was made from (its inode or "
          "ctime moved); writing it again",
          image, reader.ShardPath(d.shard));
      stale = true;
    }
  }
  if (!devices.ok() || stale) {
    if (fd->valid() && !stale) log::Warning("{}; writing it again", devices.status().message());
    SHARDFS_RETURN_IF_ERROR(WriteImage(reader, dir, name, checked));
    fd->reset(::openat(dir.dir_fd.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd->valid()) return Status::FromErrno(errno, image);
    devices = ReadTrailer(fd->get(), image);
  } else {
    log::Debug("kernel image {}: reused", image);
  }
  return devices;
}

}  // namespace

Status MountKernel(const std::string& index, bool fetched, const std::string& mountpoint,
                   const mount::MountOptions& options) {
  bool loop = false;
  SHARDFS_RETURN_IF_ERROR(CheckKernel(options, &loop));
  SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<index::IndexReader> reader,
                           index::IndexReader::Open(index, options.reader));
  const bool confine = !options.unsafe_shard_paths && !IndexTrusted(*reader, fetched);
  CheckedShards checked(*reader, confine);
  std::string cache = options.cache_dir.empty() ? kDefaultImageCache : options.cache_dir;
  SHARDFS_ASSIGN_OR_RETURN(reader::CacheDir dir, OpenImageCache(cache));
  // No database id: nothing tells this index from another, so the image is
  // its own, written for this mount and unlinked once mounted.
  bool shared = !reader->db_identity().empty();
  std::string name = ImageName(*reader, options);
  if (!shared) {
    std::random_device rd;
    name = fmt::format("once-{:08x}{:08x}{}", rd(), rd(), kImageSuffix);
  }
  std::string image = fmt::format("{}/{}", dir.chunk_dir, name);
  UniqueFd fd;
  SHARDFS_ASSIGN_OR_RETURN(std::vector<Device> devices,
                           ReuseOrWriteImage(*reader, checked, dir, name, &fd));
  std::vector<int> shards;
  for (const Device& d : devices) {
    SHARDFS_ASSIGN_OR_RETURN(int shard, checked.Get(d.shard));
    shards.push_back(shard);
  }
  auto attach_and_mount = [&](bool as_loops, int* create_errno) -> Status {
    // The kernel gets the very files checked: as /proc/self/fd/N (no path
    // length limit either), or as loop devices of them, held until mounted.
    std::string source = image;
    std::vector<std::string> paths;
    std::vector<UniqueFd> loops;
    *create_errno = 0;
    if (as_loops) {
      SHARDFS_ASSIGN_OR_RETURN(UniqueFd l, AttachLoop(fd.get(), image, &source));
      loops.push_back(std::move(l));
      for (size_t i = 0; i < shards.size(); ++i) {
        std::string device;
        SHARDFS_ASSIGN_OR_RETURN(
            l, AttachLoop(shards[i], reader->ShardPath(devices[i].shard), &device));
        loops.push_back(std::move(l));
        paths.push_back(device);
      }
    } else {
      for (int shard : shards) paths.push_back(fmt::format("/proc/self/fd/{}", shard));
    }
    return MountImage(source, paths, options.kernel_directio && !as_loops, mountpoint,
                      create_errno);
  };
  int create_errno = 0;
  Status s = attach_and_mount(loop, &create_errno);
  if (!s.ok() && !loop && create_errno == ENOTBLK &&
      options.kernel_devices == mount::KernelDevices::kAuto) {
    // A kernel built without EROFS mounts of files
    // (CONFIG_EROFS_FS_BACKED_BY_FILE): all loop devices then, never a mix.
    log::Info("kernel EROFS takes no files here ({}); trying loop devices", s.message());
    loop = true;
    s = attach_and_mount(loop, &create_errno);
  }
  if (!shared) ::unlinkat(dir.dir_fd.get(), name.c_str(), 0);
  SHARDFS_RETURN_IF_ERROR(s);
  // The directory blocks and inodes a walk will want, read ahead at once.
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_WILLNEED);
  PruneImages(dir, name);
  log::Info("mounted {} at {} with the kernel's EROFS driver ({} shards, image {}{})", index,
            mountpoint, shards.size(), image, loop ? ", as loop devices" : "");
  return Status::Ok();
}

bool IsKernelMount(const std::string& mountpoint, std::string* image) {
  Result<mount::MountEntry> e = mount::FindMountAt(mount::CanonicalMountpoint(mountpoint));
  if (!e.ok() || e->fstype != "erofs") return false;
  std::string source = e->source;
  source = BackingFile(source);
  if (source.find(fmt::format("/{}/", kKernelImageSubdir)) == std::string::npos) return false;
  *image = source;
  return true;
}

}  // namespace shardfs::mount
