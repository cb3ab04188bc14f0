#include "archive/zip_scanner.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "base/coding.h"
#include "codec/encoded_member.h"
#include "index/member_path.h"

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

constexpr uint16_t kExtraZip64 = 0x0001;
constexpr uint16_t kExtraNtfs = 0x000a;
constexpr uint16_t kExtraPkUnix = 0x000d;
constexpr uint16_t kExtraTimestamp = 0x5455;
constexpr uint16_t kExtraInfoZipUnix1 = 0x5855;
constexpr uint16_t kExtraUnicodePath = 0x7075;

constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflated = 8;
constexpr uint8_t kHostUnix = 3;
constexpr size_t kMaxSymlinkTarget = 4095;

// CP437's upper half, as Unicode code points (the lower half is ASCII).
constexpr uint16_t kCp437High[128] = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7, 0x00EA, 0x00EB, 0x00E8, 0x00EF,
    0x00EE, 0x00EC, 0x00C4, 0x00C5, 0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9,
    0x00FF, 0x00D6, 0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192, 0x00E1, 0x00ED, 0x00F3, 0x00FA,
    0x00F1, 0x00D1, 0x00AA, 0x00BA, 0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556, 0x2555, 0x2563, 0x2551, 0x2557,
    0x255D, 0x255C, 0x255B, 0x2510, 0x2514, 0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F,
    0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256C, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559,
    0x2558, 0x2552, 0x2553, 0x256B, 0x256A, 0x2518, 0x250C, 0x2588, 0x2584, 0x258C, 0x2590, 0x2580,
    0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4, 0x03A6, 0x0398, 0x03A9, 0x03B4,
    0x221E, 0x03C6, 0x03B5, 0x2229, 0x2261, 0x00B1, 0x2265, 0x2264, 0x2320, 0x2321, 0x00F7, 0x2248,
    0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0,
};

std::string Cp437ToUtf8(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    const uint32_t cp = c < 0x80 ? c : kCp437High[c - 0x80];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// The DOS date and time as local time (mktime), as unzip restores it.
int64_t DosTimeNs(uint16_t time, uint16_t date) {
  struct tm tm {};
  tm.tm_year = 80 + (date >> 9);
  tm.tm_mon = ((date >> 5) & 15) - 1;
  tm.tm_mday = date & 31;
  tm.tm_hour = time >> 11;
  tm.tm_min = (time >> 5) & 63;
  tm.tm_sec = (time & 31) * 2;
  tm.tm_isdst = -1;
  const time_t t = ::mktime(&tm);
  return static_cast<int64_t>(t) * 1000000000;
}

// Calls fn(id, data) for each field of an extra block; false if the fields
// do not tile it exactly.
template <typename Fn>
bool ForEachExtra(std::string_view extra, Fn fn) {
  while (!extra.empty()) {
    if (extra.size() < 4) return false;
    const uint16_t id = DecodeFixed16(extra.data());
    const uint16_t len = DecodeFixed16(extra.data() + 2);
    if (extra.size() - 4 < len) return false;
    fn(id, extra.substr(4, len));
    extra.remove_prefix(4 + len);
  }
  return true;
}

// The mtime an extra block records, by unzip's preference; nullopt if none.
std::optional<int64_t> ExtraMtime(std::string_view extra) {
  std::optional<int64_t> ut, ntfs, ux;
  ForEachExtra(extra, [&](uint16_t id, std::string_view d) {
    if (id == kExtraTimestamp && d.size() >= 5 && (d[0] & 1)) {
      ut = int64_t{static_cast<int32_t>(DecodeFixed32(d.data() + 1))} * 1000000000;
    } else if (id == kExtraNtfs && d.size() >= 4 + 4 + 24) {
      // Reserved u32, then tag 1 of 24 bytes: mtime, atime, ctime (FILETIME).
      std::string_view t = d.substr(4);
      while (t.size() >= 4) {
        const uint16_t tag = DecodeFixed16(t.data()), len = DecodeFixed16(t.data() + 2);
        if (t.size() - 4 < len) break;
        if (tag == 1 && len >= 8) {
          const int64_t ft = static_cast<int64_t>(DecodeFixed64(t.data() + 4));
          ntfs = (ft / 10000000 - 11644473600) * 1000000000;
        }
        t.remove_prefix(4 + len);
      }
    } else if ((id == kExtraInfoZipUnix1 || id == kExtraPkUnix) && d.size() >= 8) {
      ux = int64_t{DecodeFixed32(d.data() + 4)} * 1000000000;
    }
  });
  if (ut) return ut;
  if (ntfs) return ntfs;
  return ux;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (n == 9 || s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

// What the first pass over the central directory collects, for the zip
// bomb checks (archive/zip_scanner.h).
struct Census {
  struct Span {
    uint64_t begin = 0;    // The local header.
    uint64_t end = 0;      // Past the compressed data.
    uint64_t central = 0;  // The central directory entry, for its name.
  };
  std::vector<Span> spans;
  uint64_t declared = 0;  // Uncompressed bytes of the files, saturated.
};

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
  // Reads the central entry at *at and its local header. With `census`
  // (the first pass), records the member there and hands nothing on.
  Status Member(uint64_t* at, const std::function<Status(ScannedMember&&)>& on_member,
                ShardInfo* info, Census* census);
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
    const char* l = data_ + *end - kEnd64LocatorSize;
    const uint32_t l_disk = DecodeFixed32(l + 4), disks = DecodeFixed32(l + 16);
    const uint64_t at = DecodeFixed64(l + 8);
    if (l_disk != 0 || disks > 1) {
      return Bad(fmt::format("split or spanned archive ({} disks): not supported", disks));
    }
    if (!Fits(at, kEnd64Size) || at + kEnd64Size > *end - kEnd64LocatorSize ||
        DecodeFixed32(data_ + at) != kEnd64Sig) {
      return Bad(fmt::format("zip64 end record at byte {} is missing or cut short", at));
    }
    const char* z = data_ + at;
    const uint64_t record = DecodeFixed64(z + 4);
    if (record < kEnd64Size - 12 || at + 12 + record != *end - kEnd64LocatorSize) {
      return Bad(fmt::format("zip64 end record at byte {}: size {} does not reach its locator", at,
                             record));
    }
    if (DecodeFixed32(z + 16) != 0 || DecodeFixed32(z + 20) != 0) {
      return Bad("split or spanned archive (zip64 disk numbers): not supported");
    }
    disk_entries = DecodeFixed64(z + 24);
    entries_ = DecodeFixed64(z + 32);
    cd_size_ = DecodeFixed64(z + 40);
    cd_offset_ = DecodeFixed64(z + 48);
    cd_end = at;
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

Status ZipScan::Member(uint64_t* at, const std::function<Status(ScannedMember&&)>& on_member,
                       ShardInfo* info, Census* census) {
  const uint64_t cd_end = cd_offset_ + cd_size_;
  const uint64_t here = *at;
  if (cd_end - here < kCentralSize || DecodeFixed32(data_ + here) != kCentralSig) {
    return Bad(fmt::format("central directory entry at byte {}: bad signature or cut short", here));
  }
  const char* c = data_ + here;
  const uint16_t made_by = DecodeFixed16(c + 4);
  const uint16_t flags = DecodeFixed16(c + 8);
  const uint16_t method = DecodeFixed16(c + 10);
  const uint16_t dos_time = DecodeFixed16(c + 12), dos_date = DecodeFixed16(c + 14);
  const uint32_t crc = DecodeFixed32(c + 16);
  uint64_t comp = DecodeFixed32(c + 20), uncomp = DecodeFixed32(c + 24);
  const uint16_t name_len = DecodeFixed16(c + 28), extra_len = DecodeFixed16(c + 30),
                 comment_len = DecodeFixed16(c + 32);
  uint64_t disk = DecodeFixed16(c + 34);
  const uint32_t external = DecodeFixed32(c + 38);
  uint64_t local = DecodeFixed32(c + 42);
  const uint64_t var = uint64_t{name_len} + extra_len + comment_len;
  if (cd_end - here - kCentralSize < var) {
    return Bad(fmt::format("central directory entry at byte {}: runs past the directory", here));
  }
  *at = here + kCentralSize + var;
  const std::string_view raw_name = Bytes(here + kCentralSize, name_len);
  const std::string_view extra = Bytes(here + kCentralSize + name_len, extra_len);
  const std::string shown(raw_name);  // For messages: the raw bytes.
  auto bad = [&](std::string_view what) { return BadMember(shown, here, what); };

  // Zip64 values, in the order of the fields that overflowed.
  bool zip64_ok = true;
  std::optional<std::string> unicode_name;
  const bool tiled = ForEachExtra(extra, [&](uint16_t id, std::string_view d) {
    if (id == kExtraZip64) {
      for (uint64_t* v : {&uncomp, &comp, &local}) {
        if (*v != kMax32) continue;
        if (d.size() < 8) {
          zip64_ok = false;
          return;
        }
        *v = DecodeFixed64(d.data());
        d.remove_prefix(8);
      }
      if (disk == kMax16) {
        if (d.size() < 4) {
          zip64_ok = false;
          return;
        }
        disk = DecodeFixed32(d.data());
      }
    } else if (id == kExtraUnicodePath && d.size() >= 5 && d[0] == 1 &&
               DecodeFixed32(d.data() + 1) == codec::Crc32(0, raw_name.data(), raw_name.size())) {
      unicode_name.emplace(d.substr(5));
    }
  });
  if (!tiled) return bad("malformed extra field");
  if (!zip64_ok) return bad("zip64 extra field too short for the values it must hold");
  if (flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMaskedHeaders)) {
    return bad("encrypted: not supported");
  }
  if (method != kMethodStored && method != kMethodDeflated) {
    return bad(
        fmt::format("compression method {} ({}): only stored (0) and deflate (8) are "
                    "supported",
                    method,
                    method == 12   ? "bzip2"
                    : method == 14 ? "lzma"
                    : method == 93 ? "zstd"
                    : method == 95 ? "xz"
                    : method == 9  ? "deflate64"
                                   : "unknown"));
  }
  if (disk != 0)
    return bad(fmt::format("on disk {}: split or spanned archives are not supported", disk));

  // The name.
  const uint8_t host = static_cast<uint8_t>(made_by >> 8);
  std::string path;
  if (flags & kFlagUtf8) {
    path.assign(raw_name);
  } else if (unicode_name) {
    path = *unicode_name;
  } else if (host == 0 || host == 6 || host == 11 || host == 14) {
    path = Cp437ToUtf8(raw_name);
  } else {
    path.assign(raw_name);
  }
  if (path.empty()) return bad("empty name");
  if (path.find('\0') != std::string::npos) return bad("name holds a NUL byte");
  if ((flags & kFlagUtf8) && !ValidUtf8(path)) return bad("name flagged UTF-8 is not UTF-8");
  {
    Result<std::string> norm = index::NormalizeMemberPath(path);
    if (!norm.ok())
      return bad(fmt::format("name cannot be in a tree: {}", norm.status().message()));
  }

  // The local header, which must agree.
  if (!Fits(local, kLocalSize) || DecodeFixed32(data_ + local) != kLocalSig) {
    return bad(fmt::format("no local header at byte {}", local));
  }
  const char* l = data_ + local;
  const uint16_t l_flags = DecodeFixed16(l + 6), l_method = DecodeFixed16(l + 8);
  const uint32_t l_crc = DecodeFixed32(l + 14);
  uint64_t l_comp = DecodeFixed32(l + 18), l_uncomp = DecodeFixed32(l + 22);
  const uint16_t l_name_len = DecodeFixed16(l + 26), l_extra_len = DecodeFixed16(l + 28);
  if (!Fits(local + kLocalSize, uint64_t{l_name_len} + l_extra_len)) {
    return bad(fmt::format("local header at byte {} runs past the archive", local));
  }
  const std::string_view l_extra = Bytes(local + kLocalSize + l_name_len, l_extra_len);
  const uint64_t data_at = local + kLocalSize + l_name_len + l_extra_len;
  auto disagree = [&](std::string_view what) {
    return bad(fmt::format("the local header at byte {} disagrees with the central directory: {}",
                           local, what));
  };
  if (Bytes(local + kLocalSize, l_name_len) != raw_name) return disagree("name");
  if (l_method != method) return disagree(fmt::format("method {} vs {}", l_method, method));
  if (l_flags & (kFlagEncrypted | kFlagStrongEncryption)) return bad("encrypted: not supported");
  if (!(l_flags & kFlagDescriptor)) {
    if (l_comp == kMax32 || l_uncomp == kMax32) {
      bool found = false;
      ForEachExtra(l_extra, [&](uint16_t id, std::string_view d) {
        if (id != kExtraZip64 || d.size() < 16) return;
        l_uncomp = DecodeFixed64(d.data());
        l_comp = DecodeFixed64(d.data() + 8);
        found = true;
      });
      if (!found) return disagree("zip64 sizes without a zip64 extra field");
    }
    if (l_crc != crc) return disagree(fmt::format("CRC-32 {:08x} vs {:08x}", l_crc, crc));
    if (l_comp != comp || l_uncomp != uncomp) {
      return disagree(fmt::format("sizes {}/{} vs {}/{} (compressed/uncompressed)", l_comp,
                                  l_uncomp, comp, uncomp));
    }
  }
  if (data_at > cd_offset_ || comp > cd_offset_ - data_at) {
    return bad(
        fmt::format("data ({} bytes at byte {}) runs into the central directory", comp, data_at));
  }
  if (method == kMethodStored && comp != uncomp) {
    return bad(fmt::format("stored, yet {} compressed bytes for {}", comp, uncomp));
  }

  ScannedMember m;
  m.header_offset = local;
  m.uid = m.gid = 0;
  const uint32_t unix_mode = external >> 16;
  const bool has_unix = host == kHostUnix && unix_mode != 0;
  const bool slash = path.back() == '/';
  if (has_unix) {
    switch (unix_mode & S_IFMT) {
      case S_IFLNK:
        m.kind = MemberKind::kSymlink;
        break;
      case S_IFDIR:
        m.kind = MemberKind::kDir;
        break;
      case 0:
      case S_IFREG:
        m.kind = slash ? MemberKind::kDir : MemberKind::kFile;
        break;
      case S_IFIFO:
        m.kind = MemberKind::kOther;
        m.other_type = "fifo";
        break;
      case S_IFCHR:
        m.kind = MemberKind::kOther;
        m.other_type = "character device";
        break;
      case S_IFBLK:
        m.kind = MemberKind::kOther;
        m.other_type = "block device";
        break;
      default:
        m.kind = MemberKind::kOther;
        m.other_type = "socket or unknown file type";
        break;
    }
    m.mode = unix_mode & 0777;
  } else {
    const bool dir = slash || (external & 0x10);
    m.kind = dir ? MemberKind::kDir : MemberKind::kFile;
    m.mode = dir ? 0755 : (external & 1) ? 0444 : 0644;
  }
  if (m.kind == MemberKind::kSymlink && uncomp > kMaxSymlinkTarget) {
    return bad(fmt::format("symlink target of {} bytes", uncomp));
  }
  if (m.kind == MemberKind::kFile && method == kMethodDeflated && uncomp > kMaxDeflatedMember) {
    return bad(
        fmt::format("deflated member of {} bytes: larger than {} bytes, which a read "
                    "inflates whole; store it (zip -0) instead",
                    uncomp, kMaxDeflatedMember));
  }
  if (census) {
    census->spans.push_back({local, data_at + comp, here});
    if (m.kind == MemberKind::kFile) {
      census->declared =
          census->declared > UINT64_MAX - uncomp ? UINT64_MAX : census->declared + uncomp;
    }
    return Status::Ok();
  }
  std::optional<int64_t> mtime = ExtraMtime(l_extra);
  if (!mtime) mtime = ExtraMtime(extra);
  m.mtime_ns = mtime ? *mtime : DosTimeNs(dos_time, dos_date);
  m.path = std::move(path);

  const std::string_view stored = Bytes(data_at, comp);
  index::EncodedMember enc{index::kMethodDeflate, data_at, comp, crc};
  auto content = [&]() -> Result<std::string> {
    if (method == kMethodDeflated) {
      Result<std::string> r = codec::DecodeMember(enc, stored, uncomp);
      if (!r.ok()) {
        return bad(fmt::format("deflate data at byte {}: {}", data_at, r.status().message()));
      }
      return r;
    }
    if (codec::Crc32(0, stored.data(), stored.size()) != crc) {
      return bad(fmt::format("stored data at byte {}: CRC-32 mismatch", data_at));
    }
    return std::string(stored);
  };
  if (m.kind == MemberKind::kSymlink) {
    SHARDFS_ASSIGN_OR_RETURN(m.link_target, content());
    if (m.link_target.empty() || m.link_target.find('\0') != std::string::npos) {
      return bad("symlink target empty or holding a NUL byte");
    }
  } else if (m.kind == MemberKind::kFile) {
    m.size = uncomp;
    m.data_offset = uncomp == 0 ? 0 : data_at;
    if (method == kMethodDeflated && uncomp > 0) {
      m.encoded = true;
      m.encoding = enc;
    }
    if (options_.checksum) {
      if (method == kMethodDeflated) {
        SHARDFS_ASSIGN_OR_RETURN(std::string bytes, content());
        m.xxh3 = XXH3_64bits(bytes.data(), bytes.size());
      } else {
        if (codec::Crc32(0, stored.data(), stored.size()) != crc) {
          return bad(fmt::format("stored data at byte {}: CRC-32 mismatch", data_at));
        }
        m.xxh3 = XXH3_64bits(stored.data(), stored.size());
      }
      m.has_checksum = true;
    }
    info->data_bytes += uncomp;
  }
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
