#include "tools/pack/shard_name.h"

#include <fmt/format.h>

#include "base/parse.h"

namespace shardfs::pack {

std::string ShardNamePattern::Format(uint64_t n) const {
  return zero_pad ? fmt::format("{}{:0{}}{}", prefix, n, width, suffix)
                  : fmt::format("{}{:>{}}{}", prefix, n, width, suffix);
}

bool ShardNamePattern::Matches(std::string_view name, bool or_tmp) const {
  auto exact = [&](std::string_view s) {
    if (s.size() <= prefix.size() + suffix.size()) return false;
    if (s.substr(0, prefix.size()) != prefix || s.substr(s.size() - suffix.size()) != suffix) {
      return false;
    }
    std::string_view mid = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
    size_t first = mid.find_first_not_of(' ');
    if (first == std::string_view::npos) return false;
    const std::optional<uint64_t> n = ParseDecimal(mid.substr(first));
    return n && Format(*n) == s;
  };
  if (exact(name)) return true;
  constexpr std::string_view kTmp = ".tmp";
  return or_tmp && name.size() > kTmp.size() && name.substr(name.size() - kTmp.size()) == kTmp &&
         exact(name.substr(0, name.size() - kTmp.size()));
}

Result<ShardNamePattern> ParseShardName(std::string_view text) {
  ShardNamePattern p;
  int conversions = 0;
  std::string* part = &p.prefix;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("--name '{}': {}", text, why));
  };
  if (text.find('/') != std::string_view::npos) return bad("must not contain '/'");
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      part->push_back(text[i]);
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '%') {
      part->push_back('%');
      ++i;
      continue;
    }
    size_t j = i + 1;
    if (j < text.size() && text[j] == '0') {
      p.zero_pad = true;
      ++j;
    }
    int width = 0;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') {
      width = width * 10 + (text[j] - '0');
      if (width > 40) return bad("field width too large");
      ++j;
    }
    if (j >= text.size() || (text[j] != 'd' && text[j] != 'u' && text[j] != 'i')) {
      return bad("expected one %d-style conversion such as %06d");
    }
    p.width = width;
    ++conversions;
    part = &p.suffix;
    i = j;
  }
  if (conversions != 1) return bad("needs exactly one %d-style conversion such as %06d");
  return p;
}

}  // namespace shardfs::pack
