#include "src/reader/index_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "base/open_file.h"
#include "src/reader/cache_dir.h"

namespace shardfs::reader {

namespace {

constexpr char kRecord[] = ".shardfs-source";

// RocksDB's files a reader needs: not its info logs nor its LOCK.
bool Copied(std::string_view name) { return !name.starts_with("LOG") && name != "LOCK"; }

// The index directory's files, sorted by name.
Result<std::vector<ListedFile>> ListIndex(const std::string& index) {
  DIR* d = ::opendir(index.c_str());
  if (d == nullptr) return Status::FromErrno(errno, fmt::format("index {}", index));
  std::vector<ListedFile> out;
  Status status;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || !Copied(name)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      status = Status::FromErrno(errno, fmt::format("index {}/{}", index, name));
      break;
    }
    if (!S_ISREG(st.st_mode)) {
      status = Status::InvalidArgument(
          fmt::format("index {}: {} is not a regular file; not copied", index, name));
      break;
    }
    out.push_back({std::string(name), FileStamp::Of(st)});
  }
  ::closedir(d);
  if (!status.ok()) return status;
  std::sort(out.begin(), out.end(),
            [](const ListedFile& a, const ListedFile& b) { return a.name < b.name; });
  return out;
}

// One file of a record: "SIZE MTIME INO CTIME NAME"; the name last, so that
// RemoveCopy finds it after the fourth space. (RocksDB replaces CURRENT by a
// rename: a new inode.)
std::string Line(const ListedFile& f) {
  return fmt::format("{} {} {} {} {}\n", f.stamp.size, f.stamp.mtime_ns, f.stamp.ino,
                     f.stamp.ctime_ns, f.name);
}

std::string RecordText(const std::string& real, const std::vector<ListedFile>& files) {
  std::string text = fmt::format("shardfs index copy v1\n{}\n", real);
  for (const ListedFile& f : files) text += Line(f);
  return text;
}

// The record of the copy in `dir`, "" if none can be read.
std::string ReadRecord(const std::string& dir) {
  UniqueFd fd(
      ::open(fmt::format("{}/{}", dir, kRecord).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return {};
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0 || text.size() > (16u << 20)) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

// Removes the copy in `dir`: the files its record names, the record, then
// the directory (which fails, harmlessly, if anything else is in it).
void RemoveCopy(const std::string& dir) {
  std::string record = ReadRecord(dir);
  size_t line_end = record.find('\n');
  line_end = record.find('\n', line_end == std::string::npos ? record.size() : line_end + 1);
  while (line_end != std::string::npos && line_end + 1 < record.size()) {
    size_t next = record.find('\n', line_end + 1);
    std::string_view line(record.data() + line_end + 1,
                          (next == std::string::npos ? record.size() : next) - line_end - 1);
    size_t sp = 0;
    for (int i = 0; i < 4 && sp != std::string_view::npos; ++i) {
      sp = line.find(' ', i == 0 ? 0 : sp + 1);
    }
    if (sp != std::string_view::npos) {
      std::string name(line.substr(sp + 1));
      if (name.find('/') == std::string::npos && name != "." && name != "..") {
        ::unlink(fmt::format("{}/{}", dir, name).c_str());
      }
    }
    line_end = next;
  }
  ::unlink(fmt::format("{}/{}", dir, kRecord).c_str());
  ::rmdir(dir.c_str());
}

// Removes the copies of index `key` in `copies` other than `keep`: those of
// the index as it was before (not temporary ones, which their makers remove).
void RemoveOlderCopies(const std::string& copies, const std::string& key, const std::string& keep) {
  DIR* d = ::opendir(copies.c_str());
  if (d == nullptr) return;
  std::vector<std::string> old;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(key + "-") || name.find(".tmp-") != std::string_view::npos) continue;
    std::string path = fmt::format("{}/{}", copies, name);
    if (path != keep) old.push_back(std::move(path));
  }
  ::closedir(d);
  for (const std::string& path : old) RemoveCopy(path);
}

Result<UniqueFd> LockCopy(const std::string& lock_path) {
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, lock_path);
  const auto deadline = std::chrono::steady_clock::now() + kCopyLockWait;
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, lock_path);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::IoError(fmt::format("{}: another process holds it", lock_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fd;
}

// Ok if open file `fd` (`from`) is the file `listed`, as listed: inode,
// size, mtime and ctime. Else Corruption saying what differs (the index
// changed while it was copied: LocalIndexCopy lists it again).
Status SameAsListed(int fd, const ListedFile& listed, const std::string& from) {
  int64_t ctime_ns = 0;
  Status s = CheckStamp(fd, listed.stamp, &ctime_ns);
  if (s.ok() && ctime_ns == 0) return s;
  const std::string why =
      s.ok() ? fmt::format("changed since it was checked: ctime {} ns, {} when checked", ctime_ns,
                           listed.stamp.ctime_ns)
             : std::string(s.message());
  return Status::Corruption(fmt::format("{}: {}; not copied", from, why));
}

}  // namespace

Status CopyListedFile(const std::string& dir, const ListedFile& file, const std::string& to) {
  const std::string from = fmt::format("{}/{}", dir, file.name);
  struct stat st {};
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd in, OpenRegularFile(file.name, &st, {.beneath = dir}));
  SHARDFS_RETURN_IF_ERROR(SameAsListed(in.get(), file, from));
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out.valid()) return Status::FromErrno(errno, to);
  std::vector<char> buf(1 << 20);
  uint64_t copied = 0;
  for (;;) {
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, from);
    if (n == 0) break;
    if (!WriteFully(out.get(), buf.data(), static_cast<size_t>(n))) {
      return Status::FromErrno(errno, to);
    }
    copied += static_cast<uint64_t>(n);
  }
  SHARDFS_RETURN_IF_ERROR(SameAsListed(in.get(), file, from));  // Written meanwhile?
  if (copied != file.stamp.size) {
    return Status::IoError(
        fmt::format("{}: {} bytes read, {} listed", from, copied, file.stamp.size));
  }
  return Status::Ok();
}

namespace {

constexpr int kCopyTries = 3;

Result<IndexCopy> CopyIndexOnce(const std::string& index, const char* real,
                                const std::string& copies, const std::string& key,
                                uint64_t max_bytes);

}  // namespace

Result<IndexCopy> LocalIndexCopy(const std::string& index, const std::string& cache_root,
                                 uint64_t max_bytes) {
  char real[PATH_MAX];
  if (::realpath(index.c_str(), real) == nullptr) {
    return Status::FromErrno(errno, fmt::format("index {}", index));
  }
  // The root and the copies' directory are held to the rules of a cache_dir
  // (src/reader/cache_dir.h): this user's, not writable by others, no link.
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd root, OpenCacheRoot(cache_root));
  const std::string copies = fmt::format("{}/{}", cache_root, kIndexCopySubdir);
  SHARDFS_RETURN_IF_ERROR(OpenPrivateDir(root.get(), kIndexCopySubdir, copies).status());
  const std::string key = fmt::format("{:016x}", XXH3_64bits(real, std::strlen(real)));
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd lock, LockCopy(fmt::format("{}/{}.lock", copies, key)));
  // A file that changed between the listing and its copy (an index add; on
  // a network filesystem such as sshfs, also a file whose inode number the
  // client gave anew after forgetting it) fails the copy: listed and copied
  // again, at most kCopyTries times.
  Result<IndexCopy> copy = Status::IoError("not copied");
  for (int i = 0; i < kCopyTries; ++i) {
    copy = CopyIndexOnce(index, real, copies, key, max_bytes);
    if (copy.ok() || copy.status().code() != Status::Code::kCorruption) break;
  }
  return copy;
}

namespace {

// One listing of index directory `real` (given as `index`) and, unless a copy
// of exactly those files is in `copies` already, their copy there.
Result<IndexCopy> CopyIndexOnce(const std::string& index, const char* real,
                                const std::string& copies, const std::string& key,
                                uint64_t max_bytes) {
  SHARDFS_ASSIGN_OR_RETURN(std::vector<ListedFile> files, ListIndex(real));
  IndexCopy out;
  for (const ListedFile& f : files) out.bytes += f.stamp.size;
  if (out.bytes > max_bytes) {
    return Status::InvalidArgument(
        fmt::format("index {}: {} bytes, more than the {} bytes a local copy may take", index,
                    out.bytes, max_bytes));
  }
  // Named by what it holds: a copy is never overwritten, only made anew.
  const std::string record = RecordText(real, files);
  const std::string dir =
      fmt::format("{}/{}-{:016x}", copies, key, XXH3_64bits(record.data(), record.size()));
  out.path = dir;
  if (ReadRecord(dir) == record) {
    out.reused = true;
    return out;
  }
  const std::string tmp = fmt::format("{}.tmp-{}", dir, ::getpid());
  RemoveCopy(tmp);  // One left by a crash of a process with this pid.
  if (::mkdir(tmp.c_str(), 0700) != 0) return Status::FromErrno(errno, tmp);
  Status s;
  std::string written = fmt::format("shardfs index copy v1\n{}\n", real);
  for (const ListedFile& f : files) {
    s = CopyListedFile(real, f, fmt::format("{}/{}", tmp, f.name));
    if (!s.ok()) break;
    written += Line(f);
    // The record lists what is in the directory so far: a failure below
    // removes exactly that.
  }
  auto write_record = [&](const std::string& text) {
    const std::string path = fmt::format("{}/{}", tmp, kRecord);
    ::unlink(path.c_str());
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid() || !WriteFully(fd.get(), text.data(), text.size())) {
      return Status::FromErrno(errno, path);
    }
    return Status::Ok();
  };
  Status ws = write_record(s.ok() ? record : written);
  if (!s.ok() || !ws.ok()) {
    RemoveCopy(tmp);
    return s.ok() ? ws : s;
  }
  RemoveCopy(dir);  // A damaged one of the same name.
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    Status rs = Status::FromErrno(errno, dir);
    RemoveCopy(tmp);
    return rs;
  }
  RemoveOlderCopies(copies, key, dir);
  return out;
}

}  // namespace

}  // namespace shardfs::reader
