#include "reader/filesystem.h"

#include <fcntl.h>
#include <unistd.h>

#include <new>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "base/io.h"
#include "base/log.h"
#include "base/strings.h"
#include "reader/zip_reader.h"

namespace shardfs::reader {
namespace {

constexpr size_t kVerifyChunk = 1 << 20;

std::vector<ShardFiles::Shard> ShardsOf(const index::IndexReader& r) {
  std::vector<ShardFiles::Shard> out;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    out.push_back({r.ShardPath(index::ShardId{i}), r.shards()[i]});
  }
  return out;
}

// One buffer per thread for verification, allocated once.
char* VerifyBuffer() {
  thread_local std::unique_ptr<char[]> buf(new char[kVerifyChunk]);
  return buf.get();
}

}  // namespace

Filesystem::Filesystem(std::unique_ptr<index::IndexReader> reader, FilesystemOptions options)
    : reader_(std::move(reader)),
      options_(options),
      shards_(ShardsOf(*reader_),
              ShardFilesOptions{options.max_open_shards, options.chunked, options.chunk_local}),
      streams_(*reader_, options.decoded) {
  if (options_.verify != VerifyMode::kOff) {
    verified_ = InodeBits(reader_->max_inode());
  }
}

Status Filesystem::Lookup(InodeId parent, std::string_view name, EntryRecord* rec,
                          index::RecordHolder* holder) const {
  return reader_->Lookup(parent, name, rec, holder);
}

Status Filesystem::GetAttr(InodeId inode, EntryRecord* rec, index::RecordHolder* holder) const {
  return reader_->GetInode(inode, rec, holder);
}

void Filesystem::ToStat(const EntryRecord& rec, struct stat* st) const {
  *st = {};
  st->st_ino = rec.inode.value;
  st->st_mode = rec.mode;
  if (options_.umask >= 0) {
    st->st_mode =
        (rec.mode & ~07777u) | (rec.mode & 07777u & ~static_cast<uint32_t>(options_.umask));
  }
  st->st_nlink = rec.nlink;
  st->st_uid = options_.uid >= 0 ? static_cast<uid_t>(options_.uid) : rec.uid;
  st->st_gid = options_.gid >= 0 ? static_cast<gid_t>(options_.gid) : rec.gid;
  st->st_size = static_cast<off_t>(rec.size);
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>((index::StoredBytes(rec) + 511) / 512);
  int64_t sec = rec.mtime_ns / 1000000000;
  int64_t nsec = rec.mtime_ns % 1000000000;
  if (nsec < 0) {
    nsec += 1000000000;
    --sec;
  }
  st->st_mtim = {static_cast<time_t>(sec), static_cast<long>(nsec)};
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

Status Filesystem::ReadDir(
    InodeId dir, std::string_view start_after,
    const std::function<bool(std::string_view, const EntryRecord&)>& fn) const {
  return reader_->ForEachChild(dir, start_after, fn);
}

Status Filesystem::ReadLink(InodeId inode, std::string_view* target,
                            index::RecordHolder* holder) const {
  EntryRecord rec;
  SHARDFS_RETURN_IF_ERROR(reader_->GetInode(inode, &rec, holder));
  if (rec.type != index::EntryType::kSymlink) return Status::InvalidArgument("not a symlink");
  *target = rec.target;
  return Status::Ok();
}

Result<DirCursor> DirCursor::Open(const Filesystem& fs, InodeId dir) {
  DirCursor c;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(fs.GetAttr(dir, &c.self_, &holder));
  if (c.self_.type != index::EntryType::kDir) {
    return Status::NotADirectory(fmt::format("inode {}: not a directory", dir.value));
  }
  c.self_.target = {};
  c.resume_after_.reserve(index::kMaxNameLength);
  c.scratch_.reserve(index::kMaxNameLength);
  return c;
}

Status DirCursor::Read(const Filesystem& fs, uint64_t off, const EntryFn& fn) {
  for (; off < 2; ++off) {
    EntryRecord dot;
    dot.type = index::EntryType::kDir;
    dot.mode = S_IFDIR;
    dot.inode = off == 0 ? self_.inode : self_.parent;
    if (!fn(off + 1, off == 0 ? "." : "..", dot)) {
      next_off_ = off;
      return Status::Ok();
    }
  }
  // Resume after the name the last call ended on, or count from the first.
  std::string_view start_after;
  uint64_t skip = 0;
  if (off == next_off_ && off > 2) {
    start_after = resume_after_;
  } else {
    skip = off - 2;
  }
  // The name the next call resumes after; both strings keep their capacity.
  std::string& last = scratch_;
  last = resume_after_;
  Status s =
      fs.ReadDir(self_.inode, start_after, [&](std::string_view name, const EntryRecord& rec) {
        if (skip > 0) {
          --skip;
          last.assign(name);
          return true;
        }
        if (!fn(off + 1, name, rec)) return false;
        ++off;
        last.assign(name);
        return true;
      });
  next_off_ = off;
  resume_after_.swap(last);
  return s;
}

InodeBits::InodeBits(uint64_t max_inode) : size_(max_inode / 64 + 1) {
  words_.reset(static_cast<uint64_t*>(std::calloc(size_, sizeof(uint64_t))));
  if (!words_) throw std::bad_alloc();
}

bool InodeBits::Test(InodeId inode) const {
  uint64_t i = inode.value;
  if (i / 64 >= size_) return false;
  return std::atomic_ref<uint64_t>(words_[i / 64]).load(std::memory_order_acquire) &
         (uint64_t{1} << (i % 64));
}

void InodeBits::Set(InodeId inode) {
  uint64_t i = inode.value;
  if (i / 64 < size_) {
    std::atomic_ref<uint64_t>(words_[i / 64])
        .fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
  }
}

Status Filesystem::VerifyStreamFile(const EntryRecord& rec, const ShardHandle& shard) {
  char* buf = VerifyBuffer();
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (uint64_t done = 0; done < rec.size;) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kVerifyChunk, rec.size - done));
    Status s = streams_.Read(rec.shard, shard, rec.offset + done, len, buf, nullptr);
    if (!s.ok()) {
      if (s.code() == Status::Code::kCorruption) shards_.MarkBad(rec.shard, s);
      return s;
    }
    XXH3_64bits_update(&state, buf, len);
    done += len;
  }
  const uint64_t got = XXH3_64bits_digest(&state);
  if (got != rec.xxh3) {
    Status bad = Status::Corruption(fmt::format(
        "shard {}: inode {} at decoded byte {}: content checksum {:016x}, indexed {:016x}",
        RedactLocation(reader_->ShardPath(rec.shard)), rec.inode.value, rec.offset, got, rec.xxh3));
    shards_.MarkBad(rec.shard, bad);
    return bad;
  }
  return Status::Ok();
}

Status Filesystem::VerifyFile(const EntryRecord& rec, const ShardHandle& shard) {
  if (!rec.has_checksum()) {
    return Status::NotSupported("the index has no checksum for this file");
  }
  if (reader_->shards()[rec.shard.value].codec() != index::Codec::kNone) {
    return VerifyStreamFile(rec, shard);
  }
  char* buf = VerifyBuffer();
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  // The stored bytes: a file's one range, or a sparse file's extents in
  // order (its holes are zeros by construction and are not hashed; see
  // index/schema.h).
  const size_t extents = rec.sparse() ? index::ExtentCount(rec) : 1;
  for (size_t i = 0; i < extents; ++i) {
    index::Extent e =
        rec.sparse() ? index::GetExtent(rec, i) : index::Extent{0, rec.size, rec.offset};
    for (uint64_t done = 0; done < e.length;) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(kVerifyChunk, e.length - done));
      Status s = shard->ReadAt(buf, len, e.physical + done);
      if (!s.ok()) {
        Status bad =
            s.WithContext(fmt::format("shard {}", RedactLocation(reader_->ShardPath(rec.shard))));
        shards_.ReadFailed(rec.shard, bad);
        return bad;
      }
      XXH3_64bits_update(&state, buf, len);
      done += len;
    }
  }
  uint64_t got = XXH3_64bits_digest(&state);
  if (got != rec.xxh3) {
    Status bad = Status::Corruption(fmt::format(
        "shard {}: inode {} at byte {}: content checksum {:016x}, indexed {:016x}",
        RedactLocation(reader_->ShardPath(rec.shard)), rec.inode.value, rec.offset, got, rec.xxh3));
    shards_.MarkBad(rec.shard, bad);
    return bad;
  }
  return Status::Ok();
}

Status Filesystem::ResolveRead(InodeId inode, uint64_t offset, size_t size, ReadRange* range,
                               index::RecordHolder* holder) {
  EntryRecord rec;
  SHARDFS_RETURN_IF_ERROR(reader_->GetInode(inode, &rec, holder));
  return ResolveRecordRead(rec, offset, size, range);
}

Status Filesystem::ResolveRead(const EntryRecord& looked_up, uint64_t offset, size_t size,
                               ReadRange* range) {
  SHARDFS_RETURN_IF_ERROR(reader_->CheckFileRange(looked_up));
  return ResolveRecordRead(looked_up, offset, size, range);
}

Status Filesystem::ResolveRecordRead(const EntryRecord& rec, uint64_t offset, size_t size,
                                     ReadRange* range) {
  const InodeId inode = rec.inode;
  if (rec.type == index::EntryType::kDir) return Status::IsADirectory("a directory");
  if (rec.type != index::EntryType::kFile) return Status::InvalidArgument("not a file");
  *range = ReadRange{};
  if (offset >= rec.size || size == 0) return Status::Ok();
  SHARDFS_ASSIGN_OR_RETURN(ShardHandle shard, shards_.Get(rec.shard));
  // A shard truncated or replaced while mounted must not serve bytes: the
  // size check is one fstat; content is covered by verify=first|always.
  // (A remote shard is held to its ETag by every request instead.)
  struct stat st;
  const index::ShardMeta& meta = reader_->shards()[rec.shard.value];
  if (shard->fd() >= 0 &&
      (::fstat(shard->fd(), &st) != 0 || static_cast<uint64_t>(st.st_size) != meta.size)) {
    Status bad = Status::Corruption(
        fmt::format("shard {}: size changed while mounted ({} bytes, indexed as {})",
                    RedactLocation(reader_->ShardPath(rec.shard)), st.st_size, meta.size));
    shards_.MarkBad(rec.shard, bad);
    return bad;
  }
  if (WouldVerify(inode) && !rec.encoded()) {  // Encoded: checked once decoded.
    SHARDFS_RETURN_IF_ERROR(VerifyFile(rec, shard));
    verified_.Set(inode);
  }
  range->shard = std::move(shard);
  range->shard_id = rec.shard;
  range->position = rec.offset + offset;
  range->length = static_cast<size_t>(std::min<uint64_t>(size, rec.size - offset));
  range->ends_file = offset + range->length == rec.size;
  range->whole_file = offset == 0 && range->ends_file;
  range->offset = offset;
  if (rec.encoded()) {
    range->decode_member = true;
    range->position = rec.encoding.comp_offset;
    range->encoding = rec.encoding;
    range->file_size = rec.size;
    range->inode = rec.inode;
    range->xxh3 = rec.xxh3;
    range->has_checksum = rec.has_checksum();
    range->ends_file = false;  // Push-ahead leaves it alone: no range of the shard.
    range->whole_file = false;
    return Status::Ok();
  }
  if (meta.codec() != index::Codec::kNone) {
    if (rec.sparse()) {  // Its extents are not read from a decoded stream.
      return Status::NotSupported(
          fmt::format("shard {}: inode {}: a sparse file in a compressed shard",
                      RedactLocation(reader_->ShardPath(rec.shard)), rec.inode.value));
    }
    range->decode_stream = true;
    range->file_size = rec.size;
    range->xxh3 = rec.xxh3;
    range->has_checksum = rec.has_checksum();
    range->ends_file = false;
    range->whole_file = false;
    return Status::Ok();
  }
  if (rec.sparse()) {
    // Inside one extent: an ordinary range. Otherwise ReadResolved assembles it;
    // push-ahead leaves such ranges alone (they end no file for it).
    const size_t i = index::FindExtent(rec, offset);
    if (i < index::ExtentCount(rec)) {
      index::Extent e = index::GetExtent(rec, i);
      range->position = e.physical + (offset > e.logical ? offset - e.logical : 0);
      if (e.logical <= offset && offset + range->length <= e.logical + e.length) {
        return Status::Ok();
      }
    } else {
      range->position = rec.offset;
    }
    range->gather = true;
    range->extents = rec.extents;
    range->ends_file = false;
    range->whole_file = false;
  }
  return Status::Ok();
}

Status Filesystem::Gather(const ReadRange& range, char* buf) {
  // The index's extent helpers read a record's extent list alone.
  EntryRecord rec;
  rec.extents = range.extents;
  const uint64_t offset = range.offset;
  const uint64_t end = offset + range.length;
  const size_t count = index::ExtentCount(rec);
  uint64_t at = offset;
  for (size_t i = index::FindExtent(rec, offset); at < end; ++i) {
    index::Extent e{end, 0, 0};  // Past the last extent: a hole to the end.
    if (i < count) e = index::GetExtent(rec, i);
    const uint64_t hole_end = std::min(end, e.logical);
    if (at < hole_end) {
      std::memset(buf + (at - offset), 0, static_cast<size_t>(hole_end - at));
      at = hole_end;
    }
    if (at >= end) break;
    const uint64_t stop = std::min(end, e.logical + e.length);
    SHARDFS_RETURN_IF_ERROR(range.shard->ReadAt(buf + (at - offset), static_cast<size_t>(stop - at),
                                                e.physical + (at - e.logical)));
    at = stop;
  }
  return Status::Ok();
}

bool Filesystem::WouldVerify(InodeId inode) const {
  return options_.verify == VerifyMode::kAlways ||
         (options_.verify == VerifyMode::kFirst && !verified_.Test(inode));
}

Status Filesystem::VerifyBytes(InodeId inode, const char* data, size_t size, uint64_t xxh3,
                               bool has_checksum) {
  if (!WouldVerify(inode)) return Status::Ok();
  if (!has_checksum) return Status::NotSupported("the index has no checksum for this file");
  if (XXH3_64bits(data, size) != xxh3) {
    return Status::Corruption(fmt::format("inode {}: content checksum differs", inode.value));
  }
  verified_.Set(inode);
  return Status::Ok();
}

Status Filesystem::ReadResolved(const ReadRange& range, char* buf, FileRange* at) {
  if (range.length == 0) return Status::Ok();
  if (range.decode_member) return ReadEncoded(range, buf);
  if (range.decode_stream) {
    // The message names the shard and the compressed offset already;
    // data that does not decode marks the shard bad (one log line).
    const FileSpan file{range.position - range.offset, range.file_size, range.xxh3,
                        range.has_checksum};
    Status s = streams_.Read(range.shard_id, range.shard, range.position, range.length, buf, &file);
    if (!s.ok()) {
      if (s.code() == Status::Code::kCorruption) {
        shards_.MarkBad(range.shard_id, s);
      } else {
        shards_.ReadFailed(range.shard_id, s);
      }
      return s;
    }
    range.shard->NoteDelivered(range.length, false);
    return Status::Ok();
  }
  Status s = range.gather ? Gather(range, buf)
                          : range.shard->ReadOrLocate(buf, range.length, range.position, at);
  if (!s.ok()) {
    s = s.WithContext(fmt::format("shard {}", RedactLocation(reader_->ShardPath(range.shard_id))));
    shards_.ReadFailed(range.shard_id, s);
    return s;
  }
  range.shard->NoteDelivered(range.length, false);
  return Status::Ok();
}

Status Filesystem::ReadEncoded(const ReadRange& range, char* buf) {
  const std::string archive = RedactLocation(reader_->ShardPath(range.shard_id));
  MemberCheck check;
  if (WouldVerify(range.inode)) {
    check = [&](const std::string& content) {
      return VerifyBytes(range.inode, content.data(), content.size(), range.xxh3,
                         range.has_checksum);
    };
  }
  EncodedRead read{range.shard_id, &range.shard, range.encoding, range.file_size,
                   range.offset,   range.length, archive};
  Status s = ReadEncodedMember(read, options_.decoded, check, buf);
  if (s.ok()) range.shard->NoteDelivered(range.length, false);
  return s;
}

Status Filesystem::Read(InodeId inode, uint64_t offset, size_t size, char* buf, size_t* n) {
  *n = 0;
  ReadRange range;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(ResolveRead(inode, offset, size, &range, &holder));
  SHARDFS_RETURN_IF_ERROR(ReadResolved(range, buf));
  *n = range.length;
  return Status::Ok();
}

void Filesystem::StatFs(struct statvfs* st) const {
  *st = {};
  st->f_bsize = 4096;
  st->f_frsize = 4096;
  const index::VersionRecord& v = reader_->version().record;
  st->f_blocks = (v.bytes + 4095) / 4096;
  st->f_files = v.files + v.dirs + v.symlinks;
  st->f_namemax = index::kMaxNameLength;
  st->f_flag = ST_RDONLY;
}

}  // namespace shardfs::reader
