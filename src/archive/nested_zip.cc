#include "src/archive/nested_zip.h"

#include <zlib.h>

#include <algorithm>

namespace shardfs::archive {

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

}  // namespace shardfs::archive
