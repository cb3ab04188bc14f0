#include "src/mount/read_ahead.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <optional>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/storage.h"

namespace shardfs::mount {
namespace {

// The whole of a small file (procfs and sysfs files have no size).
Result<std::string> ReadSmallFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, path);
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, path);
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
  }
}

std::optional<uint64_t> ParseKb(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return ParseDecimal(text);
}

}  // namespace

Result<std::string> FindFuseMountDevice(std::string_view mountinfo, std::string_view mountpoint) {
  // "36 35 0:52 / /mnt/x rw,nosuid - fuse.shardfs /data/x.idx rw,..."
  std::optional<std::string> found;
  while (!mountinfo.empty()) {
    size_t eol = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, eol);
    mountinfo.remove_prefix(eol == std::string_view::npos ? mountinfo.size() : eol + 1);
    std::vector<std::string_view> fields;
    for (size_t at = 0; at < line.size();) {
      size_t sp = line.find(' ', at);
      if (sp == std::string_view::npos) sp = line.size();
      fields.push_back(line.substr(at, sp - at));
      at = sp + 1;
    }
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size() || fields.size() < 5) continue;
    const std::string_view fstype = fields[dash + 1];
    if (fstype != "fuse" && !fstype.starts_with("fuse.")) continue;
    if (UnescapeMountinfo(fields[4]) != mountpoint) continue;
    found = std::string(fields[2]);  // The newest mount comes last.
  }
  if (!found) {
    return Status::NotFound(fmt::format("no FUSE mount at {} in mountinfo", mountpoint));
  }
  return *found;
}

Result<uint64_t> RaiseMountReadAhead(const std::string& mountpoint, uint64_t kb,
                                     const std::string& mountinfo_path,
                                     const std::string& bdi_dir) {
  SHARDFS_ASSIGN_OR_RETURN(std::string mountinfo, ReadSmallFile(mountinfo_path));
  SHARDFS_ASSIGN_OR_RETURN(std::string device, FindFuseMountDevice(mountinfo, mountpoint));
  const std::string path = bdi_dir + "/" + device + "/read_ahead_kb";
  SHARDFS_ASSIGN_OR_RETURN(std::string now_text, ReadSmallFile(path));
  std::optional<uint64_t> now = ParseKb(now_text);
  if (!now) return Status::Corruption(fmt::format("{}: not a number: {}", path, now_text));
  if (*now >= kb) return *now;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, path);
  const std::string value = fmt::format("{}\n", kb);
  if (!WriteFully(fd.get(), value.data(), value.size())) return Status::FromErrno(errno, path);
  return kb;
}

void MountReadAheadOnce::RaiseIfArmed() noexcept {
  if (!armed_.load(std::memory_order_relaxed) ||
      !armed_.exchange(false, std::memory_order_acq_rel)) {
    return;
  }
  try {
    Result<uint64_t> kb = RaiseMountReadAhead(mount_path_, kMountReadAheadKb);
    if (kb.ok()) {
      log::Debug("read_ahead_kb of the mount: {}", *kb);
    } else {
      log::Info(
          "{}: the mount's readahead stays at the kernel's default (raising it needs root): "
          "a file over 128 KiB takes more than one READ",
          kb.status().message());
    }
  } catch (const std::bad_alloc&) {
  }
}

}  // namespace shardfs::mount
