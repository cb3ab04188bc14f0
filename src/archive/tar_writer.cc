#include "src/archive/tar_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/io.h"
#include "base/strings.h"

namespace shardfs::archive {
namespace {

constexpr size_t kNameField = 100;
constexpr size_t kLinkField = 100;
constexpr size_t kPrefixField = 155;
constexpr uint64_t kMaxOctal7 = 07777777;       // uid, gid, mode: 7 digits.
constexpr uint64_t kMaxOctal11 = 077777777777;  // size, mtime: 11 digits.
// A pax header's own ustar name, the same for every member (Python's tarfile
// uses it too), so nothing about the writing process leaks into the shard.
constexpr std::string_view kPaxName = "././@PaxHeader";
// Zero runs at least this long become holes instead of written zeros.
constexpr uint64_t kMinHole = 64 * 1024;

// How a member's fields map onto ustar, and what spills into pax.
struct Layout {
  std::string_view name;    // ustar name field (may be truncated when pax has the path).
  std::string_view prefix;  // ustar prefix field.
  bool pax_path = false;
  bool pax_link = false;
  bool pax_size = false;
  bool pax_uid = false;
  bool pax_gid = false;
  bool pax_mtime = false;
  bool any() const { return pax_path || pax_link || pax_size || pax_uid || pax_gid || pax_mtime; }
};

// The member's path as the archive spells it: "./" for the root, a trailing
// '/' for directories.
std::string ArchivePath(const TarMember& m) {
  if (m.path.empty()) return "./";
  std::string p(m.path);
  if (m.type == TarType::kDir) p.push_back('/');
  return p;
}

Layout Plan(const TarMember& m, std::string_view path) {
  Layout l;
  if (path.size() <= kNameField) {
    l.name = path;
  } else {
    // ustar splits a long path at a '/' into prefix (<= 155) and name (<= 100,
    // not empty). Take the first such '/': the longest name.
    size_t lo = path.size() - kNameField - 1;
    size_t hi = std::min(kPrefixField, path.size() - 2);
    size_t split = std::string_view::npos;
    for (size_t p = std::max<size_t>(lo, 1); p <= hi && p < path.size(); ++p) {
      if (path[p] == '/') {
        split = p;
        break;
      }
    }
    if (split != std::string_view::npos) {
      l.prefix = path.substr(0, split);
      l.name = path.substr(split + 1);
    } else {
      l.pax_path = true;
      l.name = path.substr(0, kNameField);
    }
  }
  l.pax_link = m.link_target.size() > kLinkField;
  l.pax_size = m.type == TarType::kFile && m.size > kMaxOctal11;
  l.pax_uid = m.uid > kMaxOctal7;
  l.pax_gid = m.gid > kMaxOctal7;
  int64_t sec = m.mtime_ns / kNanosPerSecond;
  int64_t nsec = m.mtime_ns % kNanosPerSecond;
  l.pax_mtime = nsec != 0 || m.mtime_ns < 0 || static_cast<uint64_t>(sec) > kMaxOctal11;
  return l;
}

// One pax record: "LEN KEY=VALUE\n", where LEN counts the whole record,
// its own digits included.
void AppendPaxRecord(std::string* out, std::string_view key, std::string_view value) {
  size_t body = 1 + key.size() + 1 + value.size() + 1;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  fmt::format_to(std::back_inserter(*out), "{} {}={}\n", len, key, value);
}

std::string PaxTime(int64_t ns) {
  // Decimal seconds; a negative time is signed as a whole (-1.5 is 1.5 s
  // before the epoch), as GNU tar, libarchive and tarfile read it.
  uint64_t abs = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  uint64_t frac = abs % kNanosPerSecond;
  std::string s = fmt::format("{}{}", ns < 0 ? "-" : "", abs / kNanosPerSecond);
  if (frac) s += fmt::format(".{:09}", frac);
  return s;
}

std::string PaxRecords(const TarMember& m, std::string_view path, const Layout& l) {
  std::string out;
  if ((l.pax_path && !IsUtf8(path)) || (l.pax_link && !IsUtf8(m.link_target))) {
    // pax strings are UTF-8 unless the header says they are raw bytes.
    AppendPaxRecord(&out, "hdrcharset", "BINARY");
  }
  if (l.pax_path) AppendPaxRecord(&out, "path", path);
  if (l.pax_link) AppendPaxRecord(&out, "linkpath", m.link_target);
  if (l.pax_size) AppendPaxRecord(&out, "size", std::to_string(m.size));
  if (l.pax_uid) AppendPaxRecord(&out, "uid", std::to_string(m.uid));
  if (l.pax_gid) AppendPaxRecord(&out, "gid", std::to_string(m.gid));
  if (l.pax_mtime) AppendPaxRecord(&out, "mtime", PaxTime(m.mtime_ns));
  return out;
}

// Writes `v` as width-1 octal digits and a NUL. REQUIRES: it fits.
void Octal(char* field, size_t width, uint64_t v) {
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  field[width - 1] = '\0';
}

void PutString(char* field, size_t width, std::string_view s) {
  if (!s.empty()) std::memcpy(field, s.data(), std::min(width, s.size()));
}

struct UstarFields {
  std::string_view name;
  std::string_view prefix;
  std::string_view link;
  uint32_t mode = 0;
  uint64_t uid = 0;
  uint64_t gid = 0;
  uint64_t size = 0;
  uint64_t mtime = 0;
  char type = '0';
};

void AppendUstar(const UstarFields& f, std::string* out) {
  char h[kTarBlock] = {};
  PutString(h, kNameField, f.name);
  Octal(h + 100, 8, f.mode & 07777);
  Octal(h + 108, 8, f.uid);
  Octal(h + 116, 8, f.gid);
  Octal(h + 124, 12, f.size);
  Octal(h + 136, 12, f.mtime);
  std::memset(h + 148, ' ', 8);
  h[156] = f.type;
  PutString(h + 157, kLinkField, f.link);
  std::memcpy(h + 257, "ustar", 6);  // With its NUL.
  std::memcpy(h + 263, "00", 2);
  // uname and gname stay empty: readers then use the numeric ids.
  Octal(h + 329, 8, 0);  // devmajor
  Octal(h + 337, 8, 0);  // devminor
  PutString(h + 345, kPrefixField, f.prefix);
  uint32_t sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  Octal(h + 148, 7, sum);  // Six digits, NUL, and the space already there.
  out->append(h, sizeof h);
}

}  // namespace

void AppendTarHeader(const TarMember& m, std::string* out) {
  std::string path = ArchivePath(m);
  Layout l = Plan(m, path);
  if (l.any()) {
    std::string records = PaxRecords(m, path, l);
    UstarFields x;
    x.name = kPaxName;
    x.mode = 0644;
    x.size = records.size();
    x.type = 'x';
    AppendUstar(x, out);
    out->append(records);
    out->append(TarPadded(records.size()) - records.size(), '\0');
  }
  UstarFields f;
  f.name = l.name;
  f.prefix = l.prefix;
  f.link = l.pax_link ? m.link_target.substr(0, kLinkField) : m.link_target;
  f.mode = m.mode;
  f.uid = l.pax_uid ? 0 : m.uid;
  f.gid = l.pax_gid ? 0 : m.gid;
  uint64_t size = m.type == TarType::kFile ? m.size : 0;
  f.size = l.pax_size ? 0 : size;
  int64_t sec = m.mtime_ns / kNanosPerSecond - (m.mtime_ns % kNanosPerSecond < 0 ? 1 : 0);
  f.mtime = static_cast<uint64_t>(std::clamp<int64_t>(sec, 0, kMaxOctal11));
  f.type = static_cast<char>(m.type);
  AppendUstar(f, out);
}

uint64_t TarHeaderBytes(const TarMember& m) {
  std::string path = ArchivePath(m);
  Layout l = Plan(m, path);
  if (!l.any()) return kTarBlock;
  return kTarBlock + TarPadded(PaxRecords(m, path, l).size()) + kTarBlock;
}

TarWriter::TarWriter(int fd, std::string name, size_t buffer_bytes)
    : fd_(fd), name_(std::move(name)), buf_(new char[buffer_bytes]), cap_(buffer_bytes) {}

TarWriter::~TarWriter() = default;

Status TarWriter::Flush() {
  size_t done = 0;
  while (done < len_) {
    ssize_t n = ::pwrite(fd_, buf_.get() + done, len_ - done, static_cast<off_t>(flushed_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno,
                               fmt::format("shard {}: write at byte {}", name_, flushed_ + done));
    }
    done += static_cast<size_t>(n);
  }
  flushed_ += len_;
  len_ = 0;
  return Status::Ok();
}

Status TarWriter::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (len_ == cap_) SHARDFS_RETURN_IF_ERROR(Flush());
    size_t k = std::min(n, cap_ - len_);
    std::memcpy(buf_.get() + len_, p, k);
    len_ += k;
    offset_ += k;
    p += k;
    n -= k;
  }
  return Status::Ok();
}

Status TarWriter::BeginMember(const TarMember& m, uint64_t* data_offset) {
  header_.clear();
  AppendTarHeader(m, &header_);
  SHARDFS_RETURN_IF_ERROR(Write(header_.data(), header_.size()));
  in_member_ = true;
  expected_ = m.type == TarType::kFile ? m.size : 0;
  data_start_ = offset_;
  *data_offset = offset_;
  return Status::Ok();
}

Status TarWriter::Append(const void* data, size_t n) { return Write(data, n); }

Status TarWriter::DataSpace(size_t max, char** space, size_t* len) {
  if (len_ == cap_) SHARDFS_RETURN_IF_ERROR(Flush());
  *space = buf_.get() + len_;
  *len = std::min(max, cap_ - len_);
  return Status::Ok();
}

void TarWriter::Commit(size_t n) {
  len_ += n;
  offset_ += n;
}

Status TarWriter::AppendZeros(uint64_t n) {
  if (n < kMinHole) {
    while (n > 0) {
      if (len_ == cap_) SHARDFS_RETURN_IF_ERROR(Flush());
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, cap_ - len_));
      std::memset(buf_.get() + len_, 0, k);
      len_ += k;
      offset_ += k;
      n -= k;
    }
    return Status::Ok();
  }
  // The file is empty past what was written, so skipping leaves zeros; a
  // later write or Finish's trailer sets the file's size past the hole.
  SHARDFS_RETURN_IF_ERROR(Flush());
  flushed_ += n;
  offset_ += n;
  return Status::Ok();
}

Status TarWriter::EndMember() {
  uint64_t got = offset_ - data_start_;
  in_member_ = false;
  if (got != expected_) {
    return Status::Corruption(
        fmt::format("shard {}: member at byte {}: {} bytes of data written, "
                    "header says {}",
                    name_, data_start_, got, expected_));
  }
  return AppendZeros(TarPadded(got) - got);
}

Status TarWriter::Rollback(uint64_t offset) {
  in_member_ = false;
  if (offset >= flushed_) {
    len_ = static_cast<size_t>(offset - flushed_);
    offset_ = offset;
    return Status::Ok();
  }
  len_ = 0;
  if (::ftruncate(fd_, static_cast<off_t>(offset)) != 0) {
    return Status::FromErrno(errno, fmt::format("shard {}: truncate to byte {}", name_, offset));
  }
  flushed_ = offset_ = offset;
  return Status::Ok();
}

Status TarWriter::Finish() {
  if (in_member_) {
    return Status::InvalidArgument(fmt::format("shard {}: finished inside a member", name_));
  }
  static const char kZeros[kTarTrailer] = {};
  SHARDFS_RETURN_IF_ERROR(Write(kZeros, sizeof kZeros));
  return Flush();
}

}  // namespace shardfs::archive
