#include "index/member_path.h"

#include "index/schema.h"

namespace shardfs::index {

Result<std::string> NormalizeMemberPath(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  size_t pos = 0;
  while (pos <= raw.size()) {
    size_t slash = raw.find('/', pos);
    if (slash == std::string_view::npos) slash = raw.size();
    std::string_view comp = raw.substr(pos, slash - pos);
    pos = slash + 1;
    if (comp.empty() || comp == ".") continue;
    if (comp == "..") {
      return Status::InvalidArgument("path has a '..' component");
    }
    if (comp.size() > kMaxNameLength) {
      return Status::InvalidArgument(
          fmt::format("path component of {} bytes, longer than {}", comp.size(), kMaxNameLength));
    }
    if (!out.empty()) out.push_back('/');
    out.append(comp);
  }
  return out;
}

bool TreeOrderLess(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    // '/' sorts before every other byte, so a directory's descendants follow
    // it directly.
    if (a[i] == '/') return true;
    if (b[i] == '/') return false;
    return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[i]);
  }
  return a.size() < b.size();
}

std::string_view ParentPath(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::vector<std::string_view> PathComponents(std::string_view path) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > pos) out.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return out;
}

}  // namespace shardfs::index
