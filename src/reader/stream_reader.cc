#include "src/reader/stream_reader.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "base/strings.h"
#include "src/codec/ctar_codec.h"

namespace shardfs::reader {
namespace {

// How long a reader waits for another's decode of the same interval before
// decoding it itself (DecodedCache::Get): about one interval's inflate.
constexpr std::chrono::milliseconds kIntervalDecodeWait{2000};

}  // namespace

StreamReader::StreamReader(const index::IndexReader& reader, DecodedCache* cache)
    : reader_(reader), cache_(cache) {}

Result<std::shared_ptr<const StreamReader::Table>> StreamReader::GetTable(index::ShardId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tables_.find(id.value);
    if (it != tables_.end()) return it->second;
  }
  auto t = std::make_shared<Table>();
  t->name = RedactLocation(reader_.ShardPath(id));
  if (const index::ShardMeta& m = reader_.shards()[id.value]; m.slice()) {
    // A slice's compressed offsets are from its base.
    t->name += fmt::format(" (a compressed tar at bytes {}..{}; compressed offsets from its start)",
                           m.base, m.base + m.length);
  }
  std::string value;
  Status s = reader_.GetSeekValue(id, false, 0, &value);
  if (s.ok()) s = index::DecodeSeekTable(value, &t->table);
  if (!s.ok()) {
    return Status::Corruption(fmt::format("shard {}: seek table: {}", t->name, s.message()));
  }
  if (t->table.points.empty()) {
    return Status::Corruption(fmt::format("shard {}: seek table without points", t->name));
  }
  s = reader_.GetSeekSums(id, &value);
  if (s.ok()) s = index::DecodeSeekSums(value, t->table.points.size(), &t->checksums);
  if (!s.ok() && s.code() != Status::Code::kNotFound) {
    return Status::Corruption(fmt::format("shard {}: {}", t->name, s.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = tables_.emplace(id.value, std::move(t));
  return it->second;
}

Result<std::string> StreamReader::Decode(index::ShardId id, const Table& t, size_t point,
                                         uint64_t prefix, const ShardHandle& shard) {
  const index::SeekPoint& p = t.table.points[point];
  std::string window;
  if (p.window > 0) {
    Status s = reader_.GetSeekValue(id, true, static_cast<uint32_t>(point), &window);
    if (!s.ok() || window.size() != p.window) {
      return Status::Corruption(
          fmt::format("shard {}: seek point {} at compressed byte {}: no "
                      "window of {} bytes in the index",
                      t.name, point, p.compressed, p.window));
    }
  }
  // A slice's compressed bytes end at its length (ShardHandle reads add its
  // base).
  const uint64_t size = reader_.shards()[id.value].data_size();
  SHARDFS_RETURN_IF_ERROR(codec::CheckIntervalInput(t.name, t.table, point, size));
  const uint64_t from = codec::IntervalInputStart(t.table, point);
  const uint64_t to = codec::IntervalInputEnd(t.table, point, size);
  std::string input(static_cast<size_t>(to - from), '\0');
  SHARDFS_RETURN_IF_ERROR(shard->ReadAt(input.data(), input.size(), from));
  Result<std::string> out = codec::DecodeIntervalPrefix(t.name, t.table, point, window, input,
                                                        codec::kMaxIntervalBytes, prefix);
  if (!out.ok()) return Status::Corruption(out.status().message());
  const bool whole = out->size() == t.table.End(point) - p.decoded;
  (whole ? whole_ : prefixes_).fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(out->size(), std::memory_order_relaxed);
  if (whole && !t.checksums.empty() && codec::IntervalChecksum(*out) != t.checksums[point]) {
    return Status::Corruption(
        fmt::format("shard {}: seek point {} at compressed byte {}: the decoded interval's "
                    "checksum differs from the index's",
                    t.name, point, p.compressed));
  }
  return out;
}

Status StreamReader::Read(index::ShardId id, const ShardHandle& shard, uint64_t pos, size_t len,
                          char* buf, const FileSpan* file) {
  SHARDFS_ASSIGN_OR_RETURN(std::shared_ptr<const Table> t, GetTable(id));
  const index::SeekTable& table = t->table;
  if (pos > table.decoded_size || len > table.decoded_size - pos) {
    return Status::Corruption(
        fmt::format("shard {}: read of {} bytes at decoded byte {} past the stream's {} bytes",
                    t->name, len, pos, table.decoded_size));
  }
  while (len > 0) {
    const size_t i = table.Find(pos);
    const uint64_t start = table.points[i].decoded;
    const uint64_t end = table.End(i);
    if (end - start > codec::kMaxIntervalBytes) {
      if (table.points[i].kind == index::SeekKind::kGzipMember ||
          table.points[i].kind == index::SeekKind::kDeflate) {
        if (!t->warned.exchange(true)) {
          log::Warning(
              "shard {}: decoded byte {} lies in a gzip interval of {} bytes (more than {} MiB): "
              "reads of it fail (EIO). Index it again with a smaller --seek-spacing",
              t->name, pos, end - start, codec::kMaxIntervalBytes >> 20);
        }
      } else if (!t->warned.exchange(true)) {
        log::Warning(
            "shard {}: decoded byte {} lies in a {} of {} bytes (more than {} MiB): compressed "
            "as one piece, it can only be read sequentially; reads of it fail (EIO). Re-pack it "
            "into frames (pzstd, xz -T0 --block-size) or use gzip",
            t->name, pos,
            table.points[i].kind == index::SeekKind::kXzBlock ? "xz block" : "zstd frame",
            end - start, codec::kMaxIntervalBytes >> 20);
      }
      return Status::IoError(
          fmt::format("shard {}: decoded byte {}: interval of {} bytes is too "
                      "long for a random read",
                      t->name, pos, end - start));
    }
    // How much of the interval this read needs decoded: up to its file's
    // end where that file lies inside the interval and can be checked on
    // its own (see the header), else all of it.
    const bool by_file = file != nullptr && file->has_checksum && file->start >= start &&
                         file->size <= end - file->start &&
                         codec::CanDecodePrefix(table.points[i].kind);
    const uint64_t need = by_file ? file->start + file->size - start : end - start;
    auto decode = [&]() { return Decode(id, *t, i, need, shard); };
    std::shared_ptr<const std::string> block;
    if (cache_) {
      SHARDFS_ASSIGN_OR_RETURN(
          block, cache_->Get(DecodedKey{id.value, i}, need, decode, kIntervalDecodeWait));
    } else {
      SHARDFS_ASSIGN_OR_RETURN(std::string b, decode());
      block = std::make_shared<const std::string>(std::move(b));
    }
    if (block->size() < need || block->size() > end - start) {
      return Status::Corruption(fmt::format("shard {}: seek point {} decoded to {} bytes, not {}",
                                            t->name, i, block->size(), need));
    }
    if (block->size() < end - start) {
      // A prefix: nothing checked it but the file it is read for.
      const std::string_view bytes(block->data() + (file->start - start), file->size);
      files_checked_.fetch_add(1, std::memory_order_relaxed);
      if (XXH3_64bits(bytes.data(), bytes.size()) != file->xxh3) {
        return Status::Corruption(fmt::format(
            "shard {}: seek point {} at compressed byte {}: the file at decoded byte {} differs "
            "from its checksum",
            t->name, i, table.points[i].compressed, file->start));
      }
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, end - pos));
    std::memcpy(buf, block->data() + (pos - start), n);
    buf += n;
    pos += n;
    len -= n;
  }
  return Status::Ok();
}

StreamStats StreamReader::stats() const {
  StreamStats s;
  s.whole = whole_.load(std::memory_order_relaxed);
  s.prefixes = prefixes_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.files_checked = files_checked_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace shardfs::reader
