#include "src/indexref/bundle_unpack.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "base/progress.h"

namespace shardfs::indexref {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kChunk = size_t{1} << 20;
// An extension header's data (a pax record set, a GNU long name) is read
// whole: an index's names are short, so anything larger is not a bundle.
constexpr uint64_t kMaxExtension = uint64_t{1} << 20;

Status BadBundle(std::string_view shown, std::string_view why) {
  return Status::InvalidArgument(fmt::format("index bundle {}: {}", shown, why));
}

Status Damaged(std::string_view shown, std::string_view why) {
  return Status::Corruption(fmt::format("index bundle {}: {}", shown, why));
}

Status TooBig(std::string_view shown, const BundleLimits& limits) {
  return Status::IoError(
      fmt::format("index bundle {}: more than the {} ({} bytes) an index may have unpacked; "
                  "--max-index-size SIZE (-o max_index_size for a mount) raises the limit",
                  shown, HumanBytes(static_cast<double>(limits.max_bytes)), limits.max_bytes));
}

// The bundle's bytes as a tar: read from the descriptor as they are, or
// through gzip (members one after another) or zstd (frames one after
// another), as the first bytes say.
class BundleStream {
 public:
  BundleStream(int fd, std::string_view shown) : fd_(fd), shown_(shown), raw_(kChunk) {}
  ~BundleStream() {
    if (kind_ == Kind::kGzip) ::inflateEnd(&z_);
    if (zstd_ != nullptr) ZSTD_freeDStream(zstd_);
  }
  BundleStream(const BundleStream&) = delete;
  BundleStream& operator=(const BundleStream&) = delete;

  // Reads `n` bytes into `buf`, fewer only where the stream ends (*got).
  Status Read(char* buf, size_t n, size_t* got) {
    *got = 0;
    while (*got < n) {
      if (out_pos_ == out_.size()) {
        SHARDFS_RETURN_IF_ERROR(Decode());
        if (out_.empty()) return Status::Ok();  // The end.
      }
      const size_t take = std::min(n - *got, out_.size() - out_pos_);
      std::memcpy(buf + *got, out_.data() + out_pos_, take);
      out_pos_ += take;
      *got += take;
    }
    return Status::Ok();
  }

 private:
  enum class Kind { kUnknown, kPlain, kGzip, kZstd };

  // More raw bytes after those not consumed yet; *eof when there are none.
  Status Refill(bool* eof) {
    if (raw_pos_ > 0) {
      raw_len_ -= raw_pos_;
      std::memmove(raw_.data(), raw_.data() + raw_pos_, raw_len_);
      raw_pos_ = 0;
    }
    ssize_t n;
    do {
      n = ::read(fd_, raw_.data() + raw_len_, raw_.size() - raw_len_);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return Status::FromErrno(errno, fmt::format("index bundle {}", shown_));
    raw_len_ += static_cast<size_t>(n);
    *eof = n == 0;
    return Status::Ok();
  }

  Status Start() {
    bool eof = false;
    while (raw_len_ < 4 && !eof) SHARDFS_RETURN_IF_ERROR(Refill(&eof));
    const auto* b = reinterpret_cast<const unsigned char*>(raw_.data());
    if (raw_len_ >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
      std::memset(&z_, 0, sizeof(z_));
      if (::inflateInit2(&z_, 15 + 16) != Z_OK) return Damaged(shown_, "gzip: out of memory");
      kind_ = Kind::kGzip;
    } else if (raw_len_ >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
      zstd_ = ZSTD_createDStream();
      if (zstd_ == nullptr) return Damaged(shown_, "zstd: out of memory");
      kind_ = Kind::kZstd;
    } else {
      kind_ = Kind::kPlain;
    }
    return Status::Ok();
  }

  // Replaces out_ with the next decoded bytes; empty at the end.
  Status Decode() {
    if (kind_ == Kind::kUnknown) SHARDFS_RETURN_IF_ERROR(Start());
    out_.clear();
    out_pos_ = 0;
    bool eof = false;
    if (raw_pos_ == raw_len_) SHARDFS_RETURN_IF_ERROR(Refill(&eof));
    if (kind_ == Kind::kPlain) {
      out_.assign(raw_.data() + raw_pos_, raw_.data() + raw_len_);
      raw_pos_ = raw_len_;
      return Status::Ok();
    }
    if (done_) return Status::Ok();
    out_.resize(kChunk);
    size_t made = 0;
    while (made == 0) {
      if (raw_pos_ == raw_len_ && !eof) SHARDFS_RETURN_IF_ERROR(Refill(&eof));
      if (raw_pos_ == raw_len_ && eof) {
        if (!frame_open_) break;  // The end, after a whole member or frame.
        return Damaged(shown_,
                       kind_ == Kind::kGzip ? "gzip data cut short" : "zstd data cut short");
      }
      SHARDFS_RETURN_IF_ERROR(kind_ == Kind::kGzip ? Inflate(&made) : Unzstd(&made));
      if (done_) break;
    }
    out_.resize(made);
    return Status::Ok();
  }

  Status Inflate(size_t* made) {
    z_.next_in = reinterpret_cast<Bytef*>(raw_.data() + raw_pos_);
    z_.avail_in = static_cast<uInt>(raw_len_ - raw_pos_);
    z_.next_out = reinterpret_cast<Bytef*>(out_.data());
    z_.avail_out = static_cast<uInt>(out_.size());
    frame_open_ = true;
    const int r = ::inflate(&z_, Z_NO_FLUSH);
    raw_pos_ = raw_len_ - z_.avail_in;
    *made = out_.size() - z_.avail_out;
    if (r == Z_STREAM_END) {
      frame_open_ = false;
      // Another gzip member may follow (pigz, cat of .gz files); anything
      // else after a member ends the data, as gzip -d ignores it.
      bool eof = false;
      while (raw_len_ - raw_pos_ < 2 && !eof) SHARDFS_RETURN_IF_ERROR(Refill(&eof));
      const auto* b = reinterpret_cast<const unsigned char*>(raw_.data() + raw_pos_);
      if (raw_len_ - raw_pos_ >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
        ::inflateReset(&z_);
      } else {
        done_ = true;
      }
      return Status::Ok();
    }
    if (r != Z_OK && r != Z_BUF_ERROR) {
      return Damaged(shown_, fmt::format("damaged gzip data ({})", z_.msg ? z_.msg : "inflate"));
    }
    return Status::Ok();
  }

  Status Unzstd(size_t* made) {
    ZSTD_inBuffer in{raw_.data() + raw_pos_, raw_len_ - raw_pos_, 0};
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t r = ZSTD_decompressStream(zstd_, &out, &in);
    if (ZSTD_isError(r)) {
      return Damaged(shown_, fmt::format("damaged zstd data ({})", ZSTD_getErrorName(r)));
    }
    raw_pos_ += in.pos;
    *made = out.pos;
    frame_open_ = r != 0;  // 0: a frame ended with nothing of it held back.
    return Status::Ok();
  }

  const int fd_;
  const std::string_view shown_;
  Kind kind_ = Kind::kUnknown;
  std::vector<char> raw_;
  size_t raw_len_ = 0, raw_pos_ = 0;
  std::vector<char> out_;
  size_t out_pos_ = 0;
  z_stream z_;
  ZSTD_DStream* zstd_ = nullptr;
  bool frame_open_ = false;  // Inside a gzip member or zstd frame.
  bool done_ = false;        // gzip: past the last member.
};

// One member as its headers (and the extension headers before them) say.
struct Member {
  std::string path;
  char type = '0';
  uint64_t size = 0;
  bool sparse = false;
};

// A tar number field: octal digits (spaces and NULs around them), or GNU's
// base-256 when the first byte's high bit is set. False if it is neither.
bool ParseNumber(const char* f, size_t len, uint64_t* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(f);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return false;  // Negative or too large.
    uint64_t v = 0;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | u[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < len && f[i] == ' ') ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
    any = true;
  }
  for (; i < len; ++i) {
    if (f[i] != ' ' && f[i] != '\0') return false;
  }
  *out = v;
  return any;
}

// Whether a header's checksum holds (unsigned sums, or signed as old tars wrote).
bool ChecksumOk(const char* h) {
  uint64_t stored = 0;
  if (!ParseNumber(h + 148, 8, &stored)) return false;
  uint64_t sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool field = i >= 148 && i < 156;
    sum += field ? ' ' : static_cast<unsigned char>(h[i]);
    signed_sum += field ? ' ' : static_cast<signed char>(h[i]);
  }
  return stored == sum || static_cast<int64_t>(stored) == signed_sum;
}

std::string Field(const char* f, size_t len) { return std::string(f, ::strnlen(f, len)); }

// Applies the records of a pax extended header to `m`: path, size, and any
// GNU.sparse key (a sparse member). False if a record is malformed.
bool ApplyPax(std::string_view data, Member* m, bool* has_path, bool* has_size) {
  while (!data.empty()) {
    size_t space = data.find(' ');
    uint64_t len = 0;
    for (size_t i = 0; i < space && space != std::string_view::npos; ++i) {
      if (data[i] < '0' || data[i] > '9' || len > (uint64_t{1} << 32)) return false;
      len = len * 10 + static_cast<uint64_t>(data[i] - '0');
    }
    if (space == std::string_view::npos || len <= space + 1 || len > data.size() ||
        data[len - 1] != '\n') {
      return false;
    }
    std::string_view record = data.substr(space + 1, len - space - 2);
    data.remove_prefix(len);
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      m->path = std::string(value);
      *has_path = true;
    } else if (key == "size") {
      uint64_t v = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || v > (uint64_t{1} << 60)) return false;
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      m->size = v;
      *has_size = true;
    } else if (key.starts_with("GNU.sparse.")) {
      m->sparse = true;
    }
  }
  return true;
}

// Skips the padding after `size` bytes of data; Corruption if cut short.
Status SkipPadding(BundleStream& in, uint64_t size, std::string_view shown) {
  const size_t pad = static_cast<size_t>((kBlock - size % kBlock) % kBlock);
  std::array<char, kBlock> skip;
  size_t got = 0;
  SHARDFS_RETURN_IF_ERROR(in.Read(skip.data(), pad, &got));
  return got == pad ? Status::Ok() : Damaged(shown, "the archive ends inside a member");
}

// Skips a member's `size` bytes of data and their padding.
Status SkipData(BundleStream& in, uint64_t size, std::string_view shown) {
  std::array<char, kBlock> skip;
  for (uint64_t left = size; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, kBlock));
    size_t got = 0;
    SHARDFS_RETURN_IF_ERROR(in.Read(skip.data(), want, &got));
    if (got < want) return Damaged(shown, "the archive ends inside a member");
    left -= got;
  }
  return SkipPadding(in, size, shown);
}

// Reads the next member's headers into *m; *end at the end of the archive
// (a zero block, or the data's end between members). `members`: how many
// were read before, for messages; `first`: whether no header was read yet.
Status NextMember(BundleStream& in, std::string_view shown, uint64_t members, bool first, Member* m,
                  bool* end) {
  *m = Member{};
  *end = false;
  bool has_path = false, has_size = false, pending = false;
  std::array<char, kBlock> h;
  for (;; first = false) {
    size_t got = 0;
    SHARDFS_RETURN_IF_ERROR(in.Read(h.data(), kBlock, &got));
    if (got == 0 && !pending) {
      *end = true;
      return Status::Ok();
    }
    if (got < kBlock) return Damaged(shown, "the archive ends inside a header");
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == 0; }) && !pending) {
      *end = true;
      return Status::Ok();
    }
    if (!ChecksumOk(h.data())) {
      if (first) return BadBundle(shown, "not a tar (no valid tar header at its start)");
      return Damaged(shown, fmt::format("after member {}: a damaged tar header", members));
    }
    uint64_t size = 0;
    if (!ParseNumber(h.data() + 124, 12, &size)) {
      return Damaged(shown, fmt::format("after member {}: a bad size field", members));
    }
    const char type = h[156];
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      if (size > kMaxExtension) {
        return BadBundle(shown, fmt::format("an extension header of {} bytes", size));
      }
      std::string data(static_cast<size_t>(size), '\0');
      SHARDFS_RETURN_IF_ERROR(in.Read(data.data(), data.size(), &got));
      if (got != data.size()) return Damaged(shown, "the archive ends inside a header");
      SHARDFS_RETURN_IF_ERROR(SkipPadding(in, size, shown));
      if (type == 'x' && !ApplyPax(data, m, &has_path, &has_size)) {
        return Damaged(shown, fmt::format("after member {}: a malformed pax header", members));
      }
      if (type == 'L' && !has_path) m->path = Field(data.data(), data.size());
      has_path |= type == 'L';
      pending = true;
      continue;
    }
    if (!has_path) {
      std::string name = Field(h.data(), 100);
      // POSIX ustar ("ustar\0") has a name prefix; GNU's "ustar  " does not.
      if (std::memcmp(h.data() + 257, "ustar\0", 6) == 0) {
        std::string prefix = Field(h.data() + 345, 155);
        if (!prefix.empty()) name = prefix + "/" + name;
      }
      m->path = std::move(name);
    }
    if (!has_size) m->size = size;
    m->type = type;
    m->sparse |= type == 'S';
    return Status::Ok();
  }
}

// The plain file name a member stands for: "NAME" or "./NAME". "" for the
// directory "." itself ("./", ".", "" as written by `tar -C DIR -cf X .`).
// Sets *ok = false for anything else.
std::string_view PlainName(std::string_view path, bool* ok) {
  *ok = true;
  if (path.starts_with("./")) path.remove_prefix(2);
  if (path.empty() || path == ".") return {};
  if (path.find('/') != std::string_view::npos || path == ".." ||
      path.find('\0') != std::string_view::npos) {
    *ok = false;
  }
  return path;
}

std::string TypeName(char type) {
  switch (type) {
    case '2':
      return "a symbolic link";
    case '3':
    case '4':
      return "a device";
    case '6':
      return "a FIFO";
    default:
      return fmt::format("a member of tar type '{}'", type);
  }
}

// InvalidArgument naming `shown` unless member `m` (`name` its PlainName,
// `plain` PlainName's *ok) is a plain regular file; sets *skip for the
// directory "." itself, which is passed over.
Status CheckMemberKind(std::string_view shown, const Member& m, std::string_view name, bool plain,
                       bool* skip) {
  *skip = false;
  const bool dir = m.type == '5';
  const std::string& path = m.path;
  if (name.empty() && plain) {
    if (dir) {
      *skip = true;  // "./": the index directory itself.
      return Status::Ok();
    }
    return BadBundle(shown, fmt::format("member '{}': an empty name", path));
  }
  if (dir) {
    return BadBundle(
        shown, fmt::format("member '{}': a directory; only regular files are accepted", path));
  }
  if (m.sparse) {  // Before the name: a pax sparse member's own header names a folder.
    return BadBundle(
        shown, fmt::format("member '{}': a sparse file; only plain files are accepted", path));
  }
  if (!plain) {
    return BadBundle(
        shown,
        fmt::format(
            "member '{}': not a plain file name (a bundle holds the index directory's files only: "
            "no '/', no '..')",
            path));
  }
  if (m.type == '1') {
    return BadBundle(
        shown, fmt::format("member '{}': a hard link; only regular files are accepted", path));
  }
  if (m.type != '0' && m.type != '\0' && m.type != '7') {
    return BadBundle(shown, fmt::format("member '{}': {}; only regular files are accepted", path,
                                        TypeName(m.type)));
  }
  return Status::Ok();
}

// Copies member `m`'s data from `in` into a new file `name` under `dir_fd`
// (O_EXCL, 0600) and fsyncs it; Corruption if the archive ends inside it.
Status CopyMember(BundleStream& in, int dir_fd, std::string_view shown, const Member& m,
                  const std::string& name, std::vector<char>* buf) {
  UniqueFd out(
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) {
    return Status::FromErrno(errno, fmt::format("index bundle {}: member '{}'", shown, m.path));
  }
  for (uint64_t left = m.size; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf->size()));
    size_t got = 0;
    SHARDFS_RETURN_IF_ERROR(in.Read(buf->data(), want, &got));
    if (got < want) {
      return Damaged(shown, fmt::format("member '{}': the archive ends inside it", m.path));
    }
    if (!WriteFully(out.get(), buf->data(), got)) {
      return Status::FromErrno(errno, fmt::format("index bundle {}: writing '{}'", shown, name));
    }
    left -= got;
  }
  SHARDFS_RETURN_IF_ERROR(SkipPadding(in, m.size, shown));
  if (::fsync(out.get()) != 0) {
    return Status::FromErrno(errno, fmt::format("index bundle {}: fsync '{}'", shown, name));
  }
  return Status::Ok();
}

// Reads on past the end of the archive, up to kMaxTail bytes: a gzip or
// zstd stream cut short or damaged there fails, though the tar ended
// before (its end-of-archive blocks are decoded before the stream's end).
Status CheckTail(BundleStream& in) {
  constexpr size_t kMaxTail = size_t{1} << 20;
  std::vector<char> tail(kBlock * 16);
  for (size_t read = 0; read < kMaxTail;) {
    size_t got = 0;
    SHARDFS_RETURN_IF_ERROR(in.Read(tail.data(), tail.size(), &got));
    if (got == 0) break;
    read += got;
  }
  return Status::Ok();
}

}  // namespace

Status UnpackIndexBundle(int tar_fd, int dir_fd, const std::string& shown,
                         const BundleLimits& limits) {
  BundleStream in(tar_fd, shown);
  std::set<std::string, std::less<>> seen;
  uint64_t total = 0;
  uint64_t members = 0;
  std::vector<char> buf(kChunk);
  for (bool first = true;; first = false) {
    Member m;
    bool end = false;
    SHARDFS_RETURN_IF_ERROR(NextMember(in, shown, members, first, &m, &end));
    if (end) break;
    bool plain = true;
    const std::string_view name = PlainName(m.path, &plain);
    bool skip = false;
    SHARDFS_RETURN_IF_ERROR(CheckMemberKind(shown, m, name, plain, &skip));
    if (skip) {
      SHARDFS_RETURN_IF_ERROR(SkipData(in, m.size, shown));
      continue;
    }
    if (!seen.emplace(name).second) {
      return BadBundle(shown,
                       fmt::format("member '{}': the name '{}' appears twice", m.path, name));
    }
    if (++members > limits.max_members) {
      return Status::IoError(
          fmt::format("index bundle {}: more than {} members", shown, limits.max_members));
    }
    if (m.size > limits.max_bytes - total) return TooBig(shown, limits);
    total += m.size;
    SHARDFS_RETURN_IF_ERROR(CopyMember(in, dir_fd, shown, m, std::string(name), &buf));
  }
  if (members == 0) return BadBundle(shown, "no files in it");
  SHARDFS_RETURN_IF_ERROR(CheckTail(in));
  if (::fsync(dir_fd) != 0) {
    return Status::FromErrno(errno, fmt::format("index bundle {}: fsync of the directory", shown));
  }
  return Status::Ok();
}

void RemoveUnpacked(int parent_fd, const std::string& name) {
  UniqueFd dir(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.valid()) {
    int listing = ::dup(dir.get());
    DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
    if (d == nullptr && listing >= 0) ::close(listing);
    std::vector<std::string> names;
    while (d != nullptr) {
      struct dirent* e = ::readdir(d);
      if (e == nullptr) break;
      std::string_view n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
    }
    if (d != nullptr) ::closedir(d);
    for (const std::string& n : names) ::unlinkat(dir.get(), n.c_str(), 0);
  }
  ::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR);
}

}  // namespace shardfs::indexref
