#include "index/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "base/fd.h"

namespace shardfs::index {

bool IsManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return false;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::string head(kManifestMagic.size(), '\0');
  ssize_t n = pread(fd.get(), head.data(), head.size(), 0);
  return n == static_cast<ssize_t>(head.size()) && head == kManifestMagic;
}

}  // namespace shardfs::index
