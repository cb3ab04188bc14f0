#include "src/archive/tar_headers.h"

#include <limits>

#include "base/parse.h"

namespace shardfs::archive {
namespace {

constexpr int64_t kNs = 1000000000;

// The length field of the header at `pos` (octal; GNU base-256 is refused
// here, as no extension header needs it). False past 11 octal digits.
bool HeaderSize(const char* data, uint64_t pos, uint64_t* out) {
  const char* f = data + pos + 124;
  if (static_cast<unsigned char>(f[0]) & 0x80) {
    // Base-256: big-endian in the remaining 11 bytes.
    uint64_t n = 0;
    for (int i = 1; i < 12; ++i) {
      if (n >> 56) return false;
      n = (n << 8) | static_cast<unsigned char>(f[i]);
    }
    *out = n;
    return true;
  }
  int i = 0;
  while (i < 12 && f[i] == ' ') ++i;
  uint64_t n = 0;
  for (; i < 12 && f[i] >= '0' && f[i] <= '7'; ++i) n = n * 8 + static_cast<uint64_t>(f[i] - '0');
  *out = n;
  return true;
}

// Calls on(key, value) for each record of a pax header's data. False if the
// records are malformed.
template <typename F>
bool ForEachPaxRecord(std::string_view recs, F on) {
  while (!recs.empty()) {
    size_t space = recs.find(' ');
    if (space == std::string_view::npos) return false;
    const std::optional<uint64_t> len = ParseDecimal(recs.substr(0, space));
    if (!len || *len > recs.size() || *len <= space + 1) return false;
    const size_t rec_len = static_cast<size_t>(*len);
    std::string_view kv = recs.substr(space + 1, rec_len - space - 2);  // Drop '\n'.
    recs.remove_prefix(rec_len);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return false;
    on(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return true;
}

}  // namespace

bool ParsePaxTimeNs(std::string_view v, int64_t* out) {
  bool negative = !v.empty() && v[0] == '-';
  if (negative) v.remove_prefix(1);
  int64_t sec = 0, nsec = 0;
  size_t i = 0;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) {
    if (sec > INT64_MAX / kNs / 10) return false;
    sec = sec * 10 + (v[i] - '0');
  }
  if (i == 0) return false;
  if (i < v.size() && v[i] == '.') {
    int64_t scale = 100000000;
    for (++i; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i, scale /= 10) {
      nsec += (v[i] - '0') * scale;
    }
  }
  if (i != v.size() || sec > INT64_MAX / kNs - 1) return false;
  int64_t ns = sec * kNs + nsec;
  *out = negative ? -ns : ns;
  return true;
}

bool ReadExtensions(const char* data, size_t size, uint64_t header, Extensions* ext) {
  for (uint64_t pos = header, n = 0; n < 64; ++n) {
    if (pos > size || size - pos < kTarBlock) return false;
    const char type = data[pos + 156];
    if (type != 'L' && type != 'K' && type != 'x' && type != 'g') {
      ext->own_header = pos;
      return true;
    }
    uint64_t len = 0;
    if (!HeaderSize(data, pos, &len) || len > size - pos - kTarBlock) return false;
    if (type == 'L') ext->gnu_name = true;
    if (type == 'K') ext->gnu_link = true;
    if (type == 'x') {
      bool ok = ForEachPaxRecord(std::string_view(data + pos + kTarBlock, len),
                                 [&](std::string_view key, std::string_view value) {
                                   if (key == "path") ext->path = value;
                                   if (key == "linkpath") ext->linkpath = value;
                                   if (key == "mtime") ext->mtime = value;
                                   if (key == "size") ext->size = value;
                                   if (key == "GNU.sparse.major") ext->sparse_major = value;
                                 });
      if (!ok) return false;
    }
    pos += kTarBlock + (len + kTarBlock - 1) / kTarBlock * kTarBlock;
  }
  return false;
}

std::optional<Sparse10Map> ReadSparse10Map(const char* data, size_t size, const Extensions& ext) {
  const uint64_t area = ext.own_header + kTarBlock;  // The member's data area.
  if (ext.own_header > size || size - ext.own_header < kTarBlock) return std::nullopt;
  uint64_t declared = 0;
  if (ext.size) {
    const std::optional<uint64_t> n = ParseDecimal(*ext.size);
    if (!n) return std::nullopt;
    declared = *n;
  } else if (!HeaderSize(data, ext.own_header, &declared)) {
    return std::nullopt;
  }
  if (declared > size - area) return std::nullopt;
  std::string_view text(data + area, static_cast<size_t>(declared));
  size_t used = 0;
  auto number = [&](uint64_t* out) {
    size_t nl = text.find('\n', used);
    if (nl == std::string_view::npos) return false;
    const std::optional<uint64_t> n = ParseDecimal(text.substr(used, nl - used));
    if (!n) return false;
    *out = *n;
    used = nl + 1;
    return true;
  };
  Sparse10Map map;
  uint64_t count = 0;
  if (!number(&count) || count > declared / 4) return std::nullopt;  // 4 bytes a pair at least.
  map.entries.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t offset = 0, length = 0;
    if (!number(&offset) || !number(&length)) return std::nullopt;
    if (offset > std::numeric_limits<uint64_t>::max() - length) return std::nullopt;
    map.entries.emplace_back(offset, length);
    map.logical_end = offset + length;
    if (length > declared) return std::nullopt;
    map.stored += length;
    if (map.stored > declared) return std::nullopt;
  }
  const uint64_t map_blocks = (used + kTarBlock - 1) / kTarBlock * kTarBlock;
  if (map_blocks > declared) return std::nullopt;
  map.data_start = area + map_blocks;
  map.member_end = area + (declared + kTarBlock - 1) / kTarBlock * kTarBlock;
  return map;
}

}  // namespace shardfs::archive
