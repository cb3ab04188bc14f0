#include "base/strings.h"

#include <cstdint>

namespace shardfs {

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out.append(dir).append(1, '/').append(name);
  return out;
}

size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return len;
}

bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string RedactLocation(std::string_view location) {
  auto starts_with_no_case = [&](std::string_view prefix) {
    if (location.size() < prefix.size()) return false;
    for (size_t i = 0; i < prefix.size(); ++i) {
      const char c = location[i];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != prefix[i]) return false;
    }
    return true;
  };
  size_t scheme = 0;
  bool has_query = true;
  if (starts_with_no_case("http://")) {
    scheme = 7;
  } else if (starts_with_no_case("https://")) {
    scheme = 8;
  } else if (starts_with_no_case("s3://")) {
    scheme = 5;
    has_query = false;  // '?' and '#' belong to the key.
  } else {
    return std::string(location);
  }
  std::string out(location.substr(0, scheme));
  std::string_view rest = location.substr(scheme);
  const std::string_view host = rest.substr(0, rest.find_first_of(has_query ? "/?#" : "/"));
  if (const size_t at = host.rfind('@'); at != std::string_view::npos) {
    out.append("<redacted>@");
    rest.remove_prefix(at + 1);
  }
  const size_t query = has_query ? rest.find('?') : std::string_view::npos;
  out.append(rest.substr(0, query));
  if (query != std::string_view::npos) out.append("?<redacted>");
  return out;
}

}  // namespace shardfs
