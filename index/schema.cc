#include "index/schema.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "base/coding.h"

namespace shardfs::index {
namespace {

// The tail of a sparse record: whole extents, each non-empty, in order,
// apart, inside the logical size, with shard positions that do not wrap.
Status DecodeExtents(EntryRecord* rec) {
  if (rec->type != EntryType::kFile) {
    return Status::Corruption("entry record: sparse flag on a non-file");
  }
  rec->extents = rec->target;
  rec->target = {};
  if (rec->extents.size() % kExtentSize != 0) {
    return Status::Corruption(
        fmt::format("entry record: extent list of {} bytes, expected a multiple of {}",
                    rec->extents.size(), kExtentSize));
  }
  uint64_t end = 0;  // Logical end of the previous extent.
  for (size_t i = 0; i < ExtentCount(*rec); ++i) {
    Extent e = GetExtent(*rec, i);
    if (e.length == 0 || e.logical < end || e.logical > rec->size ||
        e.length > rec->size - e.logical || e.physical + e.length < e.physical) {
      return Status::Corruption(fmt::format(
          "entry record: extent {} ({} bytes at byte {} of a file of {}, after byte {}) is "
          "empty, out of order, overlapping or past the end",
          i, e.length, e.logical, rec->size, end));
    }
    end = e.logical + e.length;
  }
  return Status::Ok();
}

}  // namespace

std::string_view EncodeDirentPrefix(ViewId view, InodeId parent, DirentKeyBuffer& buf) {
  buf[0] = kDirentPrefix;
  EncodeBigEndian32(&buf[1], view.value);
  EncodeBigEndian64(&buf[5], parent.value);
  return {buf.data(), kDirentKeyHeader};
}

std::string_view EncodeDirentKey(ViewId view, InodeId parent, std::string_view name,
                                 DirentKeyBuffer& buf) {
  EncodeDirentPrefix(view, parent, buf);
  std::memcpy(&buf[kDirentKeyHeader], name.data(), name.size());
  return {buf.data(), kDirentKeyHeader + name.size()};
}

std::string_view EncodeInodeKey(ViewId view, InodeId inode, InodeKeyBuffer& buf) {
  buf[0] = kInodePrefix;
  EncodeBigEndian32(&buf[1], view.value);
  EncodeBigEndian64(&buf[5], inode.value);
  return {buf.data(), buf.size()};
}

std::string_view EncodeShardKey(ShardId shard, ShardKeyBuffer& buf) {
  buf[0] = kShardPrefix;
  EncodeBigEndian32(&buf[1], shard.value);
  return {buf.data(), buf.size()};
}

std::string EncodeMetaKey(std::string_view name) {
  std::string key(1, kMetaPrefix);
  key.append(name);
  return key;
}

bool DecodeDirentKey(std::string_view key, ViewId* view, InodeId* parent, std::string_view* name) {
  if (key.size() <= kDirentKeyHeader || key[0] != kDirentPrefix) return false;
  view->value = DecodeBigEndian32(&key[1]);
  parent->value = DecodeBigEndian64(&key[5]);
  *name = key.substr(kDirentKeyHeader);
  return true;
}

bool DecodeInodeKey(std::string_view key, ViewId* view, InodeId* inode) {
  if (key.size() != kInodeKeySize || key[0] != kInodePrefix) return false;
  view->value = DecodeBigEndian32(&key[1]);
  inode->value = DecodeBigEndian64(&key[5]);
  return true;
}

bool DecodeShardKey(std::string_view key, ShardId* shard) {
  if (key.size() != kShardKeySize || key[0] != kShardPrefix) return false;
  shard->value = DecodeBigEndian32(&key[1]);
  return true;
}

void AppendExtent(const Extent& extent, std::string* out) {
  char buf[kExtentSize];
  EncodeFixed64(buf, extent.logical);
  EncodeFixed64(buf + 8, extent.length);
  EncodeFixed64(buf + 16, extent.physical);
  out->append(buf, kExtentSize);
}

std::string EncodeExtents(const std::vector<Extent>& extents) {
  std::string out;
  out.reserve(extents.size() * kExtentSize);
  for (const Extent& e : extents) AppendExtent(e, &out);
  return out;
}

Extent GetExtent(const EntryRecord& rec, size_t i) {
  const char* p = rec.extents.data() + i * kExtentSize;
  return {DecodeFixed64(p), DecodeFixed64(p + 8), DecodeFixed64(p + 16)};
}

std::string EncodeEncodedTrailer(const EncodedMember& m) {
  std::string out(kEncodedTrailerSize, '\0');
  out[0] = static_cast<char>(m.method);
  EncodeFixed64(out.data() + 1, m.comp_offset);
  EncodeFixed64(out.data() + 9, m.comp_size);
  EncodeFixed32(out.data() + 17, m.crc32);
  return out;
}

bool DecodeEncodedTrailer(std::string_view tail, EncodedMember* m) {
  if (tail.size() != kEncodedTrailerSize) return false;
  m->method = static_cast<uint8_t>(tail[0]);
  m->comp_offset = DecodeFixed64(tail.data() + 1);
  m->comp_size = DecodeFixed64(tail.data() + 9);
  m->crc32 = DecodeFixed32(tail.data() + 17);
  return true;
}

uint64_t StoredBytes(const EntryRecord& rec) {
  if (rec.encoded()) return rec.encoding.comp_size;
  if (!rec.sparse()) return rec.size;
  uint64_t total = 0;
  for (size_t i = 0; i < ExtentCount(rec); ++i) total += GetExtent(rec, i).length;
  return total;
}

size_t FindExtent(const EntryRecord& rec, uint64_t offset) {
  size_t lo = 0, hi = ExtentCount(rec);
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    Extent e = GetExtent(rec, mid);
    if (e.logical + e.length <= offset) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void EncodeEntry(const EntryRecord& rec, std::string* out) {
  // Extents and a target exclude each other (sparse files vs symlinks).
  const std::string trailer = rec.encoded() ? EncodeEncodedTrailer(rec.encoding) : std::string();
  const std::string_view tail = rec.encoded()  ? std::string_view(trailer)
                                : rec.sparse() ? rec.extents
                                               : rec.target;
  out->resize(kEntryFixedSize + tail.size());
  char* p = out->data();
  p[0] = static_cast<char>(rec.type);
  p[1] = static_cast<char>(rec.flags);
  EncodeFixed32(p + 2, rec.mode);
  EncodeFixed32(p + 6, rec.uid);
  EncodeFixed32(p + 10, rec.gid);
  EncodeFixed64(p + 14, rec.inode.value);
  EncodeFixed64(p + 22, rec.parent.value);
  EncodeFixed64(p + 30, rec.size);
  EncodeFixed64(p + 38, static_cast<uint64_t>(rec.mtime_ns));
  EncodeFixed32(p + 46, rec.nlink);
  EncodeFixed32(p + 50, rec.shard.value);
  EncodeFixed64(p + 54, rec.offset);
  EncodeFixed64(p + 62, rec.xxh3);
  if (!tail.empty()) std::memcpy(p + kEntryFixedSize, tail.data(), tail.size());
}

Status DecodeEntry(std::string_view value, EntryRecord* rec) {
  if (value.size() < kEntryFixedSize) {
    return Status::Corruption(fmt::format("entry record of {} bytes, expected at least {}",
                                          value.size(), kEntryFixedSize));
  }
  const char* p = value.data();
  uint8_t type = static_cast<uint8_t>(p[0]);
  if (type < 1 || type > 3) {
    return Status::Corruption(fmt::format("entry record with unknown type {}", type));
  }
  rec->type = static_cast<EntryType>(type);
  rec->flags = static_cast<uint8_t>(p[1]);
  rec->mode = DecodeFixed32(p + 2);
  rec->uid = DecodeFixed32(p + 6);
  rec->gid = DecodeFixed32(p + 10);
  rec->inode.value = DecodeFixed64(p + 14);
  rec->parent.value = DecodeFixed64(p + 22);
  rec->size = DecodeFixed64(p + 30);
  rec->mtime_ns = static_cast<int64_t>(DecodeFixed64(p + 38));
  rec->nlink = DecodeFixed32(p + 46);
  rec->shard.value = DecodeFixed32(p + 50);
  rec->offset = DecodeFixed64(p + 54);
  rec->xxh3 = DecodeFixed64(p + 62);
  rec->target = value.substr(kEntryFixedSize);
  rec->extents = {};
  rec->encoding = {};
  if (rec->flags & kEntryEncoded) {
    if (rec->type != EntryType::kFile || (rec->flags & kEntrySparse)) {
      return Status::Corruption("entry record: encoded flag on a non-file or a sparse file");
    }
    if (!DecodeEncodedTrailer(rec->target, &rec->encoding)) {
      return Status::Corruption(
          fmt::format("entry record: encoded member trailer of {} bytes, expected {}",
                      rec->target.size(), kEncodedTrailerSize));
    }
    rec->target = {};
    if (rec->encoding.method != kMethodDeflate) {
      return Status::Corruption(
          fmt::format("entry record: encoded member with unknown method {}", rec->encoding.method));
    }
    if (rec->encoding.comp_offset != rec->offset ||
        rec->encoding.comp_offset + rec->encoding.comp_size < rec->encoding.comp_offset) {
      return Status::Corruption("entry record: encoded member's compressed range is inconsistent");
    }
    return Status::Ok();
  }
  if (rec->flags & kEntrySparse) return DecodeExtents(rec);
  if (rec->type != EntryType::kSymlink && !rec->target.empty()) {
    return Status::Corruption("entry record: trailing bytes after a non-symlink");
  }
  if (rec->type == EntryType::kSymlink && rec->size != rec->target.size()) {
    return Status::Corruption("entry record: symlink size differs from its target");
  }
  if (rec->offset + rec->size < rec->offset) {
    return Status::Corruption("entry record: offset + size overflows");
  }
  return Status::Ok();
}

void EncodeShardMeta(const ShardMeta& meta, std::string* out) {
  const size_t fixed = meta.slice() ? 41 : 25;
  const size_t head = meta.remote() ? fixed + 2 + meta.etag.size() : fixed;
  out->resize(head + meta.path.size());
  char* p = out->data();
  EncodeFixed64(p, meta.size);
  EncodeFixed64(p + 8, static_cast<uint64_t>(meta.mtime_ns));
  EncodeFixed64(p + 16, meta.fingerprint);
  p[24] = static_cast<char>(meta.flags);
  if (meta.slice()) {
    EncodeFixed64(p + 25, meta.base);
    EncodeFixed64(p + 33, meta.length);
  }
  if (meta.remote()) {
    EncodeFixed16(p + fixed, static_cast<uint16_t>(meta.etag.size()));
    std::memcpy(p + fixed + 2, meta.etag.data(), meta.etag.size());
  }
  std::memcpy(p + head, meta.path.data(), meta.path.size());
}

Status DecodeShardMeta(std::string_view value, ShardMeta* meta) {
  if (value.size() < 25) {
    return Status::Corruption(
        fmt::format("shard record of {} bytes, expected at least 25", value.size()));
  }
  const char* p = value.data();
  meta->size = DecodeFixed64(p);
  meta->mtime_ns = static_cast<int64_t>(DecodeFixed64(p + 8));
  meta->fingerprint = DecodeFixed64(p + 16);
  meta->flags = static_cast<uint8_t>(p[24]);
  meta->etag.clear();
  meta->base = meta->length = 0;
  size_t head = 25;
  if (meta->slice()) {
    if (value.size() < 41) {
      return Status::Corruption(
          fmt::format("slice shard record of {} bytes, expected at least 41", value.size()));
    }
    meta->base = DecodeFixed64(p + 25);
    meta->length = DecodeFixed64(p + 33);
    if (meta->base > meta->size || meta->length > meta->size - meta->base) {
      return Status::Corruption(
          fmt::format("slice shard record: bytes {}..{} lie past the file's {} bytes", meta->base,
                      meta->base + meta->length, meta->size));
    }
    if (meta->codec() == Codec::kNone) {
      return Status::Corruption("slice shard record without a codec: a slice is a compressed tar");
    }
    head = 41;
  }
  if (meta->remote()) {
    if (value.size() < head + 2) {
      return Status::Corruption("remote shard record: no ETag length");
    }
    const size_t e = DecodeFixed16(p + head);
    if (value.size() < head + 2 + e) {
      return Status::Corruption(
          fmt::format("remote shard record: ETag of {} bytes runs past "
                      "the record's {}",
                      e, value.size()));
    }
    meta->etag.assign(value.substr(head + 2, e));
    head += 2 + e;
  }
  meta->path.assign(value.substr(head));
  return Status::Ok();
}

std::string EncodeCatalogPrefix(std::string_view name) {
  std::string key(1, kCatalogPrefix);
  key.append(name);
  key.push_back(kCatalogVersion);
  return key;
}

std::string EncodeCatalogKey(std::string_view name, uint32_t version) {
  std::string key = EncodeCatalogPrefix(name);
  char v[4];
  EncodeBigEndian32(v, version);
  key.append(v, 4);
  return key;
}

std::string EncodeTagPrefix(std::string_view name) {
  std::string key(1, kCatalogPrefix);
  key.append(name);
  key.push_back(kCatalogTag);
  return key;
}

std::string EncodeTagKey(std::string_view name, std::string_view tag) {
  return EncodeTagPrefix(name).append(tag);
}

std::string EncodeViewKeyPrefix(ViewId view, char sub) {
  std::string key(1, kViewPrefix);
  char v[4];
  EncodeBigEndian32(v, view.value);
  key.append(v, 4);
  if (sub != 0) key.push_back(sub);
  return key;
}

std::string EncodeViewDirentKey(ViewId view, InodeId parent, std::string_view name) {
  std::string key = EncodeViewKeyPrefix(view, kViewDirent);
  char p[8];
  EncodeBigEndian64(p, parent.value);
  key.append(p, 8);
  key.append(name);
  return key;
}

std::string EncodeViewInodeKey(ViewId view, InodeId inode) {
  std::string key = EncodeViewKeyPrefix(view, kViewInode);
  char p[8];
  EncodeBigEndian64(p, inode.value);
  key.append(p, 8);
  return key;
}

std::string EncodeViewSetKey(ViewId view, char set) {
  std::string key = EncodeViewKeyPrefix(view, kViewSet);
  key.push_back(set);
  return key;
}

bool DecodeCatalogKey(std::string_view key, std::string_view* name, uint32_t* version) {
  if (key.size() < 6 || key[0] != kCatalogPrefix || key[key.size() - 5] != kCatalogVersion) {
    return false;
  }
  *name = key.substr(1, key.size() - 6);
  *version = DecodeBigEndian32(key.data() + key.size() - 4);
  return true;
}

bool DecodeTagKey(std::string_view key, std::string_view* name, std::string_view* tag) {
  if (key.empty() || key[0] != kCatalogPrefix) return false;
  size_t sep = key.find(kCatalogTag, 1);
  if (sep == std::string_view::npos) return false;
  *name = key.substr(1, sep - 1);
  *tag = key.substr(sep + 1);
  return true;
}

bool DecodeViewKey(std::string_view key, ViewId* view) {
  if (key.size() < 5 || key[0] != kViewPrefix) return false;
  view->value = DecodeBigEndian32(key.data() + 1);
  return true;
}

void EncodeVersionRecord(const VersionRecord& rec, std::string* out) {
  out->assign(65, '\0');
  char* p = out->data();
  EncodeFixed32(p, rec.view.value);
  EncodeFixed32(p + 4, rec.shard_count);
  EncodeFixed64(p + 8, rec.base_max_inode);
  EncodeFixed64(p + 16, rec.max_inode);
  EncodeFixed64(p + 24, rec.files);
  EncodeFixed64(p + 32, rec.dirs);
  EncodeFixed64(p + 40, rec.symlinks);
  EncodeFixed64(p + 48, rec.bytes);
  EncodeFixed64(p + 56, static_cast<uint64_t>(rec.created_ns));
  p[64] = static_cast<char>(rec.kind);
  const size_t from = std::min<size_t>(rec.from.size(), UINT16_MAX);
  char len[4];
  EncodeFixed16(len, static_cast<uint16_t>(from));
  out->append(len, 2);
  out->append(rec.from, 0, from);
  EncodeFixed32(len, static_cast<uint32_t>(rec.message.size()));
  out->append(len, 4);
  out->append(rec.message);
}

Status DecodeVersionRecord(std::string_view value, VersionRecord* rec) {
  if (value.size() < 71) {
    return Status::Corruption(
        fmt::format("version record of {} bytes, expected at least 71", value.size()));
  }
  const char* p = value.data();
  rec->view.value = DecodeFixed32(p);
  rec->shard_count = DecodeFixed32(p + 4);
  rec->base_max_inode = DecodeFixed64(p + 8);
  rec->max_inode = DecodeFixed64(p + 16);
  rec->files = DecodeFixed64(p + 24);
  rec->dirs = DecodeFixed64(p + 32);
  rec->symlinks = DecodeFixed64(p + 40);
  rec->bytes = DecodeFixed64(p + 48);
  rec->created_ns = static_cast<int64_t>(DecodeFixed64(p + 56));
  const uint8_t kind = static_cast<uint8_t>(p[64]);
  if (kind != 1 && kind != 2) {
    return Status::Corruption(fmt::format("version record: kind {}, expected 1 or 2", kind));
  }
  rec->kind = static_cast<VersionKind>(kind);
  const size_t from = DecodeFixed16(p + 65);
  if (value.size() < 67 + from + 4) return Status::Corruption("version record: cut short");
  rec->from.assign(value.substr(67, from));
  const size_t message = DecodeFixed32(p + 67 + from);
  if (value.size() != 71 + from + message) {
    return Status::Corruption("version record: message length does not match");
  }
  rec->message.assign(value.substr(71 + from));
  if (rec->max_inode < rec->base_max_inode || rec->view.value == 0) {
    return Status::Corruption(
        fmt::format("version record: view {} with max_inode {} below base max_inode {}",
                    rec->view.value, rec->max_inode, rec->base_max_inode));
  }
  return Status::Ok();
}

uint32_t ModeTypeBits(EntryType type) {
  switch (type) {
    case EntryType::kDir:
      return S_IFDIR;
    case EntryType::kSymlink:
      return S_IFLNK;
    default:
      return S_IFREG;
  }
}

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "tar";
    case Codec::kGzip:
      return "gzip";
    case Codec::kZstd:
      return "zstd";
    case Codec::kBzip2:
      return "bzip2";
    case Codec::kXz:
      return "xz";
  }
  return "unknown codec";
}

size_t SeekTable::Find(uint64_t offset) const {
  auto it = std::upper_bound(points.begin(), points.end(), offset,
                             [](uint64_t o, const SeekPoint& p) { return o < p.decoded; });
  return it == points.begin() ? 0 : static_cast<size_t>(it - points.begin()) - 1;
}

std::string EncodeSeekKeyPrefix(ShardId shard) {
  std::string key(5, '\0');
  key[0] = kSeekPrefix;
  EncodeBigEndian32(key.data() + 1, shard.value);
  return key;
}

std::string EncodeSeekSumsKey(ShardId shard) {
  std::string key = EncodeSeekKeyPrefix(shard);
  key.push_back(kSeekSums);
  return key;
}

std::string EncodeSeekSums(const std::vector<uint64_t>& sums) {
  std::string out(sums.size() * 8, '\0');
  for (size_t i = 0; i < sums.size(); ++i) EncodeFixed64(out.data() + 8 * i, sums[i]);
  return out;
}

Status DecodeSeekSums(std::string_view value, size_t points, std::vector<uint64_t>* sums) {
  if (value.size() != points * 8) {
    return Status::Corruption(
        fmt::format("interval checksums: {} bytes for {} seek points", value.size(), points));
  }
  sums->resize(points);
  for (size_t i = 0; i < points; ++i) (*sums)[i] = DecodeFixed64(value.data() + 8 * i);
  return Status::Ok();
}

std::string EncodeSeekTableKey(ShardId shard) {
  std::string key = EncodeSeekKeyPrefix(shard);
  key.push_back(kSeekTable);
  return key;
}

std::string EncodeSeekWindowKey(ShardId shard, uint32_t point) {
  std::string key(10, '\0');
  key[0] = kSeekPrefix;
  EncodeBigEndian32(key.data() + 1, shard.value);
  key[5] = kSeekWindow;
  EncodeBigEndian32(key.data() + 6, point);
  return key;
}

void EncodeSeekTable(const SeekTable& table, std::string* out) {
  out->assign(12 + kSeekPointSize * table.points.size(), '\0');
  char* p = out->data();
  EncodeFixed64(p, table.decoded_size);
  EncodeFixed32(p + 8, static_cast<uint32_t>(table.points.size()));
  p += 12;
  for (const SeekPoint& s : table.points) {
    EncodeFixed64(p, s.decoded);
    EncodeFixed64(p + 8, s.compressed);
    p[16] = static_cast<char>(s.bits);
    p[17] = static_cast<char>(s.kind);
    p[18] = static_cast<char>(s.check);
    EncodeFixed32(p + 20, s.window);
    p += kSeekPointSize;
  }
}

Status DecodeSeekTable(std::string_view value, SeekTable* table) {
  if (value.size() < 12) {
    return Status::Corruption(
        fmt::format("seek table of {} bytes, expected at least 12", value.size()));
  }
  const char* p = value.data();
  table->decoded_size = DecodeFixed64(p);
  const uint64_t n = DecodeFixed32(p + 8);
  if (value.size() != 12 + n * kSeekPointSize) {
    return Status::Corruption(fmt::format("seek table of {} bytes for {} points", value.size(), n));
  }
  table->points.clear();
  table->points.reserve(n);
  p += 12;
  for (uint64_t i = 0; i < n; ++i, p += kSeekPointSize) {
    SeekPoint s;
    s.decoded = DecodeFixed64(p);
    s.compressed = DecodeFixed64(p + 8);
    s.bits = static_cast<uint8_t>(p[16]);
    const uint8_t kind = static_cast<uint8_t>(p[17]);
    s.check = static_cast<uint8_t>(p[18]);
    s.window = DecodeFixed32(p + 20);
    if (p[19] != 0) {
      return Status::Corruption(
          fmt::format("seek point {}: reserved byte is {}", i, static_cast<uint8_t>(p[19])));
    }
    if (kind < 1 || kind > 5) {
      return Status::Corruption(fmt::format("seek point {}: unknown kind {}", i, kind));
    }
    s.kind = static_cast<SeekKind>(kind);
    if (s.kind == SeekKind::kBzip2Block &&
        ((s.check & kBzip2LevelMask) < 1 || (s.check & kBzip2LevelMask) > 9 ||
         (s.check & ~(kBzip2LevelMask | kBzip2LastInStream)) != 0 || s.window != 0)) {
      return Status::Corruption(fmt::format(
          "seek point {}: bzip2 block with check byte {:#x}, window {}", i, s.check, s.window));
    }
    if (s.bits > 7 || s.window > kMaxSeekWindow) {
      return Status::Corruption(
          fmt::format("seek point {}: {} bits, window of {} bytes", i, s.bits, s.window));
    }
    if (i == 0 ? s.decoded != 0 : s.decoded <= table->points.back().decoded) {
      return Status::Corruption(
          fmt::format("seek point {}: decoded offset {} out of order", i, s.decoded));
    }
    if (i > 0 && s.compressed < table->points.back().compressed) {
      return Status::Corruption(
          fmt::format("seek point {}: compressed offset {} out of order", i, s.compressed));
    }
    if (s.decoded >= table->decoded_size) {
      return Status::Corruption(
          fmt::format("seek point {}: decoded offset {} past the stream's {} bytes", i, s.decoded,
                      table->decoded_size));
    }
    table->points.push_back(s);
  }
  if (n == 0 && table->decoded_size != 0) {
    return Status::Corruption("seek table without points for a non-empty stream");
  }
  return Status::Ok();
}

}  // namespace shardfs::index
