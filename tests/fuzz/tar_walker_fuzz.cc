// libFuzzer target: the header walker against libarchive. Input bytes are a
// shard. Wherever the walker accepts one, the libarchive scan must succeed
// with the same members, field for field (checksums included), in the same
// order; any difference aborts. Where the walker declines, nothing is
// compared: libarchive reads those shards anyway.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "src/archive/tar_scanner.h"
#include "src/archive/tar_walker.h"

namespace {

using shardfs::archive::ScannedMember;

bool Same(const ScannedMember& a, const ScannedMember& b) {
  return a.path == b.path && a.kind == b.kind && std::string_view(a.other_type) == b.other_type &&
         a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.mtime_ns == b.mtime_ns &&
         a.size == b.size && a.header_offset == b.header_offset && a.data_offset == b.data_offset &&
         a.sparse == b.sparse && a.extents.size() == b.extents.size() &&
         a.has_checksum == b.has_checksum && a.xxh3 == b.xxh3 && a.link_target == b.link_target;
}

void Differ(const char* what, size_t i) {
  std::fprintf(stderr, "walker and libarchive differ: %s (member %zu)\n", what, i);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardfs;
  const char* bytes = reinterpret_cast<const char*>(data);
  archive::ScanOptions options;
  options.checksum = true;
  std::vector<archive::ScannedMember> walked;
  if (!archive::WalkTar(bytes, size, options, &walked)) return 0;

  options.walker = false;
  std::vector<archive::ScannedMember> scanned;
  archive::ShardInfo info;
  shardfs::Status s = archive::ScanTarBytes(
      "fuzz.tar", bytes, size, options,
      [&](archive::ScannedMember&& m) {
        scanned.push_back(std::move(m));
        return shardfs::Status::Ok();
      },
      &info);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    Differ("the walker accepted a shard libarchive refuses", scanned.size());
  }
  if (walked.size() != scanned.size()) Differ("member count", scanned.size());
  for (size_t i = 0; i < walked.size(); ++i) {
    if (!Same(walked[i], scanned[i])) {
      std::fprintf(stderr, "walker: '%s' at %llu; libarchive: '%s' at %llu\n",
                   walked[i].path.c_str(), static_cast<unsigned long long>(walked[i].header_offset),
                   scanned[i].path.c_str(),
                   static_cast<unsigned long long>(scanned[i].header_offset));
      Differ("member fields", i);
    }
  }
  // And through ScanTarBytes with the walker on: the same members again.
  options.walker = true;
  size_t i = 0;
  archive::ShardInfo info2;
  s = archive::ScanTarBytes(
      "fuzz.tar", bytes, size, options,
      [&](archive::ScannedMember&& m) {
        if (i >= scanned.size() || !Same(m, scanned[i])) Differ("ScanTarBytes with the walker", i);
        ++i;
        return shardfs::Status::Ok();
      },
      &info2);
  if (!s.ok() || i != scanned.size() || info2.members != info.members ||
      info2.data_bytes != info.data_bytes) {
    Differ("ScanTarBytes with the walker: status or totals", i);
  }
  return 0;
}
