#include "tools/pack/shard_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/fd.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/paths.h"
#include "index/fingerprint.h"
#include "src/archive/ctar_scanner.h"
#include "src/archive/tar_writer.h"
#include "tools/pack/shard_compress.h"

namespace shardfs::pack {
namespace {

// Big files are streamed into the shard in chunks of this size.

// Test only: SHARDFS_TEST_FAIL_AFTER_SHARDS=N fails the pack as a full disk
// would, right after its Nth shard is complete, so that the integration
// tests can check what a pack failing half-way leaves (see shard_writer.h).
// Unset (or not a count from 1): never.
uint64_t FailAfterShards() {
  const char* v = std::getenv("SHARDFS_TEST_FAIL_AFTER_SHARDS");
  uint64_t n = 0;
  return v && ParseCount(v, 1, UINT32_MAX, &n) ? n : UINT64_MAX;
}

class ShardWriter {
 public:
  // `index` may be null when `check_only`.
  ShardWriter(const ShardPlan& plan, SourcePrefetch* reads, Progress* progress,
              index::IndexWriter* index, PackReport* report, bool check_only)
      : plan_(plan),
        pattern_(plan.pattern),
        out_dir_(plan.out_dir),
        scan_(*plan.scan),
        members_(*plan.members),
        reads_(reads),
        progress_(progress),
        report_(report),
        index_(index),
        written_(members_.size(), false),
        data_of_(members_.size(), kNoMember),
        hash_(XXH3_createState(), &XXH3_freeState),
        stored_hash_(XXH3_createState(), &XXH3_freeState),
        check_only_(check_only) {
    if (check_only_) reads_->CheckOnly();
  }

  // Writes every member (or, check_only, writes nothing and only lists the
  // files that cannot be opened); on failure removes what it wrote.
  Status Run() {
    Status s = WriteAll();
    if (s.ok() && !report_->errors.empty()) {
      s = Status::InvalidArgument(fmt::format("{} entr{} cannot be packed", report_->errors.size(),
                                              report_->errors.size() == 1 ? "y" : "ies"));
    }
    if (!s.ok()) RemoveOutput();
    return s;
  }

 private:
  Status WriteAll() {
    for (size_t i = 0; i < members_.size(); ++i) {
      const PlannedMember& pm = members_[i];
      const SourceEntry& e = scan_.entries[pm.entry];
      if (check_only_) {
        if (pm.type == archive::TarType::kFile) {
          SourcePrefetch::Slot& s = reads_->Wait(pm.read);
          if (s.result == ReadResult::kUnreadable) {
            report_->errors.push_back(fmt::format("{}: {}", ShownPath(e.path), s.reason));
          }
          reads_->Release(pm.read);
        }
        continue;
      }
      if (!fd_.valid() || pm.shard != shard_) {
        if (fd_.valid()) SHARDFS_RETURN_IF_ERROR(FinishShard());
        SHARDFS_RETURN_IF_ERROR(OpenShard(pm.shard));
      }
      if (pm.sample_start && (sample_starts_.empty() || sample_starts_.back() < tar_->offset())) {
        sample_starts_.push_back(tar_->offset());
      }
      switch (pm.type) {
        case archive::TarType::kDir:
        case archive::TarType::kSymlink:
          SHARDFS_RETURN_IF_ERROR(WriteNoData(pm, e, e.link_target));
          if (pm.type == archive::TarType::kDir) {
            ++report_->dirs;
          } else {
            ++report_->symlinks;
          }
          break;
        case archive::TarType::kHardlink: {
          const SourceEntry& leader = scan_.entries[members_[pm.leader].entry];
          if (!written_[pm.leader]) {
            report_->skipped.push_back(fmt::format("{}: hard link to {}, which was left out",
                                                   ShownPath(e.path), ShownPath(leader.path)));
            break;
          }
          SHARDFS_RETURN_IF_ERROR(WriteNoData(pm, e, leader.path));
          ++report_->hardlinks;
          break;
        }
        case archive::TarType::kFile:
          SHARDFS_RETURN_IF_ERROR(WriteFile(i, pm, e));
          break;
      }
      // Big files count their bytes as they stream.
      progress_->Add(1, pm.type == archive::TarType::kFile && e.size <= kWholeFileMax ? e.size : 0);
    }
    if (check_only_) return Status::Ok();
    SHARDFS_RETURN_IF_ERROR(FinishShard());
    return SyncPath(out_dir_);
  }

  Status OpenShard(uint32_t shard) {
    shard_ = shard;
    name_ = pattern_.Format(shard);
    path_ = out_dir_ + "/" + name_;
    tmp_ = path_ + ".tmp";
    sample_starts_.clear();
    if (plan_.compress.codec != index::Codec::kNone) {
      // The plain tar first, in an unnamed file (nothing is left of it if
      // the pack dies); compressed into NAME.tmp once complete.
      fd_.reset(::open(out_dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
      if (!fd_.valid()) {
        return Status::FromErrno(
            errno, fmt::format("create a temporary file in {} for {}", out_dir_, name_));
      }
    } else {
      fd_.reset(::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd_.valid()) return Status::FromErrno(errno, fmt::format("create {}", tmp_));
    }
    tar_ = std::make_unique<archive::TarWriter>(fd_.get(), name_);
    return Status::Ok();
  }

  // pack --compress: the complete plain tar at fd_ compressed into NAME.tmp,
  // which then takes fd_'s place.
  Status CompressTar() {
    const uint64_t tar_size = tar_->offset();
    std::vector<uint64_t> groups = PlanGroups(sample_starts_, tar_size, plan_.compress.group_bytes);
    UniqueFd out(::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out.valid()) return Status::FromErrno(errno, fmt::format("create {}", tmp_));
    compressed_tmp_ = true;
    SHARDFS_RETURN_IF_ERROR(
        CompressShard(tmp_, fd_.get(), tar_size, groups, plan_.compress, out.get(), &table_));
    SHARDFS_ASSIGN_OR_RETURN(checksums_, codec::IntervalChecksumsOfFile(tmp_, table_, fd_.get()));
    report_->tar_bytes += tar_size;
    fd_ = std::move(out);
    return Status::Ok();
  }

  Status FinishShard() {
    SHARDFS_RETURN_IF_ERROR(tar_->Finish());
    if (plan_.compress.codec != index::Codec::kNone) SHARDFS_RETURN_IF_ERROR(CompressTar());
    if (::fsync(fd_.get()) != 0) return Status::FromErrno(errno, fmt::format("fsync {}", tmp_));
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return Status::FromErrno(errno, tmp_);
    index::ShardMeta meta;
    meta.size = static_cast<uint64_t>(st.st_size);
    meta.mtime_ns = MtimeNs(st);
    Result<uint64_t> fp = index::ShardFingerprint(fd_.get(), meta.size);
    if (!fp.ok()) return fp.status().WithContext(tmp_);
    meta.fingerprint = *fp;
    meta.path = path_;
    meta.set_codec(plan_.compress.codec);
    fd_.reset();
    tar_.reset();
    compressed_tmp_ = false;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return Status::FromErrno(errno, fmt::format("rename {} to {}", tmp_, path_));
    }
    report_->shard_paths.push_back(path_);
    report_->shard_bytes += meta.size;
    ++report_->shards;
    if (report_->shards >= fail_after_shards_) {
      return Status::IoError(
          fmt::format("{}: SHARDFS_TEST_FAIL_AFTER_SHARDS={}: failing on purpose (a test hook)",
                      path_, fail_after_shards_));
    }
    index::ShardId id = index_->AddShard(std::move(meta));
    if (id.value != shard_) {
      return Status::Corruption(fmt::format("shard {}: registered as shard {}", shard_, id.value));
    }
    if (plan_.compress.codec != index::Codec::kNone) {
      archive::CompressedScan points;  // Group boundaries: no windows.
      points.codec = plan_.compress.codec;
      points.table = std::move(table_);
      points.checksums = std::move(checksums_);
      index_->AddSeekKeys(archive::SeekKeys(id, points));
    }
    progress_->UnitDone();
    return Status::Ok();
  }

  // Closes and removes the shard being written, if any.
  void AbandonShard() {
    if (!fd_.valid()) return;
    tar_.reset();
    fd_.reset();
    // Compressing, NAME.tmp exists only once the tar is complete.
    if (plan_.compress.codec == index::Codec::kNone || compressed_tmp_) ::unlink(tmp_.c_str());
    compressed_tmp_ = false;
  }

  void RemoveOutput() {
    AbandonShard();
    RemoveShards(report_);
  }

  index::MemberEntry IndexMember(const PlannedMember& pm, const SourceEntry& e) const {
    index::MemberEntry m;
    m.path = e.path;
    m.mode = e.mode & 07777;
    m.uid = e.uid;
    m.gid = e.gid;
    m.mtime_ns = e.mtime_ns;
    m.shard = index::ShardId{pm.shard};
    switch (pm.type) {
      case archive::TarType::kDir:
        m.type = index::EntryType::kDir;
        break;
      case archive::TarType::kSymlink:
        m.type = index::EntryType::kSymlink;
        break;
      default:
        m.type = index::EntryType::kFile;
        break;
    }
    return m;
  }

  Status WriteNoData(const PlannedMember& pm, const SourceEntry& e, std::string_view link) {
    uint64_t data_offset;
    SHARDFS_RETURN_IF_ERROR(tar_->BeginMember(TarMemberOf(e, pm.type, link), &data_offset));
    SHARDFS_RETURN_IF_ERROR(tar_->EndMember());
    index::MemberEntry m = IndexMember(pm, e);
    m.link_target = std::string(link);
    if (pm.type == archive::TarType::kHardlink) {
      // In the index every name links to the one whose data it uses, which
      // may lie in an earlier shard than the name this tar link names.
      m.is_hardlink = true;
      m.link_target = scan_.entries[members_[data_of_[pm.group]].entry].path;
    }
    index_->AddMember(std::move(m));
    return Status::Ok();
  }

  // An unreadable file: left out with --skip-unreadable, else the pack
  // fails, going on only to find the other unreadable files.
  void Unreadable(const SourceEntry& e, const std::string& reason) {
    std::string line = fmt::format("{}: {}", ShownPath(e.path), reason);
    if (plan_.skip_unreadable) {
      report_->skipped.push_back(std::move(line));
      return;
    }
    report_->errors.push_back(std::move(line));
    check_only_ = true;
    reads_->CheckOnly();
    AbandonShard();
  }

  Status Changed(const SourceEntry& e, const std::string& reason) {
    report_->errors.push_back(fmt::format("{}: {}", ShownPath(e.path), reason));
    if (e.stored) {
      return Status::Corruption(
          "a source shard changed since it was indexed; its bytes no longer match the index");
    }
    return Status::Corruption(
        "the source changed while being packed; pack it again when it is "
        "not being written to");
  }

  Status WriteFile(size_t i, const PlannedMember& pm, const SourceEntry& e) {
    SourcePrefetch::Slot& s = reads_->Wait(pm.read);
    struct Releaser {
      SourcePrefetch* r;
      size_t k;
      ~Releaser() { r->Release(k); }
    } releaser{reads_, pm.read};
    if (s.result == ReadResult::kChanged) return Changed(e, s.reason);
    if (s.result == ReadResult::kUnreadable) {
      Unreadable(e, s.reason);
      return Status::Ok();
    }
    uint64_t start = tar_->offset();
    uint64_t data_offset;
    SHARDFS_RETURN_IF_ERROR(
        tar_->BeginMember(TarMemberOf(e, archive::TarType::kFile, {}), &data_offset));
    uint64_t xxh3 = s.xxh3;
    if (s.fd < 0) {
      SHARDFS_RETURN_IF_ERROR(tar_->Append(s.data.get(), e.size));
    } else {
      std::string reason;
      ReadResult r = e.stored ? StreamStored(e, s, &xxh3, &reason) : Stream(e, s, &xxh3, &reason);
      if (r == ReadResult::kChanged) return Changed(e, reason);
      if (r == ReadResult::kUnreadable) {
        if (!write_status_.ok()) return write_status_;
        SHARDFS_RETURN_IF_ERROR(tar_->Rollback(start));
        Unreadable(e, reason);
        return Status::Ok();
      }
    }
    SHARDFS_RETURN_IF_ERROR(tar_->EndMember());
    written_[i] = true;
    report_->bytes += e.size;
    index::MemberEntry m = IndexMember(pm, e);
    if (pm.group != kNoMember && data_of_[pm.group] != kNoMember) {
      // A hard link's copy (its file's data is in an earlier shard): the
      // index keeps one inode, with the data first written.
      m.is_hardlink = true;
      m.link_target = scan_.entries[members_[data_of_[pm.group]].entry].path;
      index_->AddMember(std::move(m));
      ++report_->link_copies;
      return Status::Ok();
    }
    if (pm.group != kNoMember) data_of_[pm.group] = static_cast<uint32_t>(i);
    m.size = e.size;
    // An empty file has no data; index build records offset 0 for it too.
    m.offset = e.size ? data_offset : 0;
    m.has_checksum = true;
    m.xxh3 = xxh3;
    index_->AddMember(std::move(m));
    ++report_->files;
    return Status::Ok();
  }

  // Streams a big file into the shard. A write failure is kept in
  // write_status_ and reported as kUnreadable with it.
  ReadResult Stream(const SourceEntry& e, const SourcePrefetch::Slot& s, uint64_t* xxh3,
                    std::string* reason) {
    XXH3_64bits_reset(hash_.get());
    uint64_t pos = 0;
    const uint64_t size = e.size;
    auto write_failed = [&](Status st) {
      write_status_ = std::move(st);
      *reason = write_status_.message();
      return ReadResult::kUnreadable;
    };
    while (pos < size) {
      uint64_t data_end = size;
      if (s.sparse) {
        off_t d = ::lseek(s.fd, static_cast<off_t>(pos), SEEK_DATA);
        uint64_t data = d < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(d), size);
        if (d < 0 && errno != ENXIO) {
          *reason = fmt::format("seek at byte {}: {}", pos, std::strerror(errno));
          return ReadResult::kUnreadable;
        }
        if (data > pos) {  // A hole: zeros, not read, not written.
          HashZeros(hash_.get(), data - pos);
          Status st = tar_->AppendZeros(data - pos);
          if (!st.ok()) return write_failed(std::move(st));
          progress_->Add(0, data - pos);
          pos = data;
          continue;
        }
        off_t hole = ::lseek(s.fd, static_cast<off_t>(pos), SEEK_HOLE);
        if (hole > 0) data_end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
      }
      while (pos < data_end) {
        char* space;
        size_t len;
        Status st = tar_->DataSpace(std::min<uint64_t>(data_end - pos, kIoChunk), &space, &len);
        if (!st.ok()) return write_failed(std::move(st));
        ssize_t n = ::pread(s.fd, space, len, static_cast<off_t>(pos));
        if (n < 0) {
          if (errno == EINTR) continue;
          *reason = fmt::format("read at byte {}: {}", pos, std::strerror(errno));
          return ReadResult::kUnreadable;
        }
        if (n == 0) {
          struct stat st2;
          if (::fstat(s.fd, &st2) != 0) st2.st_size = static_cast<off_t>(pos);
          *reason = ChangedReason(e, st2);
          return ReadResult::kChanged;
        }
        XXH3_64bits_update(hash_.get(), space, static_cast<size_t>(n));
        tar_->Commit(static_cast<size_t>(n));
        pos += static_cast<uint64_t>(n);
        progress_->Add(0, static_cast<uint64_t>(n));
      }
    }
    struct stat st;
    if (::fstat(s.fd, &st) != 0) {
      *reason = fmt::format("stat: {}", std::strerror(errno));
      return ReadResult::kUnreadable;
    }
    if (static_cast<uint64_t>(st.st_size) != size || MtimeNs(st) != e.mtime_ns) {
      *reason = ChangedReason(e, st);
      return ReadResult::kChanged;
    }
    *xxh3 = XXH3_64bits_digest(hash_.get());
    return ReadResult::kOk;
  }

  // Streams a big file of an index source from its shard (s.fd), range by
  // range, zeros between, and checks the stored bytes against the index's
  // checksum (kChanged if they differ or the shard ends early).
  ReadResult StreamStored(const SourceEntry& e, const SourcePrefetch::Slot& s, uint64_t* xxh3,
                          std::string* reason) {
    const StoredData& d = *e.stored;
    const StoredShards& shards = *plan_.stored;
    XXH3_64bits_reset(hash_.get());
    XXH3_64bits_reset(stored_hash_.get());
    auto write_failed = [&](Status st) {
      write_status_ = std::move(st);
      *reason = write_status_.message();
      return ReadResult::kUnreadable;
    };
    uint64_t pos = 0;
    auto zeros_until = [&](uint64_t end) {
      if (end <= pos) return Status::Ok();
      HashZeros(hash_.get(), end - pos);
      SHARDFS_RETURN_IF_ERROR(tar_->AppendZeros(end - pos));
      progress_->Add(0, end - pos);
      pos = end;
      return Status::Ok();
    };
    for (const index::Extent& r : d.ranges) {
      if (Status st = zeros_until(r.logical); !st.ok()) return write_failed(std::move(st));
      for (uint64_t done = 0; done < r.length;) {
        char* space;
        size_t len;
        Status st = tar_->DataSpace(std::min<uint64_t>(r.length - done, kIoChunk), &space, &len);
        if (!st.ok()) return write_failed(std::move(st));
        const uint64_t at = r.physical + done;
        ssize_t n = ::pread(s.fd, space, len, static_cast<off_t>(at));
        if (n < 0) {
          if (errno == EINTR) continue;
          *reason = fmt::format("{}: read at byte {}: {}", StoredShardName(shards, d.shard), at,
                                std::strerror(errno));
          return ReadResult::kUnreadable;
        }
        if (n == 0) {
          *reason = StoredChangedReason(shards, d, fmt::format("it ends at byte {}", at));
          return ReadResult::kChanged;
        }
        XXH3_64bits_update(hash_.get(), space, static_cast<size_t>(n));
        if (d.sparse) XXH3_64bits_update(stored_hash_.get(), space, static_cast<size_t>(n));
        tar_->Commit(static_cast<size_t>(n));
        done += static_cast<uint64_t>(n);
        pos += static_cast<uint64_t>(n);
        progress_->Add(0, static_cast<uint64_t>(n));
      }
    }
    if (Status st = zeros_until(e.size); !st.ok()) return write_failed(std::move(st));
    *xxh3 = XXH3_64bits_digest(hash_.get());
    // The index hashed a sparse file's stored bytes only.
    const uint64_t stored = d.sparse ? XXH3_64bits_digest(stored_hash_.get()) : *xxh3;
    if (d.has_xxh3 && stored != d.xxh3) {
      *reason = StoredChangedReason(
          shards, d,
          fmt::format("its bytes have xxh3 {:016x}, the index says {:016x}", stored, d.xxh3));
      return ReadResult::kChanged;
    }
    return ReadResult::kOk;
  }

  const ShardPlan& plan_;
  const ShardNamePattern& pattern_;
  const std::string out_dir_;
  const TreeScan& scan_;
  const std::vector<PlannedMember>& members_;
  SourcePrefetch* const reads_;
  Progress* const progress_;
  PackReport* const report_;
  index::IndexWriter* const index_;
  std::vector<bool> written_;  // Members whose data is in a shard.
  // Hard-link groups (by first member): the member whose data the index uses.
  std::vector<uint32_t> data_of_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> stored_hash_;  // Sparse stored files.
  bool check_only_;
  const uint64_t fail_after_shards_ = FailAfterShards();
  Status write_status_;

  uint32_t shard_ = 0;
  UniqueFd fd_;
  std::string name_, path_, tmp_;
  std::unique_ptr<archive::TarWriter> tar_;
  // pack --compress: where the shard's samples start in its tar; whether
  // NAME.tmp was created; the seek points of the shard last compressed.
  std::vector<uint64_t> sample_starts_;
  bool compressed_tmp_ = false;
  index::SeekTable table_;
  std::vector<uint64_t> checksums_;  // By group: IntervalChecksum.
};

}  // namespace

Status WriteShards(const ShardPlan& plan, SourcePrefetch* prefetch, Progress* progress,
                   index::IndexWriter* index, PackReport* report) {
  ShardWriter writer(plan, prefetch, progress, index, report, /*check_only=*/false);
  return writer.Run();
}

Status CheckSources(const ShardPlan& plan, SourcePrefetch* prefetch, Progress* progress,
                    PackReport* report) {
  ShardWriter checker(plan, prefetch, progress, nullptr, report, /*check_only=*/true);
  return checker.Run();
}

void RemoveShards(PackReport* report) {
  for (const std::string& p : report->shard_paths) ::unlink(p.c_str());
  report->shard_paths.clear();
}

}  // namespace shardfs::pack
