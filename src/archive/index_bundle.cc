#include "src/archive/index_bundle.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "index/index_reader.h"
#include "src/archive/tar_writer.h"

namespace shardfs::archive {

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
