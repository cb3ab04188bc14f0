#include "src/archive/zip_scanner.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/coding.h"
#include "index/member_path.h"
#include "src/archive/zip_fields.h"
#include "src/codec/encoded_member.h"

namespace shardfs::archive {
namespace {

constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64LocatorSize = 20;
constexpr size_t kEnd64Size = 56;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;
constexpr size_t kMaxComment = 65535;
constexpr uint32_t kMax32 = 0xffffffff;
constexpr uint16_t kMax16 = 0xffff;

constexpr uint16_t kFlagEncrypted = 1 << 0;
constexpr uint16_t kFlagDescriptor = 1 << 3;
constexpr uint16_t kFlagStrongEncryption = 1 << 6;
constexpr uint16_t kFlagUtf8 = 1 << 11;
constexpr uint16_t kFlagMaskedHeaders = 1 << 13;

constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflated = 8;
constexpr uint8_t kHostUnix = 3;
constexpr size_t kMaxSymlinkTarget = 4095;

// What the first pass over the central directory collects, for the zip
// bomb checks (src/archive/zip_scanner.h).
struct Census {
  struct Span {
    uint64_t begin = 0;    // The local header.
    uint64_t end = 0;      // Past the compressed data.
    uint64_t central = 0;  // The central directory entry, for its name.
  };
  std::vector<Span> spans;
  uint64_t declared = 0;  // Uncompressed bytes of the files, saturated.
};

// A central directory entry's fields, its zip64 values applied.
struct CentralEntry {
  uint64_t here = 0;  // Where the entry starts.
  uint16_t made_by = 0, flags = 0, method = 0, dos_time = 0, dos_date = 0;
  uint32_t crc = 0, external = 0;
  uint64_t comp = 0, uncomp = 0, disk = 0, local = 0;
  std::string_view raw_name, extra;
  std::optional<std::string> unicode_name;  // From a valid Unicode path field.
  uint8_t host() const { return static_cast<uint8_t>(made_by >> 8); }
};

// The kind and mode of a member as unzip restores them: from the Unix mode
// where the entry was made on Unix and has one, else from the DOS
// attributes and a trailing '/'.
void SetKindAndMode(const CentralEntry& e, const std::string& path, ScannedMember* m) {
  const uint32_t unix_mode = e.external >> 16;
  const bool slash = path.back() == '/';
  if (e.host() != kHostUnix || unix_mode == 0) {
    const bool dir = slash || (e.external & 0x10);
    m->kind = dir ? MemberKind::kDir : MemberKind::kFile;
    m->mode = dir ? 0755 : (e.external & 1) ? 0444 : 0644;
    return;
  }
  switch (unix_mode & S_IFMT) {
    case S_IFLNK:
      m->kind = MemberKind::kSymlink;
      break;
    case S_IFDIR:
      m->kind = MemberKind::kDir;
      break;
    case 0:
    case S_IFREG:
      m->kind = slash ? MemberKind::kDir : MemberKind::kFile;
      break;
    case S_IFIFO:
      m->kind = MemberKind::kOther;
      m->other_type = "fifo";
      break;
    case S_IFCHR:
      m->kind = MemberKind::kOther;
      m->other_type = "character device";
      break;
    case S_IFBLK:
      m->kind = MemberKind::kOther;
      m->other_type = "block device";
      break;
    default:
      m->kind = MemberKind::kOther;
      m->other_type = "socket or unknown file type";
      break;
  }
  m->mode = unix_mode & 0777;
}

class ZipScan {
 public:
  ZipScan(std::string_view name, const char* data, size_t size, const ScanOptions& options)
      : name_(name), data_(data), size_(size), options_(options) {}

  Status Run(const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info);

 private:
  Status Bad(std::string_view what) const {
    return Status::InvalidArgument(fmt::format("zip {}: {}", name_, what));
  }
  Status BadMember(std::string_view member, uint64_t at, std::string_view what) const {
    return Status::InvalidArgument(fmt::format(
        "zip {}: member '{}' (central header at byte {}): {}", name_, member, at, what));
  }
  std::string_view Bytes(uint64_t at, uint64_t len) const {
    return {data_ + at, static_cast<size_t>(len)};
  }
  bool Fits(uint64_t at, uint64_t len) const { return at <= size_ && len <= size_ - at; }
  // Finds the central directory: sets cd_offset_, cd_size_, entries_.
  Status FindDirectory();
  // FindDirectory's zip64 step, for an end record at `end` with a zip64
  // locator before it: reads the zip64 end record the locator points at,
  // whose values replace the end record's (entries_, cd_size_, cd_offset_,
  // *disk_entries); *cd_end becomes the record's offset.
  Status ReadZip64End(uint64_t end, uint64_t* disk_entries, uint64_t* cd_end);
  // Reads the central entry at *at and its local header. With `census`
  // (the first pass), records the member there and hands nothing on.
  Status Member(uint64_t* at, const std::function<Status(ScannedMember&&)>& on_member,
                ShardInfo* info, Census* census);
  // Member's steps, in order; each returns the Status Member documents.
  // Reads the central entry at *at into *e and moves *at past it.
  Status ReadCentral(uint64_t* at, CentralEntry* e) const;
  // Refuses encryption, methods other than stored and deflate, other disks.
  Status CheckSupported(const CentralEntry& e) const;
  // The member's name, decoded (UTF-8, Unicode path field or CP437) and
  // checked to be a path that can stand in a tree.
  Result<std::string> MemberPath(const CentralEntry& e) const;
  // Checks the local header against `e` and the data's place in the file;
  // sets *data_at to where the data starts and *local_extra.
  Status ReadLocal(const CentralEntry& e, uint64_t* data_at, std::string_view* local_extra) const;
  // The member's content (its data, inflated if deflated), CRC-checked.
  Result<std::string> Content(const CentralEntry& e, uint64_t data_at) const;
  // InvalidArgument unless stored data at `data_at` has the entry's CRC-32.
  Status CheckStoredCrc(const CentralEntry& e, uint64_t data_at) const;
  // Sets the symlink target, or a file's size, data range and checksum.
  Status FillData(const CentralEntry& e, uint64_t data_at, ScannedMember* m) const;
  Status BadEntry(const CentralEntry& e, std::string_view what) const {
    return BadMember(e.raw_name, e.here, what);
  }
  // Refuses the zip bombs the census shows.
  Status CheckBomb(Census& census) const;
  // The raw name of the central entry at `central`, for messages.
  std::string_view CentralName(uint64_t central) const {
    return Bytes(central + kCentralSize, DecodeFixed16(data_ + central + 28));
  }

  std::string_view name_;
  const char* data_;
  size_t size_;
  const ScanOptions& options_;
  uint64_t cd_offset_ = 0;
  uint64_t cd_size_ = 0;
  uint64_t entries_ = 0;
};

Status ZipScan::ReadZip64End(uint64_t end, uint64_t* disk_entries, uint64_t* cd_end) {
  const char* l = data_ + end - kEnd64LocatorSize;
  const uint32_t l_disk = DecodeFixed32(l + 4), disks = DecodeFixed32(l + 16);
  const uint64_t at = DecodeFixed64(l + 8);
  if (l_disk != 0 || disks > 1) {
    return Bad(fmt::format("split or spanned archive ({} disks): not supported", disks));
  }
  if (!Fits(at, kEnd64Size) || at + kEnd64Size > end - kEnd64LocatorSize ||
      DecodeFixed32(data_ + at) != kEnd64Sig) {
    return Bad(fmt::format("zip64 end record at byte {} is missing or cut short", at));
  }
  const char* z = data_ + at;
  const uint64_t record = DecodeFixed64(z + 4);
  if (record < kEnd64Size - 12 || at + 12 + record != end - kEnd64LocatorSize) {
    return Bad(
        fmt::format("zip64 end record at byte {}: size {} does not reach its locator", at, record));
  }
  if (DecodeFixed32(z + 16) != 0 || DecodeFixed32(z + 20) != 0) {
    return Bad("split or spanned archive (zip64 disk numbers): not supported");
  }
  *disk_entries = DecodeFixed64(z + 24);
  entries_ = DecodeFixed64(z + 32);
  cd_size_ = DecodeFixed64(z + 40);
  cd_offset_ = DecodeFixed64(z + 48);
  *cd_end = at;
  return Status::Ok();
}

Status ZipScan::FindDirectory() {
  if (size_ < kEndSize) return Bad("no end of central directory record");
  const uint64_t lowest = size_ > kEndSize + kMaxComment ? size_ - kEndSize - kMaxComment : 0;
  std::optional<uint64_t> end;
  std::optional<uint64_t> short_of_end;  // A record whose comment ends before the file does.
  for (uint64_t p = size_ - kEndSize + 1; p-- > lowest;) {
    if (DecodeFixed32(data_ + p) != kEndSig) continue;
    const uint64_t comment_end = p + kEndSize + DecodeFixed16(data_ + p + 20);
    if (comment_end == size_) {
      end = p;
      break;
    }
    if (comment_end < size_ && !short_of_end) short_of_end = comment_end;
  }
  if (!end && short_of_end) {
    return Bad(fmt::format(
        "{} bytes follow the end of central directory record, which ends at byte {}: not "
        "supported, as they could hide a second archive; truncate the file to {} bytes",
        size_ - *short_of_end, *short_of_end, *short_of_end));
  }
  if (!end) return Bad("no end of central directory record (the file is cut short?)");
  const char* e = data_ + *end;
  const uint16_t disk = DecodeFixed16(e + 4), cd_disk = DecodeFixed16(e + 6);
  uint64_t disk_entries = DecodeFixed16(e + 8);
  entries_ = DecodeFixed16(e + 10);
  cd_size_ = DecodeFixed32(e + 12);
  cd_offset_ = DecodeFixed32(e + 16);
  uint64_t cd_end = *end;  // Where the central directory must end.
  // Zip64: a locator right before the end record points at the zip64 end
  // record, whose fields replace the ones above.
  if (*end >= kEnd64LocatorSize &&
      DecodeFixed32(data_ + *end - kEnd64LocatorSize) == kEnd64LocatorSig) {
    SHARDFS_RETURN_IF_ERROR(ReadZip64End(*end, &disk_entries, &cd_end));
  } else if (disk != 0 || cd_disk != 0) {
    return Bad(
        fmt::format("split or spanned archive (disk {} of the central directory {}): "
                    "not supported",
                    disk, cd_disk));
  } else if (entries_ == kMax16 || cd_size_ == kMax32 || cd_offset_ == kMax32) {
    return Bad("zip64 values in the end record but no zip64 end record locator");
  }
  if (disk_entries != entries_) {
    return Bad(
        fmt::format("split or spanned archive ({} of {} entries on this disk): "
                    "not supported",
                    disk_entries, entries_));
  }
  if (cd_offset_ > cd_end || cd_size_ != cd_end - cd_offset_) {
    return Bad(fmt::format(
        "the central directory ({} bytes at byte {}) does not end where the end record is (byte "
        "{}); data before the archive (a self-extractor) is not supported",
        cd_size_, cd_offset_, cd_end));
  }
  if (entries_ > cd_size_ / kCentralSize) {
    return Bad(
        fmt::format("{} entries cannot fit a central directory of {} bytes", entries_, cd_size_));
  }
  return Status::Ok();
}

Status ZipScan::ReadCentral(uint64_t* at, CentralEntry* e) const {
  const uint64_t cd_end = cd_offset_ + cd_size_;
  const uint64_t here = *at;
  if (cd_end - here < kCentralSize || DecodeFixed32(data_ + here) != kCentralSig) {
    return Bad(fmt::format("central directory entry at byte {}: bad signature or cut short", here));
  }
  const char* c = data_ + here;
  e->here = here;
  e->made_by = DecodeFixed16(c + 4);
  e->flags = DecodeFixed16(c + 8);
  e->method = DecodeFixed16(c + 10);
  e->dos_time = DecodeFixed16(c + 12);
  e->dos_date = DecodeFixed16(c + 14);
  e->crc = DecodeFixed32(c + 16);
  e->comp = DecodeFixed32(c + 20);
  e->uncomp = DecodeFixed32(c + 24);
  const uint16_t name_len = DecodeFixed16(c + 28), extra_len = DecodeFixed16(c + 30),
                 comment_len = DecodeFixed16(c + 32);
  e->disk = DecodeFixed16(c + 34);
  e->external = DecodeFixed32(c + 38);
  e->local = DecodeFixed32(c + 42);
  const uint64_t var = uint64_t{name_len} + extra_len + comment_len;
  if (cd_end - here - kCentralSize < var) {
    return Bad(fmt::format("central directory entry at byte {}: runs past the directory", here));
  }
  *at = here + kCentralSize + var;
  e->raw_name = Bytes(here + kCentralSize, name_len);
  e->extra = Bytes(here + kCentralSize + name_len, extra_len);

  // Zip64 values, in the order of the fields that overflowed.
  bool zip64_ok = true;
  const bool tiled = ForEachExtra(e->extra, [&](uint16_t id, std::string_view d) {
    if (id == kExtraZip64) {
      for (uint64_t* v : {&e->uncomp, &e->comp, &e->local}) {
        if (*v != kMax32) continue;
        if (d.size() < 8) {
          zip64_ok = false;
          return;
        }
        *v = DecodeFixed64(d.data());
        d.remove_prefix(8);
      }
      if (e->disk == kMax16) {
        if (d.size() < 4) {
          zip64_ok = false;
          return;
        }
        e->disk = DecodeFixed32(d.data());
      }
    } else if (id == kExtraUnicodePath && d.size() >= 5 && d[0] == 1 &&
               DecodeFixed32(d.data() + 1) ==
                   codec::Crc32(0, e->raw_name.data(), e->raw_name.size())) {
      e->unicode_name.emplace(d.substr(5));
    }
  });
  if (!tiled) return BadEntry(*e, "malformed extra field");
  if (!zip64_ok) return BadEntry(*e, "zip64 extra field too short for the values it must hold");
  return Status::Ok();
}

Status ZipScan::CheckSupported(const CentralEntry& e) const {
  if (e.flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeaders)) {
    return BadEntry(e, "encrypted: not supported");
  }
  const uint16_t method = e.method;
  if (method != kMethodStored && method != kMethodDeflated) {
    return BadEntry(e, fmt::format("compression method {} ({}): only stored (0) and deflate (8) "
                                   "are supported",
                                   method,
                                   method == 12   ? "bzip2"
                                   : method == 14 ? "lzma"
                                   : method == 93 ? "zstd"
                                   : method == 95 ? "xz"
                                   : method == 9  ? "deflate64"
                                                  : "unknown"));
  }
  if (e.disk != 0) {
    return BadEntry(e,
                    fmt::format("on disk {}: split or spanned archives are not supported", e.disk));
  }
  return Status::Ok();
}

Result<std::string> ZipScan::MemberPath(const CentralEntry& e) const {
  const uint8_t host = e.host();
  std::string path;
  if (e.flags & kFlagUtf8) {
    path.assign(e.raw_name);
  } else if (e.unicode_name) {
    path = *e.unicode_name;
  } else if (host == 0 || host == 6 || host == 11 || host == 14) {
    path = Cp437ToUtf8(e.raw_name);
  } else {
    path.assign(e.raw_name);
  }
  if (path.empty()) return BadEntry(e, "empty name");
  if (path.find('\0') != std::string::npos) return BadEntry(e, "name holds a NUL byte");
  if ((e.flags & kFlagUtf8) && !ValidUtf8(path)) {
    return BadEntry(e, "name flagged UTF-8 is not UTF-8");
  }
  Result<std::string> norm = index::NormalizeMemberPath(path);
  if (!norm.ok()) {
    return BadEntry(e, fmt::format("name cannot be in a tree: {}", norm.status().message()));
  }
  return path;
}

Status ZipScan::ReadLocal(const CentralEntry& e, uint64_t* data_at,
                          std::string_view* local_extra) const {
  const uint64_t local = e.local;
  if (!Fits(local, kLocalSize) || DecodeFixed32(data_ + local) != kLocalSig) {
    return BadEntry(e, fmt::format("no local header at byte {}", local));
  }
  const char* l = data_ + local;
  const uint16_t l_flags = DecodeFixed16(l + 6), l_method = DecodeFixed16(l + 8);
  const uint32_t l_crc = DecodeFixed32(l + 14);
  uint64_t l_comp = DecodeFixed32(l + 18), l_uncomp = DecodeFixed32(l + 22);
  const uint16_t l_name_len = DecodeFixed16(l + 26), l_extra_len = DecodeFixed16(l + 28);
  if (!Fits(local + kLocalSize, uint64_t{l_name_len} + l_extra_len)) {
    return BadEntry(e, fmt::format("local header at byte {} runs past the archive", local));
  }
  *local_extra = Bytes(local + kLocalSize + l_name_len, l_extra_len);
  *data_at = local + kLocalSize + l_name_len + l_extra_len;
  auto disagree = [&](std::string_view what) {
    return BadEntry(
        e, fmt::format("the local header at byte {} disagrees with the central directory: {}",
                       local, what));
  };
  if (Bytes(local + kLocalSize, l_name_len) != e.raw_name) return disagree("name");
  if (l_method != e.method) return disagree(fmt::format("method {} vs {}", l_method, e.method));
  if (l_flags & (kFlagEncrypted | kFlagStrongEncryption)) {
    return BadEntry(e, "encrypted: not supported");
  }
  if (!(l_flags & kFlagDescriptor)) {
    if (l_comp == kMax32 || l_uncomp == kMax32) {
      bool found = false;
      ForEachExtra(*local_extra, [&](uint16_t id, std::string_view d) {
        if (id != kExtraZip64 || d.size() < 16) return;
        l_uncomp = DecodeFixed64(d.data());
        l_comp = DecodeFixed64(d.data() + 8);
        found = true;
      });
      if (!found) return disagree("zip64 sizes without a zip64 extra field");
    }
    if (l_crc != e.crc) return disagree(fmt::format("CRC-32 {:08x} vs {:08x}", l_crc, e.crc));
    if (l_comp != e.comp || l_uncomp != e.uncomp) {
      return disagree(fmt::format("sizes {}/{} vs {}/{} (compressed/uncompressed)", l_comp,
                                  l_uncomp, e.comp, e.uncomp));
    }
  }
  if (*data_at > cd_offset_ || e.comp > cd_offset_ - *data_at) {
    return BadEntry(e, fmt::format("data ({} bytes at byte {}) runs into the central directory",
                                   e.comp, *data_at));
  }
  if (e.method == kMethodStored && e.comp != e.uncomp) {
    return BadEntry(e, fmt::format("stored, yet {} compressed bytes for {}", e.comp, e.uncomp));
  }
  return Status::Ok();
}

Result<std::string> ZipScan::Content(const CentralEntry& e, uint64_t data_at) const {
  const std::string_view stored = Bytes(data_at, e.comp);
  if (e.method == kMethodDeflated) {
    const index::EncodedMember enc{index::kMethodDeflate, data_at, e.comp, e.crc};
    Result<std::string> r = codec::DecodeMember(enc, stored, e.uncomp);
    if (!r.ok()) {
      return BadEntry(e, fmt::format("deflate data at byte {}: {}", data_at, r.status().message()));
    }
    return r;
  }
  SHARDFS_RETURN_IF_ERROR(CheckStoredCrc(e, data_at));
  return std::string(stored);
}

Status ZipScan::CheckStoredCrc(const CentralEntry& e, uint64_t data_at) const {
  const std::string_view stored = Bytes(data_at, e.comp);
  if (codec::Crc32(0, stored.data(), stored.size()) != e.crc) {
    return BadEntry(e, fmt::format("stored data at byte {}: CRC-32 mismatch", data_at));
  }
  return Status::Ok();
}

Status ZipScan::FillData(const CentralEntry& e, uint64_t data_at, ScannedMember* m) const {
  if (m->kind == MemberKind::kSymlink) {
    SHARDFS_ASSIGN_OR_RETURN(m->link_target, Content(e, data_at));
    if (m->link_target.empty() || m->link_target.find('\0') != std::string::npos) {
      return BadEntry(e, "symlink target empty or holding a NUL byte");
    }
    return Status::Ok();
  }
  if (m->kind != MemberKind::kFile) return Status::Ok();
  const bool deflated = e.method == kMethodDeflated;
  m->size = e.uncomp;
  m->data_offset = e.uncomp == 0 ? 0 : data_at;
  if (deflated && e.uncomp > 0) {
    m->encoded = true;
    m->encoding = index::EncodedMember{index::kMethodDeflate, data_at, e.comp, e.crc};
  }
  if (options_.checksum) {
    if (deflated) {
      SHARDFS_ASSIGN_OR_RETURN(std::string bytes, Content(e, data_at));
      m->xxh3 = XXH3_64bits(bytes.data(), bytes.size());
    } else {
      // Hashed in place: a stored member's bytes are not copied.
      SHARDFS_RETURN_IF_ERROR(CheckStoredCrc(e, data_at));
      const std::string_view stored = Bytes(data_at, e.comp);
      m->xxh3 = XXH3_64bits(stored.data(), stored.size());
    }
    m->has_checksum = true;
  }
  return Status::Ok();
}

Status ZipScan::Member(uint64_t* at, const std::function<Status(ScannedMember&&)>& on_member,
                       ShardInfo* info, Census* census) {
  CentralEntry e;
  SHARDFS_RETURN_IF_ERROR(ReadCentral(at, &e));
  SHARDFS_RETURN_IF_ERROR(CheckSupported(e));
  SHARDFS_ASSIGN_OR_RETURN(std::string path, MemberPath(e));
  uint64_t data_at = 0;
  std::string_view local_extra;
  SHARDFS_RETURN_IF_ERROR(ReadLocal(e, &data_at, &local_extra));

  ScannedMember m;
  m.header_offset = e.local;
  m.uid = m.gid = 0;
  SetKindAndMode(e, path, &m);
  if (m.kind == MemberKind::kSymlink && e.uncomp > kMaxSymlinkTarget) {
    return BadEntry(e, fmt::format("symlink target of {} bytes", e.uncomp));
  }
  if (m.kind == MemberKind::kFile && e.method == kMethodDeflated && e.uncomp > kMaxDeflatedMember) {
    return BadEntry(e, fmt::format("deflated member of {} bytes: larger than {} bytes, which a "
                                   "read inflates whole; store it (zip -0) instead",
                                   e.uncomp, kMaxDeflatedMember));
  }
  if (census) {
    census->spans.push_back({e.local, data_at + e.comp, e.here});
    if (m.kind == MemberKind::kFile) {
      census->declared =
          census->declared > UINT64_MAX - e.uncomp ? UINT64_MAX : census->declared + e.uncomp;
    }
    return Status::Ok();
  }
  std::optional<int64_t> mtime = ExtraMtime(local_extra);
  if (!mtime) mtime = ExtraMtime(e.extra);
  m.mtime_ns = mtime ? *mtime : DosTimeNs(e.dos_time, e.dos_date);
  m.path = std::move(path);
  SHARDFS_RETURN_IF_ERROR(FillData(e, data_at, &m));
  if (m.kind == MemberKind::kFile) info->data_bytes += e.uncomp;
  ++info->members;
  return on_member(std::move(m));
}

Status ZipScan::CheckBomb(Census& census) const {
  auto& spans = census.spans;
  std::sort(spans.begin(), spans.end(),
            [](const Census::Span& a, const Census::Span& b) { return a.begin < b.begin; });
  // Sorted by start, any overlap shows between neighbours.
  for (size_t i = 1; i < spans.size(); ++i) {
    const Census::Span &a = spans[i - 1], &b = spans[i];
    if (b.begin < a.end) {
      return Bad(fmt::format(
          "members '{}' (local header at byte {}, data to byte {}) and '{}' (local header at "
          "byte {}) overlap: refused as a zip bomb (no zip writer makes members share bytes)",
          CentralName(a.central), a.begin, a.end, CentralName(b.central), b.begin));
    }
  }
  const uint64_t ratio = std::max<uint64_t>(options_.max_zip_ratio, 1);
  const uint64_t bound = size_ > UINT64_MAX / ratio ? UINT64_MAX : size_ * ratio;
  if (census.declared > kZipRatioFloor && census.declared > bound) {
    return Bad(fmt::format(
        "its members declare {} uncompressed bytes, more than {} times the zip's {} bytes: "
        "refused as a zip bomb (--max-zip-ratio N raises the bound, default {})",
        census.declared, ratio, size_, kDefaultMaxZipRatio));
  }
  return Status::Ok();
}

Status ZipScan::Run(const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  info->zip = true;
  SHARDFS_RETURN_IF_ERROR(FindDirectory());
  // Two passes: every entry is read and the bomb checks made before the
  // first member is handed on or inflated.
  Census census;
  census.spans.reserve(entries_);  // At most one per 46 bytes of the file.
  uint64_t at = cd_offset_;
  for (uint64_t i = 0; i < entries_; ++i) {
    SHARDFS_RETURN_IF_ERROR(Member(&at, on_member, info, &census));
  }
  if (at != cd_offset_ + cd_size_) {
    return Bad(fmt::format("{} bytes left in the central directory after its {} entries",
                           cd_offset_ + cd_size_ - at, entries_));
  }
  SHARDFS_RETURN_IF_ERROR(CheckBomb(census));
  census = Census{};
  if (options_.on_directory_read) options_.on_directory_read();
  at = cd_offset_;
  for (uint64_t i = 0; i < entries_; ++i) {
    SHARDFS_RETURN_IF_ERROR(Member(&at, on_member, info, nullptr));
  }
  return Status::Ok();
}

}  // namespace

bool LooksLikeZip(const char* data, size_t size, uint64_t* entries) {
  if (size < kEndSize) return false;
  const uint64_t lowest = size > kEndSize + kMaxComment ? size - kEndSize - kMaxComment : 0;
  for (uint64_t p = size - kEndSize + 1; p-- > lowest;) {
    if (DecodeFixed32(data + p) == kEndSig && DecodeFixed16(data + p + 20) == size - p - kEndSize) {
      if (entries) *entries = DecodeFixed16(data + p + 10);
      return true;
    }
  }
  return false;
}

Status ScanZipBytes(std::string_view name, const char* data, size_t size,
                    const ScanOptions& options,
                    const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info) {
  return ZipScan(name, data, size, options).Run(on_member, info);
}

}  // namespace shardfs::archive
