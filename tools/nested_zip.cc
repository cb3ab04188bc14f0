#include "tools/nested_zip.h"

#include <zlib.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "tools/tar_scanner.h"
#include "tools/zip_scanner.h"

namespace shardfs::tools {
namespace {

// The smallest local header: what a member without data occupies at least.
constexpr uint64_t kLocalHeaderSize = 30;

}  // namespace

Status CheckNestedZip(std::string_view where, const char* data, size_t size) {
  // [first byte, end) of each member in the inner zip.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  uint64_t declared = 0;
  ScanOptions so;
  so.checksum = false;
  ShardInfo info;
  SHARDFS_RETURN_IF_ERROR(ScanZipBytes(
      where, data, size, so,
      [&](ScannedMember&& m) -> Status {
        uint64_t end = m.header_offset + kLocalHeaderSize;
        if (m.encoded) {
          end = std::max(end, m.encoding.comp_offset + m.encoding.comp_size);
        } else if (m.kind == MemberKind::kFile && m.size > 0) {
          end = std::max(end, m.data_offset + m.size);
        }
        spans.emplace_back(m.header_offset, end);
        if (m.kind == MemberKind::kFile) declared += m.size;
        return Status::Ok();
      },
      &info));
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      return Status::InvalidArgument(fmt::format(
          "{}: the members at bytes {} and {} of the zip overlap: refused as a zip bomb", where,
          spans[i - 1].first, spans[i].first));
    }
  }
  if (declared > kNestedZipRatioFloor && declared / kNestedZipMaxRatio > size) {
    return Status::InvalidArgument(fmt::format(
        "{}: its members declare {} uncompressed bytes, more than {} times the zip's {} bytes: "
        "refused as a zip bomb",
        where, declared, kNestedZipMaxRatio, size));
  }
  return Status::Ok();
}

std::string InflatePrefix(std::string_view compressed, size_t want) {
  // One inflater per thread, reset per call: a build with --recursive looks
  // at every deflated member of every zip, and a fresh inflater (its state
  // and 32 KiB window) per member would cost as much as the look itself.
  struct Inflater {
    z_stream z{};
    bool ok = inflateInit2(&z, -MAX_WBITS) == Z_OK;
    ~Inflater() {
      if (ok) inflateEnd(&z);
    }
  };
  thread_local Inflater inflater;
  if (!inflater.ok || inflateReset(&inflater.z) != Z_OK) return {};
  z_stream& z = inflater.z;
  std::string out(want, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(std::min<size_t>(compressed.size(), UINT32_MAX));
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(want);
  int rc = Z_OK;
  while (z.avail_out > 0 && rc == Z_OK) rc = inflate(&z, Z_SYNC_FLUSH);
  out.resize(want - z.avail_out);
  return out;
}

}  // namespace shardfs::tools
