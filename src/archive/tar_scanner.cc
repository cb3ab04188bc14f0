#include "src/archive/tar_scanner.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string_view>

#include "base/fd.h"
#include "base/file_kind.h"
#include "index/fingerprint.h"
#include "src/archive/format_sniff.h"
#include "src/archive/tar_headers.h"
#include "src/archive/tar_walker.h"
#include "src/archive/zip_scanner.h"

namespace shardfs::archive {
namespace {

constexpr uint64_t kBlock = kTarBlock;

struct Mapping {
  const char* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(const_cast<char*>(base), size);
  }
};

// libarchive pulls its input through this callback; it gets the whole mapping
// as one block, once.
struct Source {
  const char* base;
  size_t size;
  bool done = false;
};

la_ssize_t ReadWhole(struct archive*, void* client, const void** buf) {
  auto* src = static_cast<Source*>(client);
  if (src->done) return 0;
  src->done = true;
  *buf = src->base;
  return static_cast<la_ssize_t>(src->size);
}

const char* PathOf(struct archive_entry* e) {
  const char* p = archive_entry_pathname(e);
  return p ? p : archive_entry_pathname_utf8(e);
}

const char* SymlinkOf(struct archive_entry* e) {
  const char* p = archive_entry_symlink(e);
  return p ? p : archive_entry_symlink_utf8(e);
}

const char* HardlinkOf(struct archive_entry* e) {
  const char* p = archive_entry_hardlink(e);
  return p ? p : archive_entry_hardlink_utf8(e);
}

const char* OtherTypeName(mode_t type) {
  switch (type) {
    case AE_IFIFO:
      return "fifo";
    case AE_IFCHR:
      return "character device";
    case AE_IFBLK:
      return "block device";
    case AE_IFSOCK:
      return "socket";
    default:
      return "unknown type";
  }
}

// Nanoseconds since the epoch, saturated: a header may claim any year.
int64_t MtimeNs(int64_t sec, long nsec) {
  constexpr int64_t kMaxSec = INT64_MAX / 1000000000 - 1;
  if (sec > kMaxSec) return kMaxSec * 1000000000;
  if (sec < -kMaxSec) return -kMaxSec * 1000000000;
  if (nsec < 0 || nsec > 999999999) nsec = 0;
  return sec * 1000000000 + nsec;
}

// One scan of one shard held in memory. libarchive reads it from `start`
// on; when GNU tar would go on from another byte than libarchive (after a
// GNU sparse 1.0 member whose map does not account for all of its declared
// data), Run opens a new reader there. Members keep shard-absolute offsets.
class ShardScan {
 public:
  ShardScan(std::string_view path, const char* data, size_t size, const ScanOptions& options,
            const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info)
      : path_(path),
        data_(data),
        size_(size),
        options_(options),
        on_member_(on_member),
        info_(info),
        hash_(XXH3_createState(), &XXH3_freeState) {}

  Status Run() {
    if (size_ == 0) {
      return Status::InvalidArgument(fmt::format("shard {}: empty file, not a tar archive", path_));
    }
    for (uint64_t start = 0;;) {
      std::optional<uint64_t> resume;
      SHARDFS_RETURN_IF_ERROR(ScanFrom(start, &resume));
      if (!resume || OnlyZerosFrom(*resume)) break;
      start = *resume;
    }
    return Status::Ok();
  }

 private:
  Status Fail(uint64_t offset, std::string_view what) const {
    return Status::InvalidArgument(fmt::format("shard {}: at byte {}: {}", path_, offset, what));
  }
  std::string Where(const ScannedMember& mem) const {
    return fmt::format("shard {}: member '{}' at byte {}", path_, mem.path, mem.header_offset);
  }
  // Whether nothing but zero bytes (end-of-archive blocks) follows `pos`.
  bool OnlyZerosFrom(uint64_t pos) const {
    for (uint64_t i = pos; i < size_; ++i) {
      if (data_[i] != 0) return false;
    }
    return true;
  }
  // Where libarchive has read up to, as a shard offset.
  uint64_t Consumed(struct archive* a) const {
    int64_t n = archive_filter_bytes(a, 0);
    return start_ + (n > 0 ? static_cast<uint64_t>(n) : 0);
  }

  // Reads members with a new libarchive reader from `start`. Sets *resume
  // if the scan must go on from another byte than the reader's.
  Status ScanFrom(uint64_t start, std::optional<uint64_t>* resume) {
    start_ = start;
    std::unique_ptr<struct archive, decltype(&archive_read_free)> a(archive_read_new(),
                                                                    &archive_read_free);
    archive_read_support_format_tar(a.get());
    archive_read_support_format_gnutar(a.get());
    Source src{data_ + start, size_ - start};
    if (archive_read_open2(a.get(), &src, nullptr, &ReadWhole, nullptr, nullptr) != ARCHIVE_OK) {
      return Fail(
          start, fmt::format("not an uncompressed tar archive: {}", archive_error_string(a.get())));
    }
    uint64_t next_header = start;  // Where we expect the next header to start.
    for (;;) {
      struct archive_entry* e = nullptr;
      int r = archive_read_next_header(a.get(), &e);
      if (r == ARCHIVE_EOF) break;
      // ARCHIVE_WARN: libarchive recovered (e.g. a name it could not
      // convert); keep going.
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        const char* err = archive_error_string(a.get());
        return Fail(next_header, fmt::format("bad header: {}", err ? err : "unreadable"));
      }
      ScannedMember mem;
      Extensions ext;
      SHARDFS_RETURN_IF_ERROR(ReadHeader(a.get(), e, &mem, &ext));
      if (mem.kind == MemberKind::kFile && archive_entry_sparse_count(e) > 0) {
        SHARDFS_RETURN_IF_ERROR(ReadSparse(a.get(), ext, &mem, resume));
        next_header = Consumed(a.get());
      } else if (mem.kind == MemberKind::kFile && mem.size > 0) {
        SHARDFS_RETURN_IF_ERROR(ReadContiguous(a.get(), &mem));
        next_header = mem.data_offset + (mem.size + kBlock - 1) / kBlock * kBlock;
      } else {
        if (mem.kind == MemberKind::kFile) {
          StartHash();
          EndHash(&mem);
        }
        // Past this member's last header (extension headers add blocks) and
        // any data the header declares.
        const int64_t declared = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        next_header =
            Consumed(a.get()) + (static_cast<uint64_t>(declared) + kBlock - 1) / kBlock * kBlock;
      }
      info_->data_bytes += mem.kind == MemberKind::kFile ? mem.size : 0;
      ++info_->members;
      SHARDFS_RETURN_IF_ERROR(on_member_(std::move(mem)));
      if (*resume) return Status::Ok();
    }
    return Status::Ok();
  }

  // The member's metadata, from libarchive and, where GNU tar reads them
  // differently, from its raw extension headers.
  Status ReadHeader(struct archive* a, struct archive_entry* e, ScannedMember* mem,
                    Extensions* ext) const {
    mem->header_offset = start_ + static_cast<uint64_t>(archive_read_header_position(a));
    const char* name = PathOf(e);
    if (!name) return Fail(mem->header_offset, "member without a readable name");
    mem->path = name;
    mem->mode = archive_entry_perm(e) & 07777;
    mem->uid = archive_entry_uid(e);
    mem->gid = archive_entry_gid(e);
    mem->mtime_ns = MtimeNs(archive_entry_mtime(e), archive_entry_mtime_nsec(e));
    // See tar_headers.h: of a GNU name and a pax path, the pax path wins;
    // pax times are read exactly.
    if (ReadExtensions(data_, size_, mem->header_offset, ext)) {
      if (ext->gnu_name && ext->path) mem->path = *ext->path;
      if (ext->mtime) ParsePaxTimeNs(*ext->mtime, &mem->mtime_ns);
    }
    const int64_t member_size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (member_size < 0) {
      return Fail(mem->header_offset, fmt::format("member '{}': negative size", name));
    }
    mem->size = static_cast<uint64_t>(member_size);
    if (const char* hl = HardlinkOf(e)) {
      mem->kind = MemberKind::kHardlink;
      mem->link_target = hl;
    } else {
      switch (archive_entry_filetype(e)) {
        case AE_IFREG:
          mem->kind = MemberKind::kFile;
          break;
        case AE_IFDIR:
          mem->kind = MemberKind::kDir;
          break;
        case AE_IFLNK: {
          mem->kind = MemberKind::kSymlink;
          const char* t = SymlinkOf(e);
          mem->link_target = t ? t : "";
          break;
        }
        default:
          mem->kind = MemberKind::kOther;
          mem->other_type = OtherTypeName(archive_entry_filetype(e));
      }
    }
    if (mem->kind != MemberKind::kFile) mem->size = 0;
    if (ext->gnu_link && ext->linkpath &&
        (mem->kind == MemberKind::kHardlink || mem->kind == MemberKind::kSymlink)) {
      mem->link_target = *ext->linkpath;
    }
    return Status::Ok();
  }

  // Calls on_block(pointer, length, logical offset) for each data block
  // libarchive returns for the current member, in order, until one returns
  // an error. A block libarchive cannot read is unreadable(its message).
  template <typename Unreadable, typename OnBlock>
  static Status ForEachBlock(struct archive* a, Unreadable unreadable, OnBlock on_block) {
    for (;;) {
      const void* buf = nullptr;
      size_t len = 0;
      la_int64_t block_off = 0;
      int r = archive_read_data_block(a, &buf, &len, &block_off);
      if (r == ARCHIVE_EOF) return Status::Ok();
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        const char* err = archive_error_string(a);
        return unreadable(err ? err : "truncated");
      }
      SHARDFS_RETURN_IF_ERROR(on_block(static_cast<const char*>(buf), len, block_off));
    }
  }

  void StartHash() {
    if (options_.checksum) XXH3_64bits_reset(hash_.get());
  }
  void Hash(const char* p, size_t len) {
    if (options_.checksum) XXH3_64bits_update(hash_.get(), p, len);
  }
  void EndHash(ScannedMember* mem) {
    mem->has_checksum = options_.checksum;
    mem->xxh3 = options_.checksum ? XXH3_64bits_digest(hash_.get()) : 0;
  }

  // A regular member's data: one range of the shard, hashed as it is read.
  Status ReadContiguous(struct archive* a, ScannedMember* mem) {
    auto not_in_place = [&] {
      return Status::NotSupported(
          fmt::format("{}: data is not a contiguous range of the shard", Where(*mem)));
    };
    StartHash();
    uint64_t seen = 0;
    bool first = true;
    SHARDFS_RETURN_IF_ERROR(ForEachBlock(
        a,
        [&](const char* err) {
          return Fail(first ? mem->header_offset : mem->data_offset + seen,
                      fmt::format("member '{}': data unreadable: {}", mem->path, err));
        },
        [&](const char* p, size_t len, la_int64_t block_off) {
          if (p < data_ || p + len > data_ + size_ || block_off < 0) return not_in_place();
          const uint64_t at = static_cast<uint64_t>(p - data_);
          if (first) {
            mem->data_offset = at - static_cast<uint64_t>(block_off);
            first = false;
          }
          if (at != mem->data_offset + static_cast<uint64_t>(block_off)) return not_in_place();
          Hash(p, len);
          seen = static_cast<uint64_t>(block_off) + len;
          return Status::Ok();
        }));
    if (seen != mem->size || mem->data_offset + mem->size > size_) {
      return Fail(mem->header_offset,
                  fmt::format("member '{}': {} bytes of data, header says {} (truncated)",
                              mem->path, seen, mem->size));
    }
    EndHash(mem);
    return Status::Ok();
  }

  // A sparse member's data blocks, recorded as extents: libarchive returns
  // each block with its logical offset and, the shard being one block in
  // memory, a pointer into it. Blocks adjacent both logically and in the
  // shard become one extent.
  //
  // A GNU sparse 1.0 member is read as GNU tar reads it: its size is the end
  // of its map's last entry, and the next header is where its declared data
  // size ends, whatever the map accounts for. If libarchive stops elsewhere,
  // *resume is set there.
  Status ReadSparse(struct archive* a, const Extensions& ext, ScannedMember* mem,
                    std::optional<uint64_t>* resume) {
    mem->sparse = true;
    std::optional<Sparse10Map> map;
    if (ext.sparse_major == "1") {
      if (!(map = ReadSparse10Map(data_, size_, ext))) {
        return Status::InvalidArgument(
            fmt::format("{}: malformed GNU sparse 1.0 map (GNU tar refuses it)", Where(*mem)));
      }
      if (map->logical_end > mem->size) {
        return Status::NotSupported(
            fmt::format("{}: its sparse map reaches byte {}, past its real size {}", Where(*mem),
                        map->logical_end, mem->size));
      }
      mem->size = map->logical_end;
    }
    SHARDFS_RETURN_IF_ERROR(ReadSparseBlocks(a, mem));
    const uint64_t consumed = Consumed(a);
    if (map) {
      uint64_t read = 0;
      for (const index::Extent& x : mem->extents) read += x.length;
      if (read != map->stored || map->data_start + map->stored > map->member_end) {
        return Status::InvalidArgument(fmt::format(
            "{}: its sparse map accounts for {} bytes of data, its size holds {} (GNU tar "
            "refuses it)",
            Where(*mem), map->stored,
            map->member_end > map->data_start ? map->member_end - map->data_start : 0));
      }
    }
    if (map && consumed != map->member_end) {
      if (map->member_end > size_ || consumed > map->member_end) {
        return Status::InvalidArgument(
            fmt::format("{}: its sparse map accounts for data up to byte {}, its size says byte {}",
                        Where(*mem), consumed, map->member_end));
      }
      *resume = map->member_end;
    } else if (consumed % kBlock != 0) {
      // libarchive stops at the end of the sparse map: unless the map
      // accounts for exactly the data the header declares, every later
      // header would be misread.
      return Status::InvalidArgument(fmt::format(
          "{}: its sparse map does not account for its stored data (ends at byte {}, not on a "
          "512-byte boundary)",
          Where(*mem), consumed));
    }
    return Status::Ok();
  }

  Status ReadSparseBlocks(struct archive* a, ScannedMember* mem) {
    StartHash();
    uint64_t end = 0;  // Logical end of the data seen so far.
    SHARDFS_RETURN_IF_ERROR(ForEachBlock(
        a,
        [&](const char* err) {
          return Status::InvalidArgument(
              fmt::format("{}: sparse data unreadable: {}", Where(*mem), err));
        },
        [&](const char* p, size_t len, la_int64_t block_off) {
          if (len == 0) return Status::Ok();
          if (p < data_ || p > data_ + size_ || len > static_cast<size_t>(data_ + size_ - p)) {
            return Status::NotSupported(
                fmt::format("{}: sparse data block at logical byte {} is not a range of the shard",
                            Where(*mem), block_off));
          }
          const uint64_t logical = static_cast<uint64_t>(block_off);
          if (block_off < 0 || logical < end || logical > mem->size || len > mem->size - logical) {
            return Status::InvalidArgument(fmt::format(
                "{}: sparse data block of {} bytes at logical byte {}: out of order or past "
                "the size {}",
                Where(*mem), len, block_off, mem->size));
          }
          // The checksum covers the stored bytes, extent by extent: holes are
          // zeros by construction, and hashing them would let a header that
          // claims a petabyte of holes keep the scan busy for days.
          Hash(p, len);
          AddExtent(logical, len, static_cast<uint64_t>(p - data_), &mem->extents);
          end = logical + len;
          return Status::Ok();
        }));
    EndHash(mem);
    mem->data_offset = mem->extents.empty() ? 0 : mem->extents.front().physical;
    return Status::Ok();
  }

  // Appends an extent, or grows the last one if the new bytes follow it both
  // in the file and in the shard.
  static void AddExtent(uint64_t logical, uint64_t len, uint64_t physical,
                        std::vector<index::Extent>* ex) {
    if (!ex->empty() && ex->back().logical + ex->back().length == logical &&
        ex->back().physical + ex->back().length == physical) {
      ex->back().length += len;
    } else {
      ex->push_back({logical, len, physical});
    }
  }

  const std::string_view path_;
  const char* const data_;
  const size_t size_;
  const ScanOptions& options_;
  const std::function<Status(ScannedMember&&)>& on_member_;
  ShardInfo* const info_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_;
  uint64_t start_ = 0;  // Where the current libarchive reader started.
};

}  // namespace

Status ScanTar(const std::string& path, const ScanOptions& options,
               const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  UniqueFd fd;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // forever (and a device's open may have effects). Nothing is read before
  // fstat has shown a regular file, for which the flag means nothing; it is
  // cleared all the same.
  fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return Status::FromErrno(errno, fmt::format("shard {}", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, fmt::format("shard {}", path));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("shard {}: {}, expected a regular file", path, FileKind(st.st_mode)));
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Status::FromErrno(errno, fmt::format("shard {}", path));
  }
  return ScanTarFd(path, fd.get(), options, on_member, info);
}

Status ScanTarFd(const std::string& path, int fd, const ScanOptions& options,
                 const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, fmt::format("shard {}", path));
  if (st.st_size == 0) {
    return Status::InvalidArgument(fmt::format("shard {}: empty file, not a tar archive", path));
  }
  *info = ShardInfo{};
  info->size = static_cast<uint64_t>(st.st_size);
  info->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  Result<uint64_t> fp = index::ShardFingerprint(fd, info->size);
  if (!fp.ok()) return fp.status().WithContext(fmt::format("shard {}", path));
  info->fingerprint = *fp;

  Mapping map;
  void* m = ::mmap(nullptr, info->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) return Status::FromErrno(errno, fmt::format("shard {}: mmap", path));
  map.base = static_cast<const char*>(m);
  map.size = info->size;
  if (options.checksum) ::madvise(m, map.size, MADV_SEQUENTIAL);
  // The pages the scan has passed are dropped from the mapping as it goes
  // (they stay in the page cache; a later touch reads them again), so that
  // a scan's resident memory is a window, not the shard: a build's memory
  // bound (index build --memory) counts jobs x window, not shard bytes.
  constexpr uint64_t kKeepBehind = 4 << 20;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t released = 0;
  auto releasing = [&](ScannedMember&& member) {
    if (member.header_offset > released + 2 * kKeepBehind) {
      const uint64_t upto = (member.header_offset - kKeepBehind) / page * page;
      ::madvise(const_cast<char*>(map.base) + released, upto - released, MADV_DONTNEED);
      released = upto;
    }
    return on_member(std::move(member));
  };
  if (uint64_t entries = 0; LooksLikeZip(map.base, map.size, &entries)) {
    // Without checksums only the central directory and the local headers
    // are read: where members lie far apart (>= 64 KiB each, as photos do),
    // readahead around each header would read most of the archive.
    if (!options.checksum && map.size / std::max<uint64_t>(entries, 1) >= (64 << 10)) {
      ::madvise(m, map.size, MADV_RANDOM);
    }
    // --recursive reads a stored member's content (a tar inside the zip).
    if (options.on_bytes) options.on_bytes(map.base, map.size);
    // The first pass touched every local header; the second releases as it
    // goes, from the start.
    ScanOptions zip_options = options;
    zip_options.on_directory_read = [&] {
      ::madvise(m, map.size, MADV_DONTNEED);
      released = 0;
    };
    return ScanZipBytes(path, map.base, map.size, zip_options, releasing, info);
  }
  // A zip's first bytes without an end record that ends the file (bytes
  // after it, or cut short): said as a zip, not as a tar that is not one.
  if (map.size >= 4 && std::string_view(map.base, 2) == "PK" &&
      (map.base[2] == 3 || map.base[2] == 5) && map.base[3] == map.base[2] + 1 &&
      !ValidTarChecksum(std::string_view(map.base, std::min<size_t>(map.size, 512)))) {
    return ScanZipBytes(path, map.base, map.size, options, releasing, info);
  }
  return ScanTarBytes(path, map.base, map.size, options, releasing, info);
}

Status ScanTarBytes(std::string_view path, const char* data, size_t size,
                    const ScanOptions& options,
                    const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  if (options.on_bytes) options.on_bytes(data, size);
  if (options.walker && size > 0) {
    Status status;
    auto counted = [&](ScannedMember&& m) {
      info->data_bytes += m.kind == MemberKind::kFile ? m.size : 0;
      ++info->members;
      return on_member(std::move(m));
    };
    if (WalkTar(data, size, options, counted, &status, options.restart != nullptr)) {
      return status;
    }
    if (options.restart && info->members > 0) {
      info->members = 0;
      info->data_bytes = 0;
      options.restart();
    }
  }
  return ShardScan(path, data, size, options, on_member, info).Run();
}

}  // namespace shardfs::archive
