#include "index/fingerprint.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "base/coding.h"
#include "base/io.h"

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

}  // namespace shardfs::index
