#include "tools/builder/shard_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <new>
#include <optional>

#include "base/fd.h"
#include "base/log.h"
#include "base/strings.h"
#include "index/member_path.h"
#include "tools/builder/remote_shards.h"

namespace shardfs::builder {
namespace {

constexpr uint64_t kProgressBatch = 256;

using MemberFn = std::function<Status(archive::ScannedMember&&)>;

index::EntryType TypeOf(archive::MemberKind kind) {
  switch (kind) {
    case archive::MemberKind::kDir:
      return index::EntryType::kDir;
    case archive::MemberKind::kSymlink:
      return index::EntryType::kSymlink;
    default:
      return index::EntryType::kFile;
  }
}

// Downloads a remote shard into a temporary file to scan, setting *object
// from the response. A weak ETag proves no bytes, so a mount could never
// accept a response against it: none is kept, and the mount holds the shard
// to Last-Modified.
Result<UniqueFd> DownloadForScan(const std::string& path, const std::string& shown,
                                 uint64_t max_remote_size, remote::ObjectInfo* object) {
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd fd, DownloadShard(path, max_remote_size, object));
  if (object->etag.starts_with("W/")) {
    log::Warning("shard {}: the server's ETag {} is weak; indexed by its Last-Modified{}", shown,
                 object->etag,
                 object->mtime_ns != 0 ? "" : " (none either: a mount checks only its size)");
    object->etag.clear();
  }
  return fd;
}

// A member takes at least one 512-byte header and, with data, a block of
// it; reserving for 1 KiB per member saves the regrowth copies of small-file
// shards and only reserves address space otherwise. Capped, so that a
// shard of large files does not ask for more address space than the
// kernel's overcommit check allows; past the cap the vector grows.
void ReserveMembers(const std::string& path, HugeVector<index::MemberEntry>* members) {
  constexpr size_t kMaxReserved = size_t{1} << 22;  // ~600 MB of MemberEntry.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  try {
    members->reserve(std::min<size_t>(static_cast<size_t>(st.st_size) / 1024, kMaxReserved));
  } catch (const std::bad_alloc&) {
    // Only a saving: the scan grows the vector as it goes.
  }
}

// Adds scanned member `m` of shard `id` (named `shown` in messages) to
// out->members, or counts it as rejected with an example.
Status AddMember(archive::ScannedMember&& m, index::ShardId id, const std::string& shown,
                 ScannedShard* out) {
  auto reject = [&](std::string_view why) {
    ++out->rejected;
    if (out->rejected_examples.size() < kRejectedExamples) {
      out->rejected_examples.push_back(
          fmt::format("{}: member '{}' at byte {}: {}", shown, m.path, m.header_offset, why));
    }
    return Status::Ok();
  };
  if (m.kind == archive::MemberKind::kOther)
    return reject(fmt::format("{} not supported", m.other_type));
  Result<std::string> norm = index::NormalizeMemberPath(m.path);
  if (!norm.ok()) return reject(norm.status().message());
  index::MemberEntry e;
  e.path = std::move(norm).value();
  e.type = TypeOf(m.kind);
  e.mode = m.mode;
  e.uid = static_cast<uint32_t>(std::clamp<int64_t>(m.uid, 0, UINT32_MAX));
  e.gid = static_cast<uint32_t>(std::clamp<int64_t>(m.gid, 0, UINT32_MAX));
  e.mtime_ns = m.mtime_ns;
  e.size = m.size;
  e.shard = m.slice == 0 ? id : index::ShardId{kSliceMark | (m.slice - 1)};
  e.offset = m.data_offset;
  e.has_checksum = m.has_checksum;
  e.xxh3 = m.xxh3;
  e.header_offset = m.header_offset;
  if (m.kind == archive::MemberKind::kHardlink) {
    Result<std::string> target = index::NormalizeMemberPath(m.link_target);
    if (!target.ok()) return reject("hard link target: " + target.status().message());
    e.is_hardlink = true;
    e.link_target = std::move(target).value();
  } else {
    e.link_target = std::move(m.link_target);
  }
  if (out->spiller) {
    return out->spiller->Add(e, m.sparse ? &m.extents : nullptr,
                             m.encoded ? index::EncodeEncodedTrailer(m.encoding) : std::string());
  }
  if (m.sparse) out->sparse.emplace_back(out->members.size(), std::move(m.extents));
  if (m.encoded) out->encoded.emplace_back(out->members.size(), m.encoding);
  out->members.push_back(std::move(e));
  return Status::Ok();
}

// One shard's share of the build's Progress. The counters are shared by
// the scanning threads: members and bytes are added in batches, so that
// they do not bounce a cache line between cores on every member. After a
// restart, what was given before is not given again.
class ScanProgress {
 public:
  explicit ScanProgress(Progress* progress) : progress_(progress) {}

  // Counts member `m`: one entry, and the shard's bytes up to the end of its
  // data (a slice's members are at offsets of its decoded stream: no bytes).
  void Count(const archive::ScannedMember& m) {
    uint64_t end =
        m.sparse    ? (m.extents.empty() ? 0 : m.extents.back().physical + m.extents.back().length)
        : m.encoded ? m.encoding.comp_offset + m.encoding.comp_size
                    : m.data_offset + m.size;
    if (m.slice == 0) {
      pending_bytes_ += end > last_end_ ? end - last_end_ : 0;
      last_end_ = std::max(last_end_, end);
    }
    if (++pending_entries_ == kProgressBatch) Flush();
  }

  // Gives what was counted since the last Flush, less what an earlier pass
  // gave already.
  void Flush() {
    const uint64_t e = pending_entries_ - std::min(pending_entries_, credit_entries_);
    const uint64_t b = pending_bytes_ - std::min(pending_bytes_, credit_bytes_);
    credit_entries_ -= pending_entries_ - e;
    credit_bytes_ -= pending_bytes_ - b;
    progress_->Add(e, b);
    added_entries_ += e;
    added_bytes_ += b;
    pending_entries_ = pending_bytes_ = 0;
  }

  // The scan starts again from the first member.
  void Restart() {
    last_end_ = 0;
    pending_entries_ = pending_bytes_ = 0;
    credit_entries_ = added_entries_;
    credit_bytes_ = added_bytes_;
  }

 private:
  Progress* progress_;
  uint64_t last_end_ = 0;
  uint64_t pending_entries_ = 0, pending_bytes_ = 0;
  uint64_t added_entries_ = 0, added_bytes_ = 0, credit_entries_ = 0, credit_bytes_ = 0;
};

// Forgets every member a scan reported, for ScanOptions::restart.
void ResetScan(ScannedShard* out, archive::NestedScanner* nested) {
  if (out->spiller) out->spiller->RestartShard();
  if (nested) nested->Restart();
  out->members.clear();
  out->sparse.clear();
  out->encoded.clear();
  out->rejected = 0;
  out->rejected_examples.clear();
}

// Where a shard's bytes are read: the file at `path`, or a remote shard's
// temporary copy, `downloaded`.
struct ShardSource {
  std::string path;
  std::string shown;  // What messages name: a URL without its query.
  UniqueFd downloaded;
  remote::ObjectInfo object;  // The remote shard's response.
};

// Scans `src` with the scanner its bytes call for: a compressed tar is told
// by its magic, not its name (ScanTar makes the checks of a file it cannot
// open or that is not regular). A remote shard's mtime is the server's.
Status ScanSource(const ShardSource& src, uint64_t seek_spacing, archive::NestedScanner* nested,
                  const archive::ScanOptions& o, const MemberFn& fn, archive::ShardInfo* info,
                  archive::CompressedScan* compressed) {
  UniqueFd local;
  int fd = src.downloaded.get();
  if (!src.downloaded.valid()) {
    local.reset(::open(src.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    struct stat st;
    if (!local.valid() || ::fstat(local.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return archive::ScanTar(src.path, o, fn, info);
    }
    fd = local.get();
  }
  Result<index::Codec> codec = archive::DetectCodecFd(src.shown, fd);
  if (!codec.ok()) return codec.status();
  if (*codec != index::Codec::kNone) {
    if (nested) nested->SetDecodedStream();
    Status s =
        archive::ScanCompressedTarFd(src.shown, fd, *codec, seek_spacing, o, fn, info, compressed);
    if (src.downloaded.valid()) info->mtime_ns = src.object.mtime_ns;
    return s;
  }
  if (!src.downloaded.valid()) return archive::ScanTar(src.path, o, fn, info);
  Status s = archive::ScanTarFd(src.shown, src.downloaded.get(), o, fn, info);
  // The server's Last-Modified, never the temporary copy's mtime: a mount
  // holds responses to it when there is no ETag (0: nothing to hold to).
  info->mtime_ns = src.object.mtime_ns;
  return s;
}

}  // namespace

void ScanShard(const std::string& path, index::ShardId id, bool checksum, uint64_t max_remote_size,
               uint64_t seek_spacing, const archive::NestOptions& nest, Progress* progress,
               ScannedShard* out) {
  out->id = id;
  ShardSource src;
  src.path = path;
  // What messages name: a URL without its query (a presigned URL's
  // signature) is what may be printed.
  src.shown = RedactLocation(path);
  archive::ScanOptions so;
  so.checksum = checksum;
  so.max_zip_ratio = nest.max_zip_ratio;
  ScanProgress counted(progress);
  // The walker reads the shard once; in the rare case that it then hands
  // the shard to libarchive, what it reported is dropped here.
  if (out->spiller) out->spiller->BeginShard(id);
  std::optional<archive::NestedScanner> nested;
  if (nest.recursive) {
    archive::NestOptions o = nest;
    o.seek_spacing = seek_spacing;
    nested.emplace(o, src.shown, checksum);
    so.on_bytes = [&](const char* data, size_t size) { nested->SetShardBytes(data, size); };
  }
  so.restart = [&] {
    ResetScan(out, nested ? &*nested : nullptr);
    counted.Restart();
  };
  // A remote shard is read once, as a stream, into a temporary file that
  // the same scanner then maps: the offsets are exact by the same argument.
  if (IsRemoteInput(path)) {
    out->remote = true;
    Result<UniqueFd> fd = DownloadForScan(path, src.shown, max_remote_size, &src.object);
    if (!fd.ok()) {
      out->status = fd.status();
      progress->UnitDone();
      return;
    }
    src.downloaded = std::move(fd).value();
    out->etag = src.object.etag;
  }
  if (!src.downloaded.valid() && !out->spiller) ReserveMembers(path, &out->members);
  const MemberFn add = [&](archive::ScannedMember&& m) -> Status {
    counted.Count(m);
    return AddMember(std::move(m), id, src.shown, out);
  };
  out->status = ScanSource(
      src, seek_spacing, nested ? &*nested : nullptr, so,
      [&](archive::ScannedMember&& m) -> Status {
        return nested ? nested->Member(std::move(m), add) : add(std::move(m));
      },
      &out->info, &out->compressed);
  if (nested) {
    out->nested_archives = nested->nested_archives();
    out->nested_members = nested->nested_members();
    out->slices = std::move(nested->slices());
  }
  counted.Flush();
  progress->UnitDone();
}

}  // namespace shardfs::builder
