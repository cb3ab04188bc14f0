// The zip format's small field decoders, shared by the zip scanner
// (zip_scanner.cc): names in CP437, DOS dates, and the extra fields of a
// central or local header (zip64 sizes, Unicode paths, timestamps), as
// Info-ZIP's unzip reads them. Internal to src/archive/.
//
// Pure functions; thread-safe.
#ifndef SHARDFS_SRC_ARCHIVE_ZIP_FIELDS_H_
#define SHARDFS_SRC_ARCHIVE_ZIP_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/coding.h"

namespace shardfs::archive {

// Extra field ids (APPNOTE.TXT 4.5, 4.6).
inline constexpr uint16_t kExtraZip64 = 0x0001;
inline constexpr uint16_t kExtraNtfs = 0x000a;
inline constexpr uint16_t kExtraPkUnix = 0x000d;
inline constexpr uint16_t kExtraTimestamp = 0x5455;
inline constexpr uint16_t kExtraInfoZipUnix1 = 0x5855;
inline constexpr uint16_t kExtraUnicodePath = 0x7075;

// Calls fn(id, data) for each field of an extra block; false if the fields
// do not tile it exactly.
template <typename Fn>
bool ForEachExtra(std::string_view extra, Fn fn) {
  while (!extra.empty()) {
    if (extra.size() < 4) return false;
    const uint16_t id = DecodeFixed16(extra.data());
    const uint16_t len = DecodeFixed16(extra.data() + 2);
    if (extra.size() - 4 < len) return false;
    fn(id, extra.substr(4, len));
    extra.remove_prefix(4 + len);
  }
  return true;
}

// The extra block's mtime by unzip's preference (extended timestamp, then
// NTFS, then Unix), in nanoseconds since the epoch; nullopt if none.
std::optional<int64_t> ExtraMtime(std::string_view extra);

// A name in code page 437 (the zip default) as UTF-8.
std::string Cp437ToUtf8(std::string_view raw);

// The DOS date and time as local time (mktime), as unzip restores it, in
// nanoseconds since the epoch.
int64_t DosTimeNs(uint16_t time, uint16_t date);

// Whether `s` is made of UTF-8 sequences by their lead and continuation
// bytes alone (what a name flagged UTF-8 must be).
bool ValidUtf8(std::string_view s);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_ZIP_FIELDS_H_
