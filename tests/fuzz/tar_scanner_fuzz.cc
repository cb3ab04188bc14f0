// libFuzzer target: the tar scanner over arbitrary bytes. It must never
// crash, and every member it accepts must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "src/archive/tar_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardfs;
  for (bool checksum : {false, true}) {
    archive::ShardInfo info;
    archive::ScanOptions options;
    options.checksum = checksum;
    shardfs::Status s = archive::ScanTarBytes(
        "fuzz.tar", reinterpret_cast<const char*>(data), size, options,
        [&](archive::ScannedMember&& m) -> shardfs::Status {
          if (m.sparse) {
            // Every extent inside the shard and the logical size, in order.
            uint64_t end = 0;
            for (const auto& e : m.extents) {
              if (e.length == 0 || e.logical < end || e.logical > m.size ||
                  e.length > m.size - e.logical || e.physical > size ||
                  e.length > size - e.physical) {
                std::abort();
              }
              end = e.logical + e.length;
            }
          } else if (m.kind == archive::MemberKind::kFile && m.size > 0 &&
                     (m.data_offset > size || m.size > size - m.data_offset)) {
            std::abort();  // A range outside the shard would serve wrong bytes.
          }
          return shardfs::Status::Ok();
        },
        &info);
    (void)s;
  }
  return 0;
}
