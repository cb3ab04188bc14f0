#include "src/archive/tar_walker.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "base/parse.h"
#include "src/archive/tar_headers.h"

namespace shardfs::archive {
namespace {

// libarchive refuses extension bodies over 1 MiB; the writers we meet put a
// few hundred bytes there. Larger ones go to libarchive.
constexpr uint64_t kMaxExtensionBody = 64 * 1024;
// libarchive stops at 32 nested headers; three kinds of one each plus a
// few 'g' is all the common case needs.
constexpr int kMaxExtensionHeaders = 8;

// Header field offsets (ustar; GNU headers share the first 345 bytes).
constexpr size_t kName = 0, kMode = 100, kUid = 108, kGid = 116, kSize = 124, kMtime = 136,
                 kChecksum = 148, kType = 156, kLinkname = 157, kMagic = 257, kDevMajor = 329,
                 kDevMinor = 337, kPrefix = 345;
// GNU only: the old sparse map and the real size of a sparse member.
constexpr size_t kGnuSparse = 386, kGnuRealSize = 483;

uint8_t Byte(const char* h, size_t i) { return static_cast<uint8_t>(h[i]); }

// A NUL-terminated field of at most `len` bytes.
std::string_view Field(const char* h, size_t off, size_t len) {
  const void* nul = std::memchr(h + off, '\0', len);
  return std::string_view(h + off, nul ? static_cast<const char*>(nul) - (h + off) : len);
}

bool IsZeroBlock(const char* h) {
  static constexpr char kZeros[kTarBlock] = {};
  return std::memcmp(h, kZeros, kTarBlock) == 0;
}

// libarchive's octal parse (tar_atol8) for the fields it parses, restricted
// to what is unambiguous: base-256 and negative values decline. At most 12
// digits, so no overflow.
bool Octal(const char* h, size_t off, size_t len, int64_t* out) {
  const char* f = h + off;
  if (Byte(f, 0) & 0x80) return false;
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == '\t')) ++i;
  if (i < len && f[i] == '-') return false;
  int64_t v = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) v = v * 8 + (f[i] - '0');
  *out = v;
  return true;
}

// libarchive's decimal parse of pax values (tar_atol10): leading blanks, a
// sign, digits up to the first other byte, saturated on overflow.
int64_t Decimal(std::string_view v) {
  size_t i = 0;
  while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
  bool negative = i < v.size() && v[i] == '-';
  if (negative) ++i;
  const int64_t limit = negative ? -(INT64_MIN / 10) : INT64_MAX / 10;
  const int64_t last = negative ? -(INT64_MIN % 10) : INT64_MAX % 10;
  int64_t l = 0;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
    const int digit = v[i] - '0';
    if (l > limit || (l == limit && digit >= last)) return negative ? INT64_MIN : INT64_MAX;
    l = l * 10 + digit;
  }
  return negative ? -l : l;
}

// libarchive's bid check of a numeric field (validate_number_field): its
// open fails unless the first header passes it.
bool ValidNumberField(const char* h, size_t off, size_t len) {
  const char* f = h + off;
  const uint8_t marker = Byte(f, 0);
  if (marker == 128 || marker == 255 || marker == 0) return true;
  size_t i = 0;
  while (i < len && f[i] == ' ') ++i;
  while (i < len && f[i] >= '0' && f[i] <= '7') ++i;
  for (; i < len; ++i) {
    if (f[i] != ' ' && f[i] != '\0') return false;
  }
  return true;
}

bool FirstHeaderBids(const char* h) {
  return ValidNumberField(h, kMode, 8) && ValidNumberField(h, kUid, 8) &&
         ValidNumberField(h, kGid, 8) && ValidNumberField(h, kMtime, 12) &&
         ValidNumberField(h, kSize, 12) && ValidNumberField(h, kDevMajor, 8) &&
         ValidNumberField(h, kDevMinor, 8);
}

enum class Block { kZero, kHeader, kBad };

// An end-of-archive block, a header with a valid unsigned checksum, or
// neither (libarchive also accepts the signed sum of some old writers;
// those shards go to it). One pass over the bytes: reading the headers is
// most of the walk's cost.
Block Classify(const char* h) {
  uint32_t sum = 0, any = 0;
  for (size_t i = 0; i < kTarBlock; ++i) {
    sum += Byte(h, i);
    any |= Byte(h, i);
  }
  if (any == 0) return Block::kZero;
  for (size_t i = kChecksum; i < kChecksum + 8; ++i) {
    const char c = h[i];
    if (c != ' ' && c != '\0' && (c < '0' || c > '7')) return Block::kBad;
    sum += ' ' - Byte(h, i);  // The field counts as spaces.
  }
  int64_t stored = 0;
  if (!Octal(h, kChecksum, 8, &stored)) return Block::kBad;
  return sum == stored ? Block::kHeader : Block::kBad;
}

bool Ascii(std::string_view v) {
  for (char c : v) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

// The pax records of one 'x' header that bear on a ScannedMember; the last
// record of a key wins, in libarchive and in tar_headers.h alike.
struct Pax {
  std::optional<std::string_view> path, linkpath, mtime, size, uid, gid;
};

// Parses pax records as strictly as libarchive and ReadExtensions both do.
// False (decline) for malformed records, NUL bytes in a record, names
// libarchive would convert from UTF-8, and every key not known to leave the
// member's fields alone (GNU.sparse.*, SCHILY.realsize, hdrcharset, ...).
bool ParsePax(std::string_view recs, Pax* pax) {
  while (!recs.empty()) {
    const size_t i = recs.find(' ');
    if (i == std::string_view::npos) return false;
    const std::optional<uint64_t> n = ParseDecimal(recs.substr(0, i));
    if (!n || *n <= i + 1 || *n > recs.size()) return false;
    const size_t len = static_cast<size_t>(*n);
    if (recs[len - 1] != '\n') return false;
    std::string_view kv = recs.substr(i + 1, len - i - 2);
    recs.remove_prefix(len);
    if (kv.find('\0') != std::string_view::npos) return false;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") {
      if (!Ascii(value)) return false;
      pax->path = value;
    } else if (key == "linkpath") {
      if (!Ascii(value)) return false;
      pax->linkpath = value;
    } else if (key == "mtime") {
      pax->mtime = value;
    } else if (key == "size") {
      pax->size = value;
    } else if (key == "uid") {
      pax->uid = value;
    } else if (key == "gid") {
      pax->gid = value;
    } else if (key == "uname" || key == "gname") {
      if (!Ascii(value)) return false;  // libarchive would warn.
    } else if (key == "atime" || key == "ctime" || key == "comment" || key == "SCHILY.dev" ||
               key == "SCHILY.ino" || key == "SCHILY.nlink" || key == "LIBARCHIVE.creationtime" ||
               key.starts_with("SCHILY.xattr.") || key.starts_with("LIBARCHIVE.xattr.")) {
      // Read by libarchive into fields a ScannedMember does not have.
    } else {
      return false;
    }
  }
  return true;
}

// The extension headers before a member's own header, as libarchive applies
// them.
struct Extensions {
  bool has_longname = false, has_longlink = false, has_pax = false;
  std::string_view longname, longlink;
  Pax pax;
};

// Reads the GNU long name and link ('L', 'K') and pax ('x', 'g') headers
// from *pos (whose block is `first`), leaving *pos and *header at the
// member's own header. Returns false to decline the shard.
bool ReadExtensions(const char* data, size_t size, Block first, uint64_t* pos, Extensions* ext,
                    const char** header) {
  for (int n = 0;; ++n) {
    if (size - *pos < kTarBlock) return false;
    const char* h = data + *pos;
    // An end mark among a member's headers is a damaged archive.
    if (n > 0) first = Classify(h);
    if (first != Block::kHeader) return false;
    const char type = h[kType];
    if (type != 'L' && type != 'K' && type != 'x' && type != 'g') {
      *header = h;
      return true;
    }
    if (n == kMaxExtensionHeaders) return false;
    int64_t len = 0;
    if (!Octal(h, kSize, 12, &len) || static_cast<uint64_t>(len) > kMaxExtensionBody) {
      return false;
    }
    const uint64_t body = *pos + kTarBlock;
    const uint64_t padded = (static_cast<uint64_t>(len) + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (padded > size - body) return false;
    std::string_view text(data + body, static_cast<size_t>(len));
    // A second header of a kind: libarchive and GNU tar differ on which
    // one counts.
    if (type == 'L') {
      if (ext->has_longname) return false;
      ext->has_longname = true;
      ext->longname = text.substr(0, text.find('\0'));
    } else if (type == 'K') {
      if (ext->has_longlink) return false;
      ext->has_longlink = true;
      ext->longlink = text.substr(0, text.find('\0'));
    } else if (type == 'x') {
      if (ext->has_pax || !ParsePax(text, &ext->pax)) return false;
      ext->has_pax = true;
    }
    // 'g': libarchive 3.6.2 reads global records and applies none.
    *pos = body + padded;
  }
}

// Sets mem->path as libarchive reads it: a POSIX prefix joined with '/', a
// GNU header's name field alone; then a GNU long name, a non-empty pax path,
// and, as tar_headers.h has it, a pax path over a long name. Returns false to
// decline the shard.
bool ResolvePath(const char* h, bool gnu, const Extensions& ext, ScannedMember* mem) {
  const Pax& pax = ext.pax;
  std::string_view name = Field(h, kName, 100);
  std::string_view prefix = gnu ? std::string_view() : Field(h, kPrefix, 155);
  if (ext.has_longname && pax.path) {
    mem->path = *pax.path;
  } else if (pax.path && !pax.path->empty()) {
    mem->path = *pax.path;
  } else if (ext.has_longname) {
    mem->path = ext.longname;
  } else if (!prefix.empty()) {
    mem->path.reserve(prefix.size() + 1 + name.size());
    mem->path = prefix;
    if (prefix.back() != '/') mem->path += '/';
    mem->path += name;
  } else {
    mem->path = name;
  }
  if (mem->path.empty()) return false;
  // libarchive makes a regular member whose name ends in '/' a directory;
  // with a long name and a pax path its name is whichever it applied last.
  return !(mem->kind == MemberKind::kFile &&
           (mem->path.back() == '/' || (ext.has_longname && ext.longname.ends_with('/')) ||
            (pax.path && pax.path->ends_with('/'))));
}

// Sets mem->link_target: the linkname field, then a GNU long link name, a
// non-empty pax linkpath, and a pax linkpath over a long link name. On a
// member that is not a link libarchive would make either a hard link: false,
// declining the shard.
bool ResolveLinkTarget(const char* h, const Extensions& ext, ScannedMember* mem) {
  const Pax& pax = ext.pax;
  const bool is_link = mem->kind == MemberKind::kHardlink || mem->kind == MemberKind::kSymlink;
  if (!is_link) return !(ext.has_longlink || (pax.linkpath && !pax.linkpath->empty()));
  std::string_view field = Field(h, kLinkname, 100);
  if (field.empty()) return false;  // libarchive may then see no link at all.
  if (ext.has_longlink && pax.linkpath) {
    mem->link_target = *pax.linkpath;
  } else if (pax.linkpath && !pax.linkpath->empty()) {
    mem->link_target = *pax.linkpath;
  } else if (ext.has_longlink) {
    mem->link_target = ext.longlink;
  } else {
    mem->link_target = field;
  }
  return true;
}

// The kind of a member of typeflag `type`; false (decline) for every type
// the walker does not read.
bool KindOf(char type, MemberKind* kind) {
  switch (type) {
    case '0':
    case '\0':
      *kind = MemberKind::kFile;
      return true;
    case '1':
      *kind = MemberKind::kHardlink;
      return true;
    case '2':
      *kind = MemberKind::kSymlink;
      return true;
    case '5':
      *kind = MemberKind::kDir;
      return true;
    default:
      return false;  // Sparse, devices, fifos, contiguous, vendor types.
  }
}

// Reads the member's own header `h` (after extensions `ext`) into *mem:
// kind, path, link target, mode, owner and mtime; *header_size is its size
// field. Returns false to decline the shard.
bool ReadHeader(const char* h, const Extensions& ext, ScannedMember* mem, int64_t* header_size) {
  const Pax& pax = ext.pax;
  // GNU ("ustar  \0") or POSIX ("ustar"), as libarchive tells them apart;
  // old v7 headers decline.
  const bool gnu = std::memcmp(h + kMagic, "ustar  \0", 8) == 0;
  if (!gnu && std::memcmp(h + kMagic, "ustar", 5) != 0) return false;
  if (!KindOf(h[kType], &mem->kind)) return false;
  // An old GNU sparse map or real size: a sparse member.
  if (gnu && (h[kGnuSparse] != 0 || h[kGnuRealSize] != 0)) return false;
  int64_t mode = 0, uid = 0, gid = 0, mtime = 0;
  if (!Octal(h, kMode, 8, &mode) || !Octal(h, kUid, 8, &uid) || !Octal(h, kGid, 8, &gid) ||
      !Octal(h, kSize, 12, header_size) || !Octal(h, kMtime, 12, &mtime)) {
    return false;
  }
  if (!ResolvePath(h, gnu, ext, mem) || !ResolveLinkTarget(h, ext, mem)) return false;

  mem->mode = static_cast<uint32_t>(mode) & 07777;
  mem->uid = pax.uid ? Decimal(*pax.uid) : uid;
  mem->gid = pax.gid ? Decimal(*pax.gid) : gid;
  if (mem->uid < 0 || mem->gid < 0) return false;
  // Saturated as the libarchive path saturates: 12 octal digits of
  // seconds overflow 64-bit nanoseconds.
  constexpr int64_t kMaxSec = INT64_MAX / 1000000000 - 1;
  mem->mtime_ns = std::min(mtime, kMaxSec) * 1000000000;
  return !pax.mtime || ParsePaxTimeNs(*pax.mtime, &mem->mtime_ns);
}

// Places the data of *mem, whose header ends at `data_start`: its size (the
// header's `header_size` or the pax size), data offset and hash; sets *next
// to the block after its padding. Returns false to decline the shard.
bool PlaceData(const char* data, size_t size, uint64_t data_start, int64_t header_size,
               const Pax& pax, const ScanOptions& options, ScannedMember* mem, uint64_t* next) {
  // Only regular members carry data here; libarchive ignores the size of
  // the others (and of hard links in some formats only): those decline.
  int64_t member_size = header_size;
  if (pax.size) {
    member_size = Decimal(*pax.size);
    if (member_size < 0 || member_size == INT64_MAX) return false;
  }
  if (mem->kind != MemberKind::kFile && (header_size != 0 || pax.size)) return false;
  *next = data_start;
  if (mem->kind != MemberKind::kFile) return true;
  mem->size = static_cast<uint64_t>(member_size);
  if (mem->size > 0) {
    // libarchive consumes the padding too: it must be there.
    const uint64_t padded = (mem->size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (mem->size > size - data_start || padded > size - data_start) return false;
    mem->data_offset = data_start;
    *next = data_start + padded;
  }
  mem->has_checksum = options.checksum;
  if (options.checksum) mem->xxh3 = XXH3_64bits(data + data_start, mem->size);
  return true;
}

// Walks the shard, handing each member to sink(ScannedMember&&), which
// returns false to stop. Returns false if the shard is declined.
template <typename Sink>
bool Walk(const char* data, size_t size, const ScanOptions& options, Sink&& sink) {
  // libarchive's open reads a first block, which must be an end mark or a
  // header whose numeric fields pass its bid.
  if (size < kTarBlock) return false;
  if (!IsZeroBlock(data) && !FirstHeaderBids(data)) return false;
  for (uint64_t pos = 0;;) {
    if (pos == size) return true;  // The end without end-of-archive blocks.
    if (size - pos < kTarBlock) return false;
    // One zero block ends the archive for libarchive; what follows is not read.
    Block first = Classify(data + pos);
    if (first == Block::kZero) return true;

    ScannedMember mem;
    mem.header_offset = pos;
    Extensions ext;
    const char* h = nullptr;
    if (!ReadExtensions(data, size, first, &pos, &ext, &h)) return false;
    int64_t header_size = 0;
    if (!ReadHeader(h, ext, &mem, &header_size)) return false;
    uint64_t next = 0;
    if (!PlaceData(data, size, pos + kTarBlock, header_size, ext.pax, options, &mem, &next)) {
      return false;
    }
    if (!sink(std::move(mem))) return true;
    pos = next;
  }
}

}  // namespace

bool WalkTar(const char* data, size_t size, const ScanOptions& options,
             std::vector<ScannedMember>* members) {
  members->clear();
  return Walk(data, size, options, [&](ScannedMember&& m) {
    members->push_back(std::move(m));
    return true;
  });
}

bool WalkTar(const char* data, size_t size, const ScanOptions& options,
             const std::function<Status(ScannedMember&&)>& on_member, Status* status,
             bool report_before_deciding) {
  // Deciding reads every header but keeps no member (a million of them held
  // at once cost more in fresh memory than the walk itself) and hashes
  // nothing.
  ScanOptions check = options;
  check.checksum = false;
  auto decide = [&] { return Walk(data, size, check, [](ScannedMember&&) { return true; }); };
  if (!report_before_deciding && !decide()) return false;
  *status = Status::Ok();
  const bool taken = Walk(data, size, options, [&](ScannedMember&& m) {
    *status = on_member(std::move(m));
    return status->ok();
  });
  if (!taken) return false;
  // A member the caller refused stopped the walk before the end; the shard
  // may still be one for libarchive, which would report its own members.
  if (report_before_deciding && !status->ok() && !decide()) return false;
  return true;
}

}  // namespace shardfs::archive
