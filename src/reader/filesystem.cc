#include "src/reader/filesystem.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <new>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "base/io.h"
#include "base/log.h"
#include "base/strings.h"
#include "index/fingerprint.h"
#include "src/reader/encoded_reader.h"

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
      streams_(*reader_, options.decoded),
      changes_(std::make_unique<std::atomic<uint32_t>[]>(reader_->shards().size())) {
  if (options_.verify != VerifyMode::kOff) {
    verified_ = InodeBits(reader_->max_inode());
    mismatch_logged_ = InodeBits(reader_->max_inode());
  }
}

std::string Filesystem::ShardName(index::ShardId id) const {
  return RedactLocation(reader_->ShardPath(id));
}

bool Filesystem::Verified(InodeId inode, index::ShardId shard) const {
  const uint32_t generation = Generation(shard);
  if (generation == 0) return verified_.Test(inode);
  std::lock_guard<std::mutex> l(reverified_mu_);
  auto it = reverified_.find(inode.value);
  return it != reverified_.end() && it->second == generation;
}

void Filesystem::SetVerified(InodeId inode, index::ShardId shard, uint32_t generation) {
  if (generation == 0) {
    verified_.Set(inode);
    return;
  }
  if (Generation(shard) != generation) return;  // Changed again meanwhile.
  std::lock_guard<std::mutex> l(reverified_mu_);
  reverified_[inode.value] = generation;
}

Status Filesystem::CheckAgain(index::ShardId id, const OpenShard& shard, int64_t ctime_ns) {
  const index::ShardMeta& meta = reader_->shards()[id.value];
  Result<uint64_t> fp = index::ShardFingerprint(shard.fd(), meta.size);
  if (!fp.ok()) return fp.status();
  SHARDFS_RETURN_IF_ERROR(index::CheckShardFingerprint(ShardName(id), meta, *fp));
  // Its files are verified again (verify=first) before the new ctime lets
  // any read through.
  changes_[id.value].fetch_add(1, std::memory_order_acq_rel);
  shard.AcceptCtime(ctime_ns);
  log::Info(
      "shard {}: its ctime moved (its owner, mode or links changed, or it was written and its "
      "mtime set back): checked again{}",
      ShardName(id),
      options_.verify == VerifyMode::kFirst ? "; each file is verified again on its next read"
                                            : "");
  return Status::Ok();
}

void Filesystem::ShardChanged(index::ShardId id, const Status& why) {
  changes_[id.value].fetch_add(1, std::memory_order_acq_rel);
  shards_.MarkBad(id, why);
}

Status Filesystem::ContentMismatch(const EntryRecord& rec, uint64_t got) {
  std::string path;
  if (!reader_->PathOf(rec.inode, &path).ok()) path = fmt::format("inode {}", rec.inode.value);
  const bool decoded = reader_->shards()[rec.shard.value].codec() != index::Codec::kNone;
  const std::string shard = ShardName(rec.shard);
  Status bad = Status::Corruption(
      fmt::format("{}: content checksum {:016x}, indexed {:016x} (shard {}, {}byte {})", path, got,
                  rec.xxh3, shard, decoded ? "decoded " : "", rec.offset));
  if (!mismatch_logged_.Test(rec.inode)) {
    mismatch_logged_.Set(rec.inode);
    log::ErrorAbout({shard, path, "content checksum mismatch"},
                    "{}; reads of this file fail with EIO, the shard's other files are served",
                    bad.message());
  }
  return bad;
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

void InodeBits::Clear(InodeId inode) {
  if (!Test(inode)) return;  // An untouched page of the set stays untouched.
  uint64_t i = inode.value;
  std::atomic_ref<uint64_t>(words_[i / 64])
      .fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
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
  if (got != rec.xxh3) return ContentMismatch(rec, got);
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
  if (got != rec.xxh3) return ContentMismatch(rec, got);
  return Status::Ok();
}

// How a read is served is decided once, here, from the file's record: the
// kind says which one way its bytes are read.
struct Filesystem::ReadRange {
  enum class Kind {
    kRange,   // Bytes [position, position + length) of the shard.
    kGather,  // A sparse file's read across holes or extents: assembled from
              // the record's extents (position: its first stored byte).
    kMember,  // An encoded member (a deflated zip member): from its decoded
              // bytes (src/reader/encoded_reader.h); position: the compressed
              // bytes' offset.
    kStream,  // A file of a compressed tar shard: position is an offset in
              // the decoded stream (src/reader/stream_reader.h).
  };
  Kind kind = Kind::kRange;
  ShardHandle shard;
  index::ShardId shard_id;
  uint64_t position = 0;
  size_t length = 0;                 // 0 at or past the end of the file.
  uint64_t offset = 0;               // Where in the file the read starts.
  const EntryRecord* rec = nullptr;  // The file; outlives the read.
};

Result<ReadReply> Filesystem::Read(InodeId inode, uint64_t offset, size_t size, char* buf,
                                   bool may_splice) {
  EntryRecord rec;
  index::RecordHolder holder;  // Holds the record (a sparse file's extents) for the read.
  SHARDFS_RETURN_IF_ERROR(reader_->GetInode(inode, &rec, &holder));
  return ReadFile(rec, offset, size, buf, may_splice);
}

Result<ReadReply> Filesystem::Read(const EntryRecord& looked_up, uint64_t offset, size_t size,
                                   char* buf, bool may_splice) {
  SHARDFS_RETURN_IF_ERROR(reader_->CheckFileRange(looked_up));
  return ReadFile(looked_up, offset, size, buf, may_splice);
}

Status Filesystem::Read(InodeId inode, uint64_t offset, size_t size, char* buf, size_t* n) {
  *n = 0;
  SHARDFS_ASSIGN_OR_RETURN(ReadReply reply, Read(inode, offset, size, buf, false));
  *n = reply.length;
  return Status::Ok();
}

Result<bool> Filesystem::ReadAdjacent(std::span<const EntryRecord> recs, char* const* bufs) {
  const size_t n = recs.size();
  if (n < 2 || n > kMaxAdjacent) return false;
  std::array<uint8_t, kMaxAdjacent> order;  // In the shard (a tar writer's order).
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint8_t>(i);
  std::sort(order.begin(), order.begin() + n,
            [&](uint8_t a, uint8_t b) { return recs[a].offset < recs[b].offset; });
  const EntryRecord& first = recs[order[0]];
  uint64_t end = first.offset;  // Where the file before ends.
  for (size_t k = 0; k < n; ++k) {
    const EntryRecord& r = recs[order[k]];
    if (r.type != index::EntryType::kFile || r.sparse() || r.encoded() || r.size == 0 ||
        r.shard != first.shard || r.offset < end || r.offset - end > kMaxAdjacentGap ||
        !reader_->CheckFileRange(r).ok()) {
      return false;
    }
    end = r.offset + r.size;
  }
  // Files due a checksum are read one by one; asked again after the stamp
  // check, which may find the shard changed (and forget its files' checks).
  auto due = [&] {
    return std::any_of(recs.begin(), recs.end(),
                       [&](const EntryRecord& r) { return WouldVerify(r.inode, r.shard); });
  };
  if (reader_->shards()[first.shard.value].codec() != index::Codec::kNone || due()) return false;
  ReadRange range;  // The stamp on the descriptor read, as for any read.
  SHARDFS_RETURN_IF_ERROR(Resolve(first, 0, first.size, &range));
  if (!range.shard->direct() || due()) return false;
  thread_local char gap[kMaxAdjacentGap];  // What lies between the files (headers).
  struct iovec iov[2 * kMaxAdjacent];
  int count = 0;
  uint64_t at = first.offset;
  for (size_t k = 0; k < n; ++k) {
    const EntryRecord& r = recs[order[k]];
    if (r.offset > at) iov[count++] = {gap, static_cast<size_t>(r.offset - at)};
    iov[count++] = {bufs[order[k]], static_cast<size_t>(r.size)};
    at = r.offset + r.size;
  }
  Status s = range.shard->ReadAtV(iov, count, static_cast<size_t>(at - first.offset), first.offset);
  if (!s.ok()) {
    s = s.WithContext(fmt::format("shard {}", RedactLocation(reader_->ShardPath(first.shard))));
    shards_.ReadFailed(first.shard, s);
    return s;
  }
  return true;
}

Result<ReadReply> Filesystem::ReadFile(const EntryRecord& rec, uint64_t offset, size_t size,
                                       char* buf, bool may_splice) {
  using Kind = ReadRange::Kind;
  ReadRange range;
  SHARDFS_RETURN_IF_ERROR(Resolve(rec, offset, size, &range));
  ReadReply reply;
  reply.length = range.length;
  if (range.length == 0) return reply;
  // Push-ahead acts on ranges of the shard; only a plain range ends a file
  // for it (a gather is no one range, decoded bytes none at all).
  if (range.kind == Kind::kRange || range.kind == Kind::kGather) {
    const bool ends = range.kind == Kind::kRange && offset + range.length == rec.size;
    reply.push = {true,         range.shard, range.shard_id,     range.position,
                  range.length, ends,        ends && offset == 0};
  }
  if (range.kind == Kind::kRange && may_splice && range.shard->direct()) {
    reply.fd = range.shard->fd();
    reply.pos = range.shard->base() + range.position;
    reply.keep = range.shard;
    return reply;
  }
  FileRange at;
  Status s;
  switch (range.kind) {
    case Kind::kRange:
      s = range.shard->ReadOrLocate(buf, range.length, range.position, may_splice ? &at : nullptr);
      break;
    case Kind::kGather:
      s = Gather(range, buf);
      break;
    case Kind::kStream: {
      const FileSpan file{rec.offset, rec.size, rec.xxh3, rec.has_checksum()};
      s = streams_.Read(range.shard_id, range.shard, range.position, range.length, buf, &file);
      // The message names the shard and the compressed offset already;
      // data that does not decode marks the shard bad (one log line).
      if (s.code() == Status::Code::kCorruption) shards_.MarkBad(range.shard_id, s);
      break;
    }
    case Kind::kMember: {
      MemberCheck check;
      if (WouldVerify(rec.inode, rec.shard)) {
        check = [&](const std::string& content) {
          return VerifyBytes(rec.inode, rec.shard, content.data(), content.size(), rec.xxh3,
                             rec.has_checksum());
        };
      }
      const std::string archive = RedactLocation(reader_->ShardPath(range.shard_id));
      const EncodedRead read{range.shard_id, &range.shard, rec.encoding, rec.size,
                             offset,         range.length, archive};
      // Logged and named by ReadEncodedMember; the shard is not marked.
      SHARDFS_RETURN_IF_ERROR(ReadEncodedMember(read, options_.decoded, check, buf));
      break;
    }
  }
  if (!s.ok()) {
    if (range.kind != Kind::kStream) {
      s = s.WithContext(fmt::format("shard {}", RedactLocation(reader_->ShardPath(rec.shard))));
      shards_.ReadFailed(range.shard_id, s);
    } else if (s.code() != Status::Code::kCorruption) {
      shards_.ReadFailed(range.shard_id, s);
    }
    return s;
  }
  range.shard->NoteDelivered(range.length, false);
  if (at.file) {
    reply.fd = at.file->get();
    reply.pos = at.pos;
    reply.keep = std::move(at.file);
  }
  return reply;
}

Status Filesystem::Resolve(const EntryRecord& rec, uint64_t offset, size_t size, ReadRange* range) {
  const InodeId inode = rec.inode;
  if (rec.type == index::EntryType::kDir) return Status::IsADirectory("a directory");
  if (rec.type != index::EntryType::kFile) return Status::InvalidArgument("not a file");
  *range = ReadRange{};
  range->rec = &rec;
  if (offset >= rec.size || size == 0) return Status::Ok();
  const uint32_t generation = Generation(rec.shard);
  SHARDFS_ASSIGN_OR_RETURN(ShardHandle shard, shards_.Get(rec.shard));
  // A shard written, truncated or replaced since its check must not serve
  // bytes, whatever the verify mode: its stamp, on the descriptor read (one
  // fstat). A remote shard is held to its ETag by every request instead.
  int64_t ctime_ns = 0;
  Status changed = shard->CheckUnchanged(&ctime_ns);
  if (changed.ok() && ctime_ns != 0) changed = CheckAgain(rec.shard, *shard, ctime_ns);
  if (!changed.ok()) {
    changed = changed.WithContext(fmt::format("shard {}", ShardName(rec.shard)));
    ShardChanged(rec.shard, changed);
    return changed;
  }
  const index::ShardMeta& meta = reader_->shards()[rec.shard.value];
  if (WouldVerify(inode, rec.shard) && !rec.encoded()) {  // Encoded: checked once decoded.
    SHARDFS_RETURN_IF_ERROR(VerifyFile(rec, shard));
    SetVerified(inode, rec.shard, generation);
  }
  range->shard = std::move(shard);
  range->shard_id = rec.shard;
  range->position = rec.offset + offset;
  range->length = static_cast<size_t>(std::min<uint64_t>(size, rec.size - offset));
  range->offset = offset;
  if (rec.encoded()) {
    range->kind = ReadRange::Kind::kMember;
    range->position = rec.encoding.comp_offset;
  } else if (meta.codec() != index::Codec::kNone) {
    if (rec.sparse()) {  // Its extents are not read from a decoded stream.
      return Status::NotSupported(
          fmt::format("shard {}: inode {}: a sparse file in a compressed shard",
                      RedactLocation(reader_->ShardPath(rec.shard)), rec.inode.value));
    }
    range->kind = ReadRange::Kind::kStream;
  } else if (rec.sparse()) {
    ResolveSparse(rec, offset, range);
  }
  return Status::Ok();
}

void Filesystem::ResolveSparse(const EntryRecord& rec, uint64_t offset, ReadRange* range) {
  // Inside one extent: an ordinary range. Otherwise a gather.
  const size_t i = index::FindExtent(rec, offset);
  if (i < index::ExtentCount(rec)) {
    index::Extent e = index::GetExtent(rec, i);
    range->position = e.physical + (offset > e.logical ? offset - e.logical : 0);
    if (e.logical <= offset && offset + range->length <= e.logical + e.length) return;
  } else {
    range->position = rec.offset;
  }
  range->kind = ReadRange::Kind::kGather;
}

Status Filesystem::Gather(const ReadRange& range, char* buf) {
  const EntryRecord& rec = *range.rec;
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

void Filesystem::WillNeed(const EntryRecord& rec) {
  if (rec.type != index::EntryType::kFile || rec.size == 0 || rec.encoded() || rec.sparse() ||
      reader_->shards()[rec.shard.value].codec() != index::Codec::kNone) {
    return;
  }
  Result<ShardHandle> shard = shards_.Get(rec.shard);
  if (!shard.ok() || !(*shard)->direct() || (*shard)->fd() < 0) return;
  ::posix_fadvise((*shard)->fd(), static_cast<off_t>((*shard)->base() + rec.offset),
                  static_cast<off_t>(rec.size), POSIX_FADV_WILLNEED);
}

bool Filesystem::WouldVerify(InodeId inode, index::ShardId shard) const {
  return options_.verify == VerifyMode::kAlways ||
         (options_.verify == VerifyMode::kFirst && !Verified(inode, shard));
}

Status Filesystem::VerifyBytes(InodeId inode, index::ShardId shard, const char* data, size_t size,
                               uint64_t xxh3, bool has_checksum) {
  const uint32_t generation = Generation(shard);
  if (!WouldVerify(inode, shard)) return Status::Ok();
  if (!has_checksum) return Status::NotSupported("the index has no checksum for this file");
  if (XXH3_64bits(data, size) != xxh3) {
    std::string path;
    if (!reader_->PathOf(inode, &path).ok()) path = fmt::format("inode {}", inode.value);
    return Status::Corruption(
        fmt::format("{}: content checksum differs (shard {})", path, ShardName(shard)));
  }
  SetVerified(inode, shard, generation);
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
