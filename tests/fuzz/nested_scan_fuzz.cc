// libFuzzer target: index build --recursive's nested tar scan
// (src/archive/nested_scan.h) over arbitrary bytes. It must never crash, and every
// member it hands on, nested ones included, must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "src/archive/nested_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardfs;
  for (bool strip : {false, true}) {
    archive::NestOptions nest;
    nest.recursive = true;
    nest.strip_extension = strip;
    nest.max_entries = 10000;
    archive::NestedScanner nested(nest, "fuzz.tar", /*checksum=*/true);
    archive::ScanOptions options;
    options.on_bytes = [&](const char* d, size_t n) { nested.SetShardBytes(d, n); };
    const archive::NestedScanner::Emit check = [&](archive::ScannedMember&& m) -> shardfs::Status {
      if (m.encoded) {
        // A deflated member of a nested zip: its compressed bytes are what
        // lies in the shard.
        if (m.encoding.comp_offset > size || m.encoding.comp_size > size - m.encoding.comp_offset) {
          std::abort();
        }
      } else if (m.sparse) {
        for (const auto& e : m.extents) {
          if (e.physical > size || e.length > size - e.physical) std::abort();
        }
      } else if (m.kind == archive::MemberKind::kFile && m.size > 0 &&
                 (m.data_offset > size || m.size > size - m.data_offset)) {
        std::abort();  // A range outside the shard would serve wrong bytes.
      }
      if (m.header_offset > size) std::abort();
      return shardfs::Status::Ok();
    };
    archive::ShardInfo info;
    shardfs::Status s = archive::ScanTarBytes(
        "fuzz.tar", reinterpret_cast<const char*>(data), size, options,
        [&](archive::ScannedMember&& m) { return nested.Member(std::move(m), check); }, &info);
    (void)s;
  }
  return 0;
}
