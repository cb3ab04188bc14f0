#include "tools/tar_scanner.h"

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
#include "index/file_kind.h"
#include "index/fingerprint.h"

namespace shardfs::tools {
namespace {

constexpr uint64_t kBlock = 512;

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
    case AE_IFIFO: return "fifo";
    case AE_IFCHR: return "character device";
    case AE_IFBLK: return "block device";
    case AE_IFSOCK: return "socket";
    default: return "unknown type";
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

// A pax time, parsed exactly: "-1.25" is 1.25 s before the epoch, as POSIX
// and GNU tar read it (libarchive 3.6.2 reads -1 s + 0.25 s). False if it is
// not a plain decimal or does not fit.
bool ParsePaxTimeNs(std::string_view v, int64_t* out) {
  bool negative = !v.empty() && v[0] == '-';
  if (negative) v.remove_prefix(1);
  int64_t sec = 0, nsec = 0;
  size_t i = 0;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
    if (sec > INT64_MAX / 1000000000 / 10) return false;
    sec = sec * 10 + (v[i] - '0');
  }
  if (i == 0) return false;
  if (i < v.size() && v[i] == '.') {
    int64_t scale = 100000000;
    for (++i; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i, scale /= 10) {
      nsec += (v[i] - '0') * scale;
    }
  }
  if (i != v.size() || sec > INT64_MAX / 1000000000 - 1) return false;
  int64_t ns = sec * 1000000000 + nsec;
  *out = negative ? -ns : ns;
  return true;
}

// What the extension headers ahead of a member's own header say.
struct Extensions {
  bool gnu_name = false;  // A GNU 'L' header names the member.
  bool gnu_link = false;  // A GNU 'K' header gives its link target.
  std::optional<std::string_view> path, linkpath, mtime;  // pax records.
};

// Reads the extension headers ('L', 'K', pax 'x'; global 'g' ones are
// skipped) from `header`, the member's first header, up to its own header.
// Later records win over earlier ones. False if they cannot be walked (a
// damaged archive: libarchive has the last word then).
bool ReadExtensions(const char* data, size_t size, uint64_t header, Extensions* ext) {
  for (uint64_t pos = header, n = 0; n < 64; ++n) {
    if (pos > size || size - pos < 512) return false;
    const char type = data[pos + 156];
    if (type != 'L' && type != 'K' && type != 'x' && type != 'g') return true;
    uint64_t len = 0;
    for (int i = 124; i < 136 && data[pos + i] >= '0' && data[pos + i] <= '7'; ++i) {
      len = len * 8 + static_cast<uint64_t>(data[pos + i] - '0');
    }
    if (len > size - pos - 512) return false;
    if (type == 'L') ext->gnu_name = true;
    if (type == 'K') ext->gnu_link = true;
    std::string_view recs(data + pos + 512, type == 'x' ? len : 0);
    while (!recs.empty()) {
      size_t space = recs.find(' ');
      uint64_t rec_len = 0;
      for (size_t i = 0; i < space && i < recs.size() && recs[i] >= '0' && recs[i] <= '9'; ++i) {
        rec_len = rec_len * 10 + static_cast<uint64_t>(recs[i] - '0');
        if (rec_len > recs.size()) return false;
      }
      if (space == std::string_view::npos || rec_len <= space + 1) return false;
      std::string_view kv = recs.substr(space + 1, rec_len - space - 2);  // Drop '\n'.
      recs.remove_prefix(rec_len);
      size_t eq = kv.find('=');
      if (eq == std::string_view::npos) return false;
      std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (key == "path") ext->path = value;
      if (key == "linkpath") ext->linkpath = value;
      if (key == "mtime") ext->mtime = value;
    }
    pos += 512 + (len + 511) / 512 * 512;
  }
  return false;
}

// The value of pax record `key` in the 'x' header at `header`, if any.
bool PaxRecord(const char* data, size_t size, uint64_t header, std::string_view key,
               std::string_view* value, uint64_t* records_end) {
  if (header + 512 > size || data[header + 156] != 'x') return false;
  uint64_t len = 0;
  for (int i = 124; i < 136 && data[header + i] >= '0' && data[header + i] <= '7'; ++i) {
    len = len * 8 + static_cast<uint64_t>(data[header + i] - '0');
  }
  if (len > size - header - 512) return false;
  *records_end = header + 512 + (len + 511) / 512 * 512;
  std::string_view recs(data + header + 512, len);
  while (!recs.empty()) {
    size_t space = recs.find(' ');
    if (space == std::string_view::npos) return false;
    uint64_t rec_len = 0;
    for (size_t i = 0; i < space && recs[i] >= '0' && recs[i] <= '9'; ++i) {
      rec_len = rec_len * 10 + static_cast<uint64_t>(recs[i] - '0');
      if (rec_len > recs.size()) return false;
    }
    if (rec_len <= space + 1) return false;
    std::string_view kv = recs.substr(space + 1, rec_len - space - 2);  // Drop '\n'.
    recs.remove_prefix(rec_len);
    if (kv.size() > key.size() && kv.starts_with(key) && kv[key.size()] == '=') {
      *value = kv.substr(key.size() + 1);
      return true;
    }
  }
  return false;
}

// GNU sparse 1.0 keeps its map in the data area as decimal lines; libarchive
// also takes lines GNU tar calls a "malformed sparse archive member" (say a
// '#' comment). For a 1.0 member whose pax header is at `header` and whose
// data starts at `data_start`, checks the map the way GNU tar 1.34 reads
// it: digits only, one number a line.
bool GnuSparse10MapIsStrict(const char* data, size_t size, uint64_t header,
                            uint64_t data_start) {
  std::string_view major;
  uint64_t ustar = 0;
  if (!PaxRecord(data, size, header, "GNU.sparse.major", &major, &ustar) || major != "1") {
    return true;  // Not 1.0: nothing of the kind to check.
  }
  uint64_t map = ustar + 512;
  if (map > data_start || data_start > size) return false;
  std::string_view text(data + map, data_start - map);
  auto number = [&](uint64_t* out) {
    size_t nl = text.find('\n');
    if (nl == 0 || nl == std::string_view::npos || nl > 20) return false;
    *out = 0;
    for (size_t i = 0; i < nl; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      *out = *out * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    text.remove_prefix(nl + 1);
    return true;
  };
  uint64_t count = 0, unused = 0;
  if (!number(&count)) return false;
  for (uint64_t i = 0; i < 2 * count; ++i) {
    if (!number(&unused)) return false;
  }
  return true;
}

// Reads the data blocks of sparse member `mem` (its header just read) and
// records them as extents: libarchive returns each block with its logical
// offset and, the shard being one block in memory, a pointer into it.
// Adjacent blocks that are adjacent in the shard too become one extent.
Status ReadSparseExtents(struct archive* a, std::string_view path, const char* base,
                         size_t size, const ScanOptions& options, ScannedMember* mem) {
  auto where = [&] {
    return fmt::format("shard {}: member '{}' at byte {}", path, mem->path, mem->header_offset);
  };
  // libarchive has read a 1.0 member's map with its header: its data starts here.
  const int64_t consumed = archive_filter_bytes(a, 0);
  const uint64_t map_end = consumed > 0 ? static_cast<uint64_t>(consumed) : 0;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(
      options.checksum ? XXH3_createState() : nullptr, &XXH3_freeState);
  if (hash) XXH3_64bits_reset(hash.get());
  uint64_t end = 0;  // Logical end of the data seen so far.
  for (;;) {
    const void* buf = nullptr;
    size_t len = 0;
    la_int64_t block_off = 0;
    int r = archive_read_data_block(a, &buf, &len, &block_off);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const char* err = archive_error_string(a);
      return Status::InvalidArgument(fmt::format("{}: sparse data unreadable: {}", where(),
                                                 err ? err : "truncated"));
    }
    if (len == 0) continue;
    const char* p = static_cast<const char*>(buf);
    if (p < base || p > base + size || len > static_cast<size_t>(base + size - p)) {
      return Status::NotSupported(fmt::format(
          "{}: sparse data block at logical byte {} is not a range of the shard", where(),
          block_off));
    }
    const uint64_t logical = static_cast<uint64_t>(block_off);
    if (block_off < 0 || logical < end || logical > mem->size || len > mem->size - logical) {
      return Status::InvalidArgument(fmt::format(
          "{}: sparse data block of {} bytes at logical byte {}: out of order or past the "
          "size {}",
          where(), len, block_off, mem->size));
    }
    const uint64_t physical = static_cast<uint64_t>(p - base);
    // A sparse file's checksum covers its stored bytes, extent by extent:
    // holes are zeros by construction, and hashing them would let a header
    // that claims a petabyte of holes keep the scan busy for days.
    if (hash) XXH3_64bits_update(hash.get(), p, len);
    if (!mem->extents.empty() && mem->extents.back().logical + mem->extents.back().length ==
                                     logical &&
        mem->extents.back().physical + mem->extents.back().length == physical) {
      mem->extents.back().length += len;
    } else {
      mem->extents.push_back({logical, len, physical});
    }
    end = logical + len;
  }
  // libarchive stops at the end of the sparse map and skips the padding the
  // header's size implies: if the map does not account for exactly that
  // data, it is left off a block boundary and every later header would be
  // misread (GNU tar reads such a member differently too).
  if (archive_filter_bytes(a, 0) % kBlock != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: its sparse map does not account for its stored data (ends at byte {}, not on a "
        "512-byte boundary)",
        where(), archive_filter_bytes(a, 0)));
  }
  if (hash) {
    mem->has_checksum = true;
    mem->xxh3 = XXH3_64bits_digest(hash.get());
  }
  mem->data_offset = mem->extents.empty() ? 0 : mem->extents.front().physical;
  if (!GnuSparse10MapIsStrict(base, size, mem->header_offset, map_end)) {
    return Status::InvalidArgument(fmt::format(
        "{}: malformed GNU sparse 1.0 map (GNU tar refuses it)", where()));
  }
  return Status::Ok();
}

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
    return Status::FromErrno(errno, fmt::format("shard {}: fcntl", path));
  }
  if (st.st_size == 0) {
    return Status::InvalidArgument(fmt::format("shard {}: empty file, not a tar archive", path));
  }
  *info = ShardInfo{};
  info->size = static_cast<uint64_t>(st.st_size);
  info->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  Result<uint64_t> fp = index::ShardFingerprint(fd.get(), info->size);
  if (!fp.ok()) return fp.status().WithContext(fmt::format("shard {}", path));
  info->fingerprint = *fp;

  Mapping map;
  void* m = ::mmap(nullptr, info->size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (m == MAP_FAILED) return Status::FromErrno(errno, fmt::format("shard {}: mmap", path));
  map.base = static_cast<const char*>(m);
  map.size = info->size;
  if (options.checksum) ::madvise(m, map.size, MADV_SEQUENTIAL);
  return ScanTarBytes(path, map.base, map.size, options, on_member, info);
}

Status ScanTarBytes(std::string_view path, const char* data, size_t size,
                    const ScanOptions& options,
                    const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  auto fail = [&](uint64_t offset, std::string_view what) {
    return Status::InvalidArgument(fmt::format("shard {}: at byte {}: {}", path, offset, what));
  };
  if (size == 0) {
    return Status::InvalidArgument(fmt::format("shard {}: empty file, not a tar archive", path));
  }
  const char* const base = data;
  std::unique_ptr<struct archive, decltype(&archive_read_free)> a(archive_read_new(),
                                                                  &archive_read_free);
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  Source src{data, size};
  if (archive_read_open2(a.get(), &src, nullptr, &ReadWhole, nullptr, nullptr) != ARCHIVE_OK) {
    return fail(0, fmt::format("not an uncompressed tar archive: {}",
                               archive_error_string(a.get())));
  }

  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(),
                                                                 &XXH3_freeState);
  uint64_t next_header = 0;  // Where we expect the next header to start.
  for (;;) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_WARN) {
      // libarchive recovered (e.g. a name it could not convert); keep going.
    } else if (r != ARCHIVE_OK) {
      const char* err = archive_error_string(a.get());
      return fail(next_header, fmt::format("bad header: {}", err ? err : "unreadable"));
    }
    ScannedMember mem;
    mem.header_offset = static_cast<uint64_t>(archive_read_header_position(a.get()));
    const char* name = PathOf(e);
    if (!name) return fail(mem.header_offset, "member without a readable name");
    mem.path = name;
    mem.mode = archive_entry_perm(e) & 07777;
    mem.uid = archive_entry_uid(e);
    mem.gid = archive_entry_gid(e);
    mem.mtime_ns = MtimeNs(archive_entry_mtime(e), archive_entry_mtime_nsec(e));
    // libarchive 3.6.2 applies a member's extension headers innermost first,
    // so of a GNU 'L' ('K') header and a pax path (linkpath) record the one
    // that comes *first* wins; GNU tar lets the pax record win in either
    // order. It also misreads negative pax times with a fraction. The whole
    // shard is in memory: read the member's extension headers here, and let
    // them decide as GNU tar 1.34 does.
    Extensions ext;
    if (ReadExtensions(data, size, mem.header_offset, &ext)) {
      if (ext.gnu_name && ext.path) mem.path = *ext.path;
      if (ext.mtime) ParsePaxTimeNs(*ext.mtime, &mem.mtime_ns);
    }
    int64_t member_size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (member_size < 0) {
      return fail(mem.header_offset, fmt::format("member '{}': negative size", name));
    }
    mem.size = static_cast<uint64_t>(member_size);
    if (const char* hl = HardlinkOf(e)) {
      mem.kind = MemberKind::kHardlink;
      mem.link_target = hl;
      mem.size = 0;
    } else {
      switch (archive_entry_filetype(e)) {
        case AE_IFREG: mem.kind = MemberKind::kFile; break;
        case AE_IFDIR: mem.kind = MemberKind::kDir; mem.size = 0; break;
        case AE_IFLNK: {
          mem.kind = MemberKind::kSymlink;
          const char* t = SymlinkOf(e);
          mem.link_target = t ? t : "";
          mem.size = 0;
          break;
        }
        default:
          mem.kind = MemberKind::kOther;
          mem.other_type = OtherTypeName(archive_entry_filetype(e));
          mem.size = 0;
      }
    }
    if (ext.gnu_link && ext.linkpath &&
        (mem.kind == MemberKind::kHardlink || mem.kind == MemberKind::kSymlink)) {
      mem.link_target = *ext.linkpath;
    }
    if (mem.kind == MemberKind::kFile && archive_entry_sparse_count(e) > 0) {
      mem.sparse = true;
      SHARDFS_RETURN_IF_ERROR(ReadSparseExtents(a.get(), path, base, size, options, &mem));
      info->data_bytes += mem.size;
      int64_t consumed = archive_filter_bytes(a.get(), 0);
      next_header = consumed > 0 ? static_cast<uint64_t>(consumed) : mem.header_offset + kBlock;
    } else if (mem.kind == MemberKind::kFile && mem.size > 0) {
      if (options.checksum) XXH3_64bits_reset(hash.get());
      uint64_t seen = 0;
      bool first = true;
      for (;;) {
        const void* buf = nullptr;
        size_t len = 0;
        la_int64_t block_off = 0;
        r = archive_read_data_block(a.get(), &buf, &len, &block_off);
        if (r == ARCHIVE_EOF) break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
          const char* err = archive_error_string(a.get());
          return fail(first ? mem.header_offset : mem.data_offset + seen,
                      fmt::format("member '{}': data unreadable: {}", name,
                                  err ? err : "truncated"));
        }
        const char* p = static_cast<const char*>(buf);
        if (p < base || p + len > base + size || block_off < 0) {
          return Status::NotSupported(fmt::format(
              "shard {}: member '{}' at byte {}: data is not a contiguous range of the shard",
              path, name, mem.header_offset));
        }
        uint64_t at = static_cast<uint64_t>(p - base);
        if (first) {
          mem.data_offset = at - static_cast<uint64_t>(block_off);
          first = false;
        }
        if (at != mem.data_offset + static_cast<uint64_t>(block_off)) {
          return Status::NotSupported(fmt::format(
              "shard {}: member '{}' at byte {}: data is not a contiguous range of the shard",
              path, name, mem.header_offset));
        }
        if (options.checksum) XXH3_64bits_update(hash.get(), p, len);
        seen = static_cast<uint64_t>(block_off) + len;
      }
      if (seen != mem.size || mem.data_offset + mem.size > size) {
        return fail(mem.header_offset,
                    fmt::format("member '{}': {} bytes of data, header says {} (truncated)",
                                name, seen, mem.size));
      }
      if (options.checksum) {
        mem.has_checksum = true;
        mem.xxh3 = XXH3_64bits_digest(hash.get());
      }
      next_header = mem.data_offset + (mem.size + kBlock - 1) / kBlock * kBlock;
      info->data_bytes += mem.size;
    } else {
      if (mem.kind == MemberKind::kFile) {
        mem.has_checksum = options.checksum;
        mem.xxh3 = options.checksum ? XXH3_64bits(nullptr, 0) : 0;
      }
      // Past this member's last header (one block after header_offset only
      // without extension headers: long names and pax records add blocks)
      // and any data the header declares.
      int64_t consumed = archive_filter_bytes(a.get(), 0);
      next_header = consumed > 0 ? static_cast<uint64_t>(consumed) +
                                       (static_cast<uint64_t>(member_size) + kBlock - 1) /
                                           kBlock * kBlock
                                 : mem.header_offset + kBlock;
    }
    ++info->members;
    SHARDFS_RETURN_IF_ERROR(on_member(std::move(mem)));
  }
  return Status::Ok();
}

}  // namespace shardfs::tools
