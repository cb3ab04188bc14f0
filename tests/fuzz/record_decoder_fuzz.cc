// libFuzzer target: the index's record and key decoders, and path
// normalisation, over arbitrary bytes. Decoding must never crash, and
// whatever decodes must encode back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "index/member_path.h"
#include "index/schema.h"

using namespace shardfs::index;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);

  EntryRecord rec;
  if (DecodeEntry(in, &rec).ok()) {
    std::string again;
    EncodeEntry(rec, &again);
    if (again != in) std::abort();
  }
  ShardMeta meta;
  if (DecodeShardMeta(in, &meta).ok()) {
    std::string again;
    EncodeShardMeta(meta, &again);
    if (again != in) std::abort();
  }
  ViewId view;
  InodeId inode;
  std::string_view name;
  if (DecodeDirentKey(in, &view, &inode, &name) && name.size() <= kMaxNameLength) {
    DirentKeyBuffer buf;
    if (EncodeDirentKey(view, inode, name, buf) != in) std::abort();
  }
  if (DecodeInodeKey(in, &view, &inode)) {
    InodeKeyBuffer buf;
    if (EncodeInodeKey(view, inode, buf) != in) std::abort();
  }
  auto norm = NormalizeMemberPath(in);
  if (norm.ok()) {
    const std::string& p = norm.value();
    // Nothing normalised may climb out of the tree or be absolute.
    if (!p.empty() && (p.front() == '/' || p.back() == '/')) std::abort();
    if (p == ".." || p.starts_with("../") || p.ends_with("/..") ||
        p.find("/../") != std::string::npos) {
      std::abort();
    }
    auto twice = NormalizeMemberPath(p);
    if (!twice.ok() || twice.value() != p) std::abort();
  }
  return 0;
}
