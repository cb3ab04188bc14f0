#include "base/parse.h"

#include <charconv>
#include <string>

namespace shardfs {
namespace {

// Parses the leading digits of `text` into *n; returns how many there were.
size_t LeadingDigits(std::string_view text, uint64_t* n) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *n, 10);
  if (ec != std::errc()) return 0;
  return static_cast<size_t>(ptr - text.data());
}

}  // namespace

bool ParseSize(std::string_view text, uint64_t* out) {
  uint64_t n = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t digits = LeadingDigits(text, &n);
  if (digits == 0) return false;
  std::string_view suffix = text.substr(digits);
  int shift;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return false;
  }
  if (shift > 0 && n > (UINT64_MAX >> shift)) return false;
  *out = n << shift;
  return true;
}

std::optional<uint64_t> ParseDecimal(std::string_view text) {
  uint64_t n = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  if (LeadingDigits(text, &n) != text.size()) return std::nullopt;
  return n;
}

bool ParseCount(std::string_view text, uint64_t min, uint64_t max, uint64_t* out) {
  std::optional<uint64_t> n = ParseDecimal(text);
  if (!n || *n < min || *n > max) return false;
  *out = *n;
  return true;
}

bool ParseJobs(std::string_view text, int* out) {
  uint64_t n = 0;
  if (!ParseCount(text, 1, 4096, &n)) return false;
  *out = static_cast<int>(n);
  return true;
}

}  // namespace shardfs
