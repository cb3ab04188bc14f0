#include "src/archive/zip_fields.h"

#include <ctime>

namespace shardfs::archive {
namespace {

// CP437's upper half, as Unicode code points (the lower half is ASCII).
constexpr uint16_t kCp437High[128] = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7, 0x00EA, 0x00EB, 0x00E8, 0x00EF,
    0x00EE, 0x00EC, 0x00C4, 0x00C5, 0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9,
    0x00FF, 0x00D6, 0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192, 0x00E1, 0x00ED, 0x00F3, 0x00FA,
    0x00F1, 0x00D1, 0x00AA, 0x00BA, 0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556, 0x2555, 0x2563, 0x2551, 0x2557,
    0x255D, 0x255C, 0x255B, 0x2510, 0x2514, 0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F,
    0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256C, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559,
    0x2558, 0x2552, 0x2553, 0x256B, 0x256A, 0x2518, 0x250C, 0x2588, 0x2584, 0x258C, 0x2590, 0x2580,
    0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4, 0x03A6, 0x0398, 0x03A9, 0x03B4,
    0x221E, 0x03C6, 0x03B5, 0x2229, 0x2261, 0x00B1, 0x2265, 0x2264, 0x2320, 0x2321, 0x00F7, 0x2248,
    0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0,
};

}  // namespace

std::string Cp437ToUtf8(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    const uint32_t cp = c < 0x80 ? c : kCp437High[c - 0x80];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

int64_t DosTimeNs(uint16_t time, uint16_t date) {
  struct tm tm {};
  tm.tm_year = 80 + (date >> 9);
  tm.tm_mon = ((date >> 5) & 15) - 1;
  tm.tm_mday = date & 31;
  tm.tm_hour = time >> 11;
  tm.tm_min = (time >> 5) & 63;
  tm.tm_sec = (time & 31) * 2;
  tm.tm_isdst = -1;
  const time_t t = ::mktime(&tm);
  return static_cast<int64_t>(t) * 1000000000;
}

std::optional<int64_t> ExtraMtime(std::string_view extra) {
  std::optional<int64_t> ut, ntfs, ux;
  ForEachExtra(extra, [&](uint16_t id, std::string_view d) {
    if (id == kExtraTimestamp && d.size() >= 5 && (d[0] & 1)) {
      ut = int64_t{static_cast<int32_t>(DecodeFixed32(d.data() + 1))} * 1000000000;
    } else if (id == kExtraNtfs && d.size() >= 4 + 4 + 24) {
      // Reserved u32, then tag 1 of 24 bytes: mtime, atime, ctime (FILETIME).
      std::string_view t = d.substr(4);
      while (t.size() >= 4) {
        const uint16_t tag = DecodeFixed16(t.data()), len = DecodeFixed16(t.data() + 2);
        if (t.size() - 4 < len) break;
        if (tag == 1 && len >= 8) {
          const int64_t ft = static_cast<int64_t>(DecodeFixed64(t.data() + 4));
          ntfs = (ft / 10000000 - 11644473600) * 1000000000;
        }
        t.remove_prefix(4 + len);
      }
    } else if ((id == kExtraInfoZipUnix1 || id == kExtraPkUnix) && d.size() >= 8) {
      ux = int64_t{DecodeFixed32(d.data() + 4)} * 1000000000;
    }
  });
  if (ut) return ut;
  if (ntfs) return ntfs;
  return ux;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (n == 9 || s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace shardfs::archive
