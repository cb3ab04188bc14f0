#include "src/archive/index_bundle.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "base/progress.h"
#include "index/index_reader.h"
#include "src/archive/tar_writer.h"

namespace shardfs::archive {

namespace {

using ArchivePtr = std::unique_ptr<struct archive, decltype(&archive_read_free)>;

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

const char* TypeName(mode_t type) {
  switch (type) {
    case AE_IFDIR:
      return "a directory";
    case AE_IFLNK:
      return "a symbolic link";
    case AE_IFCHR:
    case AE_IFBLK:
      return "a device";
    case AE_IFIFO:
      return "a FIFO";
    case AE_IFSOCK:
      return "a socket";
    default:
      return "not a regular file";
  }
}

Status BadBundle(std::string_view shown, std::string_view why) {
  return Status::InvalidArgument(fmt::format("index bundle {}: {}", shown, why));
}

Status TooBig(std::string_view shown, const BundleLimits& limits) {
  return Status::IoError(
      fmt::format("index bundle {}: more than the {} ({} bytes) an index may have unpacked; "
                  "--max-index-size SIZE (-o max_index_size for a mount) raises the limit",
                  shown, HumanBytes(static_cast<double>(limits.max_bytes)), limits.max_bytes));
}

// InvalidArgument naming `shown` and `path` unless member `e` (`path` as
// written, `name` its PlainName, `plain` PlainName's *ok) is a plain regular
// file; sets *skip for the directory "." itself, which is passed over.
Status CheckMemberKind(std::string_view shown, struct archive_entry* e, const std::string& path,
                       std::string_view name, bool plain, bool* skip) {
  *skip = false;
  const mode_t type = archive_entry_filetype(e);
  if (name.empty() && plain) {
    if (type == AE_IFDIR) {
      *skip = true;  // "./": the index directory itself.
      return Status::Ok();
    }
    return BadBundle(shown, fmt::format("member '{}': an empty name", path));
  }
  if (type == AE_IFDIR) {
    return BadBundle(
        shown, fmt::format("member '{}': a directory; only regular files are accepted", path));
  }
  if (!plain) {
    return BadBundle(
        shown,
        fmt::format(
            "member '{}': not a plain file name (a bundle holds the index directory's files only: "
            "no '/', no '..')",
            path));
  }
  if (archive_entry_hardlink(e) != nullptr) {
    return BadBundle(
        shown, fmt::format("member '{}': a hard link; only regular files are accepted", path));
  }
  if (type != AE_IFREG) {
    return BadBundle(shown, fmt::format("member '{}': {}; only regular files are accepted", path,
                                        TypeName(type)));
  }
  if (archive_entry_sparse_count(e) > 0) {
    return BadBundle(
        shown, fmt::format("member '{}': a sparse file; only plain files are accepted", path));
  }
  return Status::Ok();
}

// Copies the current member's data from `a` into a new file `name` under
// `dir_fd` (O_EXCL, 0600) and fsyncs it, adding its bytes to *total; IoError
// past limits.max_bytes, Corruption if the archive is damaged.
Status CopyMember(struct archive* a, int dir_fd, std::string_view shown, const std::string& path,
                  const std::string& name, const BundleLimits& limits, uint64_t* total,
                  std::vector<char>* buf) {
  UniqueFd out(
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) {
    return Status::FromErrno(errno, fmt::format("index bundle {}: member '{}'", shown, path));
  }
  for (;;) {
    la_ssize_t n = archive_read_data(a, buf->data(), buf->size());
    if (n == 0) break;
    if (n < 0) {
      return Status::Corruption(
          fmt::format("index bundle {}: member '{}': {}", shown, path, archive_error_string(a)));
    }
    if (static_cast<uint64_t>(n) > limits.max_bytes - *total) return TooBig(shown, limits);
    *total += static_cast<uint64_t>(n);
    if (!WriteFully(out.get(), buf->data(), static_cast<size_t>(n))) {
      return Status::FromErrno(errno, fmt::format("index bundle {}: writing '{}'", shown, name));
    }
  }
  if (::fsync(out.get()) != 0) {
    return Status::FromErrno(errno, fmt::format("index bundle {}: fsync '{}'", shown, name));
  }
  return Status::Ok();
}

}  // namespace

Status UnpackIndexBundle(int tar_fd, int dir_fd, const std::string& shown,
                         const BundleLimits& limits) {
  ArchivePtr a(archive_read_new(), &archive_read_free);
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  // gzip and zstd only: the libraries RocksDB links already.
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  if (archive_read_open_fd(a.get(), tar_fd, 1 << 20) != ARCHIVE_OK) {
    return BadBundle(shown, fmt::format("not a tar ({})", archive_error_string(a.get())));
  }
  std::set<std::string, std::less<>> seen;
  uint64_t total = 0;
  uint64_t members = 0;
  std::vector<char> buf(1 << 20);
  for (;;) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const char* why = archive_error_string(a.get());
      if (members == 0) {
        return BadBundle(shown, fmt::format("not a tar ({})", why ? why : "unreadable"));
      }
      return Status::Corruption(fmt::format("index bundle {}: after member {}: {}", shown, members,
                                            why ? why : "unreadable"));
    }
    const char* raw = archive_entry_pathname(e);
    const std::string path = raw ? raw : "";
    bool plain = true;
    const std::string_view name = PlainName(path, &plain);
    bool skip = false;
    SHARDFS_RETURN_IF_ERROR(CheckMemberKind(shown, e, path, name, plain, &skip));
    if (skip) continue;
    if (!seen.emplace(name).second) {
      return BadBundle(shown, fmt::format("member '{}': the name '{}' appears twice", path, name));
    }
    if (++members > limits.max_members) {
      return Status::IoError(
          fmt::format("index bundle {}: more than {} members", shown, limits.max_members));
    }
    const int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
    if (size > 0 && static_cast<uint64_t>(size) > limits.max_bytes - total) {
      return TooBig(shown, limits);
    }
    SHARDFS_RETURN_IF_ERROR(
        CopyMember(a.get(), dir_fd, shown, path, std::string(name), limits, &total, &buf));
  }
  if (members == 0) return BadBundle(shown, "no files in it");
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

Status WriteIndexBundle(const std::string& index, const std::string& out) {
  if (!index::IsShardfsIndex(index)) {
    return Status::InvalidArgument(fmt::format("index bundle: {} is not a shardfs index", index));
  }
  UniqueFd dir(::open(index.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno(errno, fmt::format("index {}", index));
  std::vector<std::string> names;
  {
    int listing = ::dup(dir.get());
    DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
    if (d == nullptr) {
      if (listing >= 0) ::close(listing);
      return Status::FromErrno(errno, fmt::format("index {}", index));
    }
    while (struct dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  UniqueFd fd(::open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno(errno, fmt::format("index bundle {}", out));
  Status s = [&]() -> Status {
    TarWriter w(fd.get(), out);
    std::vector<char> buf(1 << 20);
    for (const std::string& name : names) {
      UniqueFd in(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      struct stat st;
      if (!in.valid() || ::fstat(in.get(), &st) != 0) {
        return Status::FromErrno(errno, fmt::format("index {}: {}", index, name));
      }
      if (!S_ISREG(st.st_mode)) {
        return Status::InvalidArgument(
            fmt::format("index {}: {} is not a regular file; an index directory holds only files",
                        index, name));
      }
      TarMember m;
      m.path = name;
      m.mode = 0644;
      m.size = static_cast<uint64_t>(st.st_size);
      uint64_t data_offset = 0;
      SHARDFS_RETURN_IF_ERROR(w.BeginMember(m, &data_offset));
      for (uint64_t left = m.size; left > 0;) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        ssize_t n = ::read(in.get(), buf.data(), want);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          return n == 0
                     ? Status::IoError(fmt::format("index {}: {} shrank while read", index, name))
                     : Status::FromErrno(errno, fmt::format("index {}: {}", index, name));
        }
        SHARDFS_RETURN_IF_ERROR(w.Append(buf.data(), static_cast<size_t>(n)));
        left -= static_cast<uint64_t>(n);
      }
      SHARDFS_RETURN_IF_ERROR(w.EndMember());
    }
    SHARDFS_RETURN_IF_ERROR(w.Finish());
    if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, fmt::format("fsync {}", out));
    return Status::Ok();
  }();
  if (!s.ok()) ::unlink(out.c_str());
  return s;
}

}  // namespace shardfs::archive
