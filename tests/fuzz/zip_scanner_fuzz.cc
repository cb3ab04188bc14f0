// libFuzzer target: the zip central directory parser (src/archive/zip_scanner.h).
// Input bytes are a whole archive. The scan must return (a Status, never a
// crash or a read outside the input), and every member it accepts must be
// one a mount can serve: a file's bytes (stored range or compressed range)
// inside the archive and before the central directory's end, a name that
// normalises, a symlink with a non-empty target. With checksums on, every
// accepted deflated member was inflated and its CRC-32 checked, so decoding
// it again must succeed with the same bytes' hash.
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "index/member_path.h"
#include "src/archive/zip_scanner.h"
#include "src/codec/encoded_member.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "zip scanner: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardfs;
  const char* bytes = reinterpret_cast<const char*>(data);
  if (!archive::LooksLikeZip(bytes, size)) return 0;
  for (bool checksum : {false, true}) {
    archive::ScanOptions options;
    options.checksum = checksum;
    archive::ShardInfo info;
    Status s = archive::ScanZipBytes(
        "fuzz.zip", bytes, size, options,
        [&](archive::ScannedMember&& m) -> Status {
          if (!index::NormalizeMemberPath(m.path).ok()) Fail("accepted a bad name");
          if (m.kind == archive::MemberKind::kSymlink && m.link_target.empty()) {
            Fail("empty symlink target");
          }
          if (m.kind != archive::MemberKind::kFile || m.size == 0) return Status::Ok();
          const uint64_t at = m.encoded ? m.encoding.comp_offset : m.data_offset;
          const uint64_t len = m.encoded ? m.encoding.comp_size : m.size;
          if (at > size || len > size - at) Fail("member bytes outside the archive");
          if (m.encoded && checksum) {
            Result<std::string> r = codec::DecodeMember(
                m.encoding, std::string_view(bytes + at, static_cast<size_t>(len)), m.size);
            if (!r.ok()) Fail("accepted member does not decode");
            if (XXH3_64bits(r->data(), r->size()) != m.xxh3) Fail("checksum differs");
          }
          return Status::Ok();
        },
        &info);
    (void)s;
    if (!info.zip) Fail("info.zip not set");
  }
  return 0;
}
