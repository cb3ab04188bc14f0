#include "index/fingerprint.h"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "base/coding.h"
#include "base/io.h"
#include "base/open_file.h"
#include "base/strings.h"
#include "index/schema.h"

namespace shardfs::index {
Result<uint64_t> ShardFingerprint(int fd, uint64_t size) {
  return ShardFingerprint(
      size, [fd](char* buf, size_t len, uint64_t pos) { return PreadExact(fd, buf, len, pos); });
}

Result<uint64_t> ShardFingerprint(uint64_t size, const ReadAtFn& read_at) {
  std::vector<char> buf(kFingerprintSpan);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  uint64_t head = std::min(size, kFingerprintSpan);
  SHARDFS_RETURN_IF_ERROR(read_at(buf.data(), head, 0));
  XXH3_64bits_update(state.get(), buf.data(), head);
  uint64_t tail_off = size > kFingerprintSpan ? size - kFingerprintSpan : 0;
  uint64_t tail = size - tail_off;
  SHARDFS_RETURN_IF_ERROR(read_at(buf.data(), tail, tail_off));
  XXH3_64bits_update(state.get(), buf.data(), tail);
  char le[8];
  EncodeFixed64(le, size);
  XXH3_64bits_update(state.get(), le, sizeof le);
  return XXH3_64bits_digest(state.get());
}

Status CheckShardFingerprint(const std::string& location, const ShardMeta& meta, uint64_t fp) {
  if (fp == meta.fingerprint) return Status::Ok();
  return Status::Corruption(
      fmt::format("shard {}: content differs from the indexed shard (fingerprint {:016x}, indexed "
                  "{:016x}): replaced after indexing?",
                  RedactLocation(location), fp, meta.fingerprint));
}

Status CheckShardFile(int fd, const struct stat& st, const std::string& path, const ShardMeta& meta,
                      const ShardCheck& check) {
  if (static_cast<uint64_t>(st.st_size) != meta.size) {
    return Status::Corruption(
        fmt::format("shard {}: size is {} bytes, indexed as {}", path, st.st_size, meta.size));
  }
  int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * kNanosPerSecond + st.st_mtim.tv_nsec;
  if (check.mtime && mtime_ns != meta.mtime_ns) {
    return Status::Corruption(fmt::format("shard {}: modified at {} ns, indexed at {} ns", path,
                                          mtime_ns, meta.mtime_ns));
  }
  Result<uint64_t> fp = ShardFingerprint(fd, meta.size);
  if (!fp.ok()) return fp.status().WithContext(fmt::format("shard {}", path));
  return CheckShardFingerprint(path, meta, *fp);
}

Result<UniqueFd> OpenCheckedShard(const std::string& path, const ShardMeta& meta,
                                  const ShardCheck& check, FileStamp* stamp) {
  struct stat st;
  OpenFileOptions how;
  how.noatime = true;
  std::string name = path;
  if (!check.beneath.empty()) {
    how.beneath = check.beneath;
    name = meta.path;
  }
  Result<UniqueFd> fd = OpenRegularFile(name, &st, how);
  if (!fd.ok()) {
    const Status& s = fd.status();
    // Not a regular file, or not where it may be: the file is not the
    // shard indexed.
    if (s.code() == Status::Code::kInvalidArgument) {
      return Status::Corruption(fmt::format("shard {}", s.message()));
    }
    return s.WithContext("shard");
  }
  if (stamp != nullptr) *stamp = FileStamp::Of(st);
  SHARDFS_RETURN_IF_ERROR(CheckShardFile(fd->get(), st, path, meta, check));
  return fd;
}

}  // namespace shardfs::index
