#include "tools/pack/verify.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "base/fd.h"
#include "base/io.h"
#include "base/open_file.h"
#include "base/progress.h"
#include "base/strings.h"
#include "index/fingerprint.h"
#include "index/index_reader.h"
#include "index/member_path.h"
#include "index/walk_guard.h"
#include "src/codec/decoded_shard.h"
#include "src/codec/encoded_member.h"
#include "tools/pack/source_tree.h"

namespace shardfs::pack {
namespace {

// One entry of the packed tree, from the index or from the mount.
struct PackedEntry {
  std::string path;
  SourceKind kind = SourceKind::kFile;
  const char* special = "";
  uint32_t mode = 0;  // Permission bits.
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  uint64_t inode = 0;
  uint64_t nlink = 0;
  std::string target;
  // Index only.
  uint32_t shard = 0;
  uint64_t offset = 0;
  bool has_checksum = false;
  uint64_t xxh3 = 0;
  // A sparse file's data extents; everything else in it reads as zeros, and
  // xxh3 covers the extents' bytes only.
  bool sparse = false;
  std::vector<index::Extent> extents;
  // An encoded member (a deflated zip member): compared inflated.
  bool encoded = false;
  index::EncodedMember encoding;
};

const char* KindName(SourceKind kind, const char* special) {
  switch (kind) {
    case SourceKind::kFile:
      return "file";
    case SourceKind::kDir:
      return "dir";
    case SourceKind::kSymlink:
      return "symlink";
    default:
      return special;
  }
}

std::string TimeText(int64_t ns) {
  int64_t sec = ns / kNanosPerSecond, frac = ns % kNanosPerSecond;
  if (frac < 0) {
    frac += kNanosPerSecond;
    --sec;
  }
  return fmt::format("{}.{:09}", sec, frac);
}

Status ListIndex(const index::IndexReader& r, std::vector<PackedEntry>* out) {
  auto convert = [](std::string path, const index::EntryRecord& e) {
    PackedEntry p;
    p.path = std::move(path);
    switch (e.type) {
      case index::EntryType::kDir:
        p.kind = SourceKind::kDir;
        break;
      case index::EntryType::kSymlink:
        p.kind = SourceKind::kSymlink;
        break;
      default:
        p.kind = SourceKind::kFile;
        break;
    }
    p.mode = e.mode & 07777;
    p.uid = e.uid;
    p.gid = e.gid;
    p.mtime_ns = e.mtime_ns;
    p.size = e.size;
    p.inode = e.inode.value;
    p.nlink = e.nlink;
    p.target = std::string(e.target);
    p.shard = e.shard.value;
    p.offset = e.offset;
    p.has_checksum = e.has_checksum();
    p.xxh3 = e.xxh3;
    p.sparse = e.sparse();
    p.encoded = e.encoded();
    p.encoding = e.encoding;
    for (size_t i = 0; p.sparse && i < index::ExtentCount(e); ++i) {
      p.extents.push_back(index::GetExtent(e, i));
    }
    return p;
  };
  index::EntryRecord root;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(r.GetInode(index::kRootInode, &root, &holder));
  out->push_back(convert("", root));
  std::vector<std::pair<std::string, index::InodeId>> dirs = {{"", index::kRootInode}};
  index::WalkGuard met;  // A damaged index's loop ends the walk.
  while (!dirs.empty()) {
    std::string dir = std::move(dirs.back().first);
    index::InodeId inode = dirs.back().second;
    dirs.pop_back();
    Status looped;
    SHARDFS_RETURN_IF_ERROR(
        r.ForEachChild(inode, "", [&](std::string_view name, const index::EntryRecord& e) {
          std::string path = JoinPath(dir, name);
          if (e.type == index::EntryType::kDir) {
            looped = met.Meet(r, inode, name, e.inode);
            if (!looped.ok()) return false;
            dirs.emplace_back(path, e.inode);
          }
          out->push_back(convert(std::move(path), e));
          return true;
        }));
    SHARDFS_RETURN_IF_ERROR(looped);
  }
  std::sort(out->begin(), out->end(), [](const PackedEntry& a, const PackedEntry& b) {
    return index::TreeOrderLess(a.path, b.path);
  });
  return Status::Ok();
}

PackedEntry FromMount(SourceEntry&& e) {
  PackedEntry p;
  p.path = std::move(e.path);
  p.kind = e.kind;
  p.special = e.special;
  p.mode = e.mode & 07777;
  p.uid = e.uid;
  p.gid = e.gid;
  p.mtime_ns = e.mtime_ns;
  p.size = e.size;
  p.inode = e.ino;
  p.nlink = e.nlink;
  p.target = std::move(e.link_target);
  return p;
}

// A content comparison to run.
struct Job {
  size_t order;  // Position of the path in the merged listing.
  const SourceEntry* src;
  const PackedEntry* packed;
};

class Verifier {
 public:
  Verifier(const VerifyOptions& options, VerifyReport* report) : o_(options), report_(report) {}

  Status Run() {
    const auto start = std::chrono::steady_clock::now();
    int jobs = o_.jobs > 0 ? o_.jobs
                           : std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency()));
    TreeScanOptions so;
    so.jobs = jobs;
    so.quiet = o_.quiet;
    SHARDFS_ASSIGN_OR_RETURN(source_, ScanTree(o_.src, so));
    src_fd_.reset(::open(source_.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!src_fd_.valid()) return Status::FromErrno(errno, o_.src);

    if (!o_.mounted.empty()) {
      SHARDFS_ASSIGN_OR_RETURN(TreeScan m, ScanTree(o_.mounted, so));
      mnt_fd_.reset(::open(m.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!mnt_fd_.valid()) return Status::FromErrno(errno, o_.mounted);
      for (SourceEntry& e : m.entries) {
        if (!e.unreadable.empty())
          Add(0, "unreadable", fmt::format("{} (mount): {}", EscapePath(e.path), e.unreadable));
        packed_.push_back(FromMount(std::move(e)));
      }
    } else {
      index::ReaderOptions ro;
      ro.resolve_partition = o_.resolve_partition;
      SHARDFS_ASSIGN_OR_RETURN(reader_, index::IndexReader::Open(o_.index, ro));
      SHARDFS_RETURN_IF_ERROR(ListIndex(*reader_, &packed_));
      CheckShards();
    }
    report_->source_entries = source_.entries.size();
    report_->packed_entries = packed_.size();

    std::vector<Job> jobs_list = CompareListings();
    RunJobs(jobs_list, jobs);

    std::stable_sort(diffs_.begin(), diffs_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [order, line] : diffs_) report_->differences.push_back(std::move(line));
    report_->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Status::Ok();
  }

 private:
  void Add(size_t order, std::string_view kind, std::string detail) {
    std::lock_guard<std::mutex> lock(mu_);
    ++report_->counts[std::string(kind)];
    diffs_.emplace_back(order, fmt::format("{}: {}", kind, detail));
  }

  void CheckShards() {
    const auto& shards = reader_->shards();
    shard_fds_.resize(shards.size());
    decoded_.assign(shards.size(), false);
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string& path = reader_->ShardPath(index::ShardId{static_cast<uint32_t>(i)});
      if (shards[i].remote()) {
        Add(0, "shard differs",
            fmt::format("{}: a remote shard; verify INDEX reads local shard "
                        "files (use verify --mounted on a mount of it)",
                        RedactLocation(path)));
        continue;
      }
      // Opened as base/open_file.h does (a FIFO or a device is never
      // opened) and checked on that descriptor: size and fingerprint. A
      // shard that differs is still read: each file says how it differs.
      struct stat st;
      Result<UniqueFd> opened = OpenRegularFile(path, &st);
      if (!opened.ok()) {
        Add(0, "shard differs", opened.status().message());
        continue;
      }
      const int fd = opened->get();
      shard_fds_[i] = std::move(opened).value();
      if (Status same = index::CheckShardFile(fd, st, path, shards[i]); !same.ok()) {
        Add(0, "shard differs", same.message());
      } else if (o_.full && shards[i].codec() != index::Codec::kNone) {
        // --full reads a compressed shard through its decoded stream.
        Result<UniqueFd> dec =
            codec::DecodeShardToTemp(*reader_, index::ShardId{static_cast<uint32_t>(i)}, fd);
        if (dec.ok()) {
          shard_fds_[i] = std::move(dec).value();
          decoded_[i] = true;
        } else if (dec.status().code() != Status::Code::kNotSupported) {
          Add(0, "shard differs", dec.status().message());
        }
      }
    }
  }

  // Adds a difference for each of mode, owner, mtime, size and symlink
  // target in which `s` and `p` (the entry at `path`, of one kind) differ.
  void CompareAttributes(size_t order, const std::string& path, const SourceEntry& s,
                         const PackedEntry& p) {
    if ((s.mode & 07777) != p.mode) {
      Add(order, "mode differs", fmt::format("{}: {:04o} vs {:04o}", path, s.mode & 07777, p.mode));
    }
    if (s.uid != p.uid || s.gid != p.gid) {
      Add(order, "owner differs",
          fmt::format("{}: {}:{} vs {}:{}", path, s.uid, s.gid, p.uid, p.gid));
    }
    if (s.mtime_ns != p.mtime_ns) {
      Add(order, "mtime differs",
          fmt::format("{}: {} vs {}", path, TimeText(s.mtime_ns), TimeText(p.mtime_ns)));
    }
    if ((s.kind == SourceKind::kFile || s.kind == SourceKind::kSymlink) && s.size != p.size) {
      Add(order, "size differs", fmt::format("{}: {} vs {}", path, s.size, p.size));
    }
    if (s.kind == SourceKind::kSymlink && s.link_target != p.target) {
      Add(order, "target differs",
          fmt::format("{}: {} vs {}", path, EscapePath(s.link_target), EscapePath(p.target)));
    }
  }

  std::vector<Job> CompareListings() {
    // Hard link groups: leader = first name in tree order, and size.
    std::map<std::pair<uint64_t, uint64_t>, std::pair<std::string_view, uint64_t>> src_groups;
    for (const SourceEntry& e : source_.entries) {
      if (e.kind != SourceKind::kFile || !e.unreadable.empty()) continue;
      auto [it, fresh] = src_groups.try_emplace({e.dev, e.ino}, e.path, 0);
      ++it->second.second;
    }
    std::map<uint64_t, std::string_view> packed_leaders;
    for (const PackedEntry& p : packed_) {
      if (p.kind == SourceKind::kFile) packed_leaders.try_emplace(p.inode, p.path);
    }

    std::vector<Job> jobs;
    std::map<std::tuple<uint64_t, uint64_t, uint64_t>, bool> content_queued;
    size_t i = 0, j = 0, order = 1;
    const auto& S = source_.entries;
    while (i < S.size() || j < packed_.size()) {
      ++order;
      if (j == packed_.size() ||
          (i < S.size() && index::TreeOrderLess(S[i].path, packed_[j].path))) {
        if (!S[i].unreadable.empty()) {
          Add(order, "unreadable", fmt::format("{}: {}", EscapePath(S[i].path), S[i].unreadable));
        } else {
          Add(order, "missing", EscapePath(S[i].path));
        }
        ++i;
        continue;
      }
      if (i == S.size() || index::TreeOrderLess(packed_[j].path, S[i].path)) {
        Add(order, "extra", EscapePath(packed_[j].path));
        ++j;
        continue;
      }
      const SourceEntry& s = S[i++];
      const PackedEntry& p = packed_[j++];
      std::string path = EscapePath(s.path);
      if (!s.unreadable.empty()) {
        Add(order, "unreadable", fmt::format("{}: {}", path, s.unreadable));
        continue;
      }
      if (s.kind != p.kind) {
        Add(order, "type differs",
            fmt::format("{}: {} vs {}", path, KindName(s.kind, s.special),
                        KindName(p.kind, p.special)));
        continue;
      }
      CompareAttributes(order, path, s, p);
      if (s.kind != SourceKind::kFile) continue;
      const auto& group = src_groups.at({s.dev, s.ino});
      if (group.second != p.nlink) {
        Add(order, "nlink differs", fmt::format("{}: {} vs {}", path, group.second, p.nlink));
      } else if (group.first != packed_leaders.at(p.inode)) {
        Add(order, "hard link differs",
            fmt::format("{}: same file as {} vs same file as {}", path, EscapePath(group.first),
                        EscapePath(packed_leaders.at(p.inode))));
      }
      if (s.size != p.size) continue;
      if (content_queued.emplace(std::make_tuple(s.dev, s.ino, p.inode), true).second) {
        jobs.push_back(Job{order, &s, &p});
      }
    }
    return jobs;
  }

  void RunJobs(const std::vector<Job>& jobs, int threads) {
    uint64_t total = 0;
    for (const Job& j : jobs) total += j.src->size;
    Progress progress("verify", "files", jobs.size(), total, o_.quiet);
    std::atomic<size_t> next{0};
    auto worker = [&] {
      std::unique_ptr<char[]> a(new char[kIoChunk]), b(new char[kIoChunk]);
      for (size_t k; (k = next.fetch_add(1)) < jobs.size();) {
        Compare(jobs[k], a.get(), b.get(), &progress);
        progress.Add(1, 0);
        progress.UnitDone();
      }
    };
    std::vector<std::thread> pool;
    threads = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    progress.Stop();
    report_->files_compared = jobs.size();
    report_->bytes_compared = total;
  }

  int ShardFd(uint32_t shard) const {
    return shard < shard_fds_.size() ? shard_fds_[shard].get() : -1;
  }

  void Compare(const Job& job, char* a, char* b, Progress* progress) {
    const SourceEntry& s = *job.src;
    const PackedEntry& p = *job.packed;
    std::string path = EscapePath(s.path);
    UniqueFd src(OpenBeneath(src_fd_.get(), s.open_path(), O_RDONLY));
    if (!src.valid()) {
      Add(job.order, "unreadable", fmt::format("{}: open: {}", path, std::strerror(errno)));
      return;
    }
    bool mounted = !o_.mounted.empty();
    if (!mounted && p.sparse) {
      CompareSparse(job, src.get(), a, b, progress);
      return;
    }
    // A compressed tar shard's bytes are not the files' bytes: --full
    // compares against the checksums its decoded stream gave at build time.
    const bool encoded =
        !mounted && reader_->shards()[p.shard].codec() != index::Codec::kNone && !decoded_[p.shard];
    if (!mounted && (!o_.full || encoded) && p.has_checksum) {
      CompareChecksum(job, src.get(), path, progress);
      return;
    }
    // Byte for byte: source against the mount or the shard.
    UniqueFd mnt;
    int other = -1;
    uint64_t base = 0;
    if (!OpenPacked(job, path, &mnt, &other, &base)) return;
    // An encoded member of the shard is inflated whole (DecodeMember checks
    // its size and CRC-32) and compared in place of the shard's bytes.
    std::string member;
    const bool inflated = !mounted && p.encoded;
    if (inflated && s.size == p.size && !InflateMember(job, other, path, &member)) return;
    CompareBytes(job, path, src.get(), other, base, inflated ? &member : nullptr, a, b, progress);
  }

  // Without --full: the source file's XXH3-64 against the index's.
  void CompareChecksum(const Job& job, int src, const std::string& path, Progress* progress) {
    const SourceEntry& s = *job.src;
    const PackedEntry& p = *job.packed;
    bool short_read = false;
    Result<uint64_t> h = HashFile(src, s.size, s.path, &short_read, progress);
    if (!h.ok()) {
      Add(job.order, "unreadable", fmt::format("{}: {}", path, h.status().message()));
    } else if (short_read) {
      Add(job.order, "unreadable", fmt::format("{}: shorter than {} bytes", path, s.size));
    } else if (*h != p.xxh3) {
      Add(job.order, "content differs",
          fmt::format("{}: xxh3 {:016x} vs {:016x} (index)", path, *h, p.xxh3));
    }
  }

  // Where the packed bytes of `job` are read: the file on the mount (opened
  // into *mnt) or its shard at byte *base. Adds "unreadable" and returns
  // false if that cannot be opened.
  bool OpenPacked(const Job& job, const std::string& path, UniqueFd* mnt, int* other,
                  uint64_t* base) {
    const PackedEntry& p = *job.packed;
    if (!o_.mounted.empty()) {
      mnt->reset(OpenBeneath(mnt_fd_.get(), p.path, O_RDONLY));
      if (!mnt->valid()) {
        Add(job.order, "unreadable",
            fmt::format("{} (mount): open: {}", path, std::strerror(errno)));
        return false;
      }
      *other = mnt->get();
      return true;
    }
    *other = ShardFd(p.shard);
    *base = p.offset;
    if (*other < 0) {
      Add(job.order, "unreadable",
          fmt::format("{}: shard {} cannot be opened", path,
                      RedactLocation(reader_->ShardPath(index::ShardId{p.shard}))));
      return false;
    }
    return true;
  }

  // The encoded member of `job` read from the shard `shard_fd` and inflated
  // into *member. Adds "unreadable" and returns false on failure.
  bool InflateMember(const Job& job, int shard_fd, const std::string& path, std::string* member) {
    const PackedEntry& p = *job.packed;
    // The index's sizes are bounded before they size a buffer.
    Status r = codec::CheckMemberSizes(p.encoding, p.size);
    std::string compressed;
    if (r.ok()) {
      compressed.resize(static_cast<size_t>(p.encoding.comp_size));
      r = PreadExact(shard_fd, compressed.data(), compressed.size(), p.encoding.comp_offset);
    }
    Result<std::string> got =
        r.ok() ? codec::DecodeMember(p.encoding, compressed, p.size) : Result<std::string>(r);
    if (!got.ok()) {
      Add(job.order, "unreadable",
          fmt::format("{} (shard, member at byte {}): {}", path, p.encoding.comp_offset,
                      got.status().message()));
      return false;
    }
    *member = std::move(got).value();
    return true;
  }

  // The source's bytes against those at `base` of `other` (or, if `member`
  // is set, against it), in chunks of kIoChunk through the buffers `a` and
  // `b`; then, from a shard, the bytes' XXH3-64 against the index's.
  void CompareBytes(const Job& job, const std::string& path, int src, int other, uint64_t base,
                    const std::string* member, char* a, char* b, Progress* progress) {
    const SourceEntry& s = *job.src;
    const PackedEntry& p = *job.packed;
    const bool mounted = !o_.mounted.empty();
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(), &XXH3_freeState);
    XXH3_64bits_reset(h.get());
    for (uint64_t pos = 0; pos < s.size;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, s.size - pos));
      if (Status r = PreadExact(src, a, n, pos); !r.ok()) {
        Add(job.order, "unreadable", fmt::format("{}: {}", path, r.message()));
        return;
      }
      if (member) {
        std::memcpy(b, member->data() + pos, n);
      } else if (Status r = PreadExact(other, b, n, base + pos); !r.ok()) {
        Add(job.order, "unreadable",
            fmt::format("{} ({}): {}", path, mounted ? "mount" : "shard", r.message()));
        return;
      }
      if (std::memcmp(a, b, n) != 0) {
        size_t at = 0;
        while (a[at] == b[at]) ++at;
        Add(job.order, "content differs", fmt::format("{}: at byte {}", path, pos + at));
        return;
      }
      XXH3_64bits_update(h.get(), b, n);
      pos += n;
      progress->Add(0, n);
    }
    if (!mounted && p.has_checksum && XXH3_64bits_digest(h.get()) != p.xxh3) {
      Add(job.order, "checksum differs",
          fmt::format("{}: index says {:016x}, shard has {:016x}", path, p.xxh3,
                      XXH3_64bits_digest(h.get())));
    }
  }

  // A sparse file of the index against its source: the source's bytes at
  // each extent against the shard's (or, without --full, against the
  // index's checksum of the extents), and zeros everywhere else. Holes of
  // the source are skipped, so a file of many GiB of holes costs its data.
  void CompareSparse(const Job& job, int src, char* a, char* b, Progress* progress) {
    const SourceEntry& s = *job.src;
    const PackedEntry& p = *job.packed;
    const std::string path = EscapePath(s.path);
    const int shard = ShardFd(p.shard);
    if (o_.full && shard < 0) {
      Add(job.order, "unreadable",
          fmt::format("{}: shard {} cannot be opened", path,
                      RedactLocation(reader_->ShardPath(index::ShardId{p.shard}))));
      return;
    }
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(), &XXH3_freeState);
    XXH3_64bits_reset(h.get());
    uint64_t pos = 0;  // Logical position: everything before it compared.
    auto fail = [&](const char* kind, std::string what) {
      Add(job.order, kind, fmt::format("{}: {}", path, what));
      return false;
    };
    // Source bytes [pos, end) must be zeros.
    auto zeros_until = [&](uint64_t end) {
      while (pos < end) {
        off_t d = ::lseek(src, static_cast<off_t>(pos), SEEK_DATA);
        if (d < 0 || static_cast<uint64_t>(d) >= end) break;  // Only holes left.
        pos = static_cast<uint64_t>(d);
        size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, end - pos));
        if (Status r = PreadExact(src, a, n, pos); !r.ok()) return fail("unreadable", r.message());
        for (size_t i = 0; i < n; ++i) {
          if (a[i] != 0) return fail("content differs", fmt::format("at byte {}", pos + i));
        }
        pos += n;
        progress->Add(0, n);
      }
      pos = end;
      return true;
    };
    // Source bytes of extent `e` against the shard's (with --full) and into
    // the checksum.
    auto extent = [&](const index::Extent& e) {
      for (uint64_t done = 0; done < e.length;) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, e.length - done));
        if (Status r = PreadExact(src, a, n, e.logical + done); !r.ok()) {
          return fail("unreadable", r.message());
        }
        if (o_.full) {
          if (Status r = PreadExact(shard, b, n, e.physical + done); !r.ok()) {
            return fail("unreadable", "(shard) " + r.message());
          }
          if (std::memcmp(a, b, n) != 0) {
            size_t at = 0;
            while (a[at] == b[at]) ++at;
            return fail("content differs", fmt::format("at byte {}", e.logical + done + at));
          }
        }
        XXH3_64bits_update(h.get(), a, n);
        done += n;
        progress->Add(0, n);
      }
      pos = e.logical + e.length;
      return true;
    };
    for (const index::Extent& e : p.extents) {
      if (!zeros_until(e.logical) || !extent(e)) return;
    }
    if (!zeros_until(s.size)) return;
    if (p.has_checksum && XXH3_64bits_digest(h.get()) != p.xxh3) {
      fail(o_.full ? "checksum differs" : "content differs",
           fmt::format("xxh3 of the data extents {:016x} vs {:016x} (index)",
                       XXH3_64bits_digest(h.get()), p.xxh3));
    }
  }

  const VerifyOptions& o_;
  VerifyReport* const report_;
  TreeScan source_;
  UniqueFd src_fd_;
  UniqueFd mnt_fd_;
  std::unique_ptr<index::IndexReader> reader_;
  std::vector<PackedEntry> packed_;
  std::vector<UniqueFd> shard_fds_;  // Opened before the jobs start; read-only after.
  std::vector<bool> decoded_;        // By shard: shard_fds_ holds its decoded stream.

  std::mutex mu_;
  std::vector<std::pair<size_t, std::string>> diffs_;  // Guarded by mu_.
};

}  // namespace

std::string EscapePath(std::string_view path) {
  if (path.empty()) return ".";
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Status Verify(const VerifyOptions& options, VerifyReport* report) {
  *report = VerifyReport{};
  if (options.index.empty() == options.mounted.empty()) {
    return Status::InvalidArgument("give either an index or --mounted MOUNTPOINT");
  }
  Verifier v(options, report);
  return v.Run();
}

}  // namespace shardfs::pack
