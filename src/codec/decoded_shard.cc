#include "src/codec/decoded_shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/io.h"
#include "base/strings.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::codec {

Result<UniqueFd> DecodeShardToTemp(const index::IndexReader& reader, index::ShardId id, int fd) {
  const std::string name = RedactLocation(reader.ShardPath(id));
  // A slice shard's bytes are its range of the file.
  const uint64_t base = reader.shards()[id.value].data_base();
  const uint64_t size = reader.shards()[id.value].data_size();
  std::string value;
  index::SeekTable table;
  Status s = reader.GetSeekValue(id, false, 0, &value);
  if (s.ok()) s = index::DecodeSeekTable(value, &table);
  if (!s.ok())
    return Status::Corruption(fmt::format("shard {}: seek table: {}", name, s.message()));
  const char* dir = std::getenv("TMPDIR");
  const std::string d = dir && *dir ? dir : "/tmp";
  UniqueFd out(::open(d.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!out.valid()) {
    return Status::FromErrno(errno, fmt::format("shard {}: temporary file in {}", name, d));
  }
  std::string input, window;
  for (size_t i = 0; i < table.points.size(); ++i) {
    const index::SeekPoint& p = table.points[i];
    if (table.End(i) - p.decoded > kMaxIntervalBytes) {
      return Status::NotSupported(
          fmt::format("shard {}: seek point {} decodes to {} bytes, more than {} MiB", name, i,
                      table.End(i) - p.decoded, kMaxIntervalBytes >> 20));
    }
    window.clear();
    if (p.window > 0) {
      s = reader.GetSeekValue(id, true, static_cast<uint32_t>(i), &window);
      if (!s.ok() || window.size() != p.window) {
        return Status::Corruption(fmt::format(
            "shard {}: seek point {} at compressed byte {}: no window of {} bytes in the index",
            name, i, p.compressed, p.window));
      }
    }
    SHARDFS_RETURN_IF_ERROR(CheckIntervalInput(name, table, i, size));
    const uint64_t from = IntervalInputStart(table, i);
    const uint64_t to = IntervalInputEnd(table, i, size);
    input.resize(static_cast<size_t>(to - from));
    if (Status r = PreadExact(fd, input.data(), input.size(), base + from); !r.ok()) {
      return r.WithContext(fmt::format("shard {}", name));
    }
    Result<std::string> got = DecodeInterval(name, table, i, window, input, kMaxIntervalBytes);
    if (!got.ok()) return Status::Corruption(got.status().message());
    if (!WriteFully(out.get(), got->data(), got->size())) {
      return Status::FromErrno(errno, fmt::format("shard {}: write the decoded stream", name));
    }
  }
  return out;
}

}  // namespace shardfs::codec
