#include "src/reader/encoded_reader.h"

#include <cstring>

#include "base/log.h"
#include "src/codec/encoded_member.h"

namespace shardfs::reader {

Status ReadEncodedMember(const EncodedRead& read, DecodedCache* cache, const MemberCheck& check,
                         char* buf) {
  const index::EncodedMember& enc = read.encoding;
  auto decode = [&]() -> Result<std::string> {
    // The index's sizes are bounded before either buffer is allocated: a
    // std::bad_alloc here would end the mount.
    SHARDFS_RETURN_IF_ERROR(codec::CheckMemberSizes(enc, read.size));
    std::string compressed(static_cast<size_t>(enc.comp_size), '\0');
    Status s = (*read.shard)->ReadAt(compressed.data(), compressed.size(), enc.comp_offset);
    if (!s.ok()) return s;
    SHARDFS_ASSIGN_OR_RETURN(std::string content, codec::DecodeMember(enc, compressed, read.size));
    if (check) SHARDFS_RETURN_IF_ERROR(check(content));
    return content;
  };
  DecodedCache::Block block;
  if (cache != nullptr) {
    Result<DecodedCache::Block> got =
        cache->Get(DecodedKey{read.shard_id.value, enc.comp_offset}, decode, kDecodeWait);
    if (got.ok())
      block = std::move(got).value();
    else {
      Status s = got.status();
      log::Error("zip {}: member at byte {} ({} compressed bytes): {}", read.archive,
                 enc.comp_offset, enc.comp_size, s.message());
      return s.WithContext(fmt::format("zip {}: member at byte {}", read.archive, enc.comp_offset));
    }
  } else {
    Result<std::string> got = decode();
    if (!got.ok()) {
      Status s = got.status();
      log::Error("zip {}: member at byte {} ({} compressed bytes): {}", read.archive,
                 enc.comp_offset, enc.comp_size, s.message());
      return s.WithContext(fmt::format("zip {}: member at byte {}", read.archive, enc.comp_offset));
    }
    block = std::make_shared<const std::string>(std::move(got).value());
  }
  if (block->size() != read.size || read.offset > block->size() ||
      read.length > block->size() - read.offset) {
    return Status::Corruption(
        fmt::format("zip {}: member at byte {}: {} bytes decoded, expected {}", read.archive,
                    enc.comp_offset, block->size(), read.size));
  }
  std::memcpy(buf, block->data() + read.offset, read.length);
  return Status::Ok();
}

}  // namespace shardfs::reader
