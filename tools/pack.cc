#include "tools/pack.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <thread>

#include "base/fd.h"
#include "base/paths.h"
#include "base/temp_dirs.h"
#include "index/index_files.h"
#include "tools/output_dir.h"
#include "tools/pack_from_index.h"
#include "tools/pack_plan.h"
#include "tools/shard_name.h"
#include "tools/shard_writer.h"
#include "tools/source_prefetch.h"
#include "tools/source_tree.h"
#include "tools/tar_writer.h"

namespace shardfs::tools {
namespace fs = std::filesystem;
namespace {

// Where a pack reads and writes, resolved and checked.
struct PackPaths {
  std::string src_real;
  std::string out_real;
  std::string out_shown;   // --out as given, with a trailing '/': how messages name it.
  std::string index_path;  // out_real + "/index".
};

// The source must be a directory; neither of the source and the output may
// hold the other (an index source: see RefuseOverwritingSource).
Result<PackPaths> ResolvePaths(const PackOptions& options) {
  PackPaths p;
  if (options.from_index.empty()) {
    char* rp = ::realpath(options.src.c_str(), nullptr);
    if (!rp) return Status::FromErrno(errno, fmt::format("source {}", options.src));
    p.src_real = rp;
    std::free(rp);
    struct stat st;
    if (::stat(p.src_real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument(fmt::format("source {}: not a directory", options.src));
    }
  }
  Result<std::string> out_real = ResolvePath(options.out);
  if (!out_real.ok()) return out_real.status().WithContext("output");
  p.out_real = std::move(out_real).value();
  if (!p.src_real.empty() && PathWithin(p.out_real, p.src_real)) {
    return Status::InvalidArgument(
        fmt::format("output {} lies inside the source {}: the pack would read its own shards",
                    options.out, options.src));
  }
  if (!p.src_real.empty() && PathWithin(p.src_real, p.out_real)) {
    return Status::InvalidArgument(
        fmt::format("output {} contains the source {}: choose an --out outside the source",
                    options.out, options.src));
  }
  p.out_shown = options.out + (options.out.ends_with('/') ? "" : "/");
  p.index_path = p.out_real + "/index";
  return p;
}

// An index source's own index, or a shard of it, must not be a file this
// pack could write or (with --force) remove.
Status RefuseOverwritingSource(const IndexSource& src, const PackPaths& paths,
                               const ShardNamePattern& pattern, bool force) {
  if (src.index_real == paths.index_path) {
    return Status::InvalidArgument(
        fmt::format("output {}index is the source index", paths.out_shown));
  }
  for (size_t i = 0; i < src.shards.paths.size(); ++i) {
    char* rp = ::realpath(src.shards.paths[i].c_str(), nullptr);
    if (!rp) continue;  // Not used by the view (used ones are open).
    fs::path real = rp;
    std::free(rp);
    if (real.parent_path() == paths.out_real &&
        (force || pattern.Matches(real.filename().string(), true))) {
      return Status::InvalidArgument(fmt::format(
          "output {} would overwrite the source shard {}: choose another --out or --name",
          paths.out_shown, src.shards.paths[i]));
    }
  }
  return Status::Ok();
}

// Nothing but what this run writes is replaced or removed without --force:
// an existing index, or a shard name taken by any file (an interrupted
// pack's too), stops the pack before anything is written. With --force,
// anything in OUT_DIR that no pack wrote stops it; `earlier` gets what an
// earlier pack left there, to be replaced.
Status RefuseExisting(const PackOptions& options, const PackPaths& paths,
                      const ShardNamePattern& pattern, PackReport* report,
                      std::vector<std::string>* earlier) {
  if (options.force) {
    SHARDFS_ASSIGN_OR_RETURN(*earlier, ListEarlierOutput(paths.out_real, pattern, paths.out_shown));
    if (earlier->empty()) return Status::Ok();
    // The new output is written beside the old one and exchanged with it:
    // both must be on one filesystem.
    struct stat out_st, parent_st;
    const std::string parent = fs::path(paths.out_real).parent_path().string();
    if (::stat(paths.out_real.c_str(), &out_st) != 0) {
      return Status::FromErrno(errno, options.out);
    }
    if (::stat(parent.c_str(), &parent_st) != 0) return Status::FromErrno(errno, parent);
    if (out_st.st_dev != parent_st.st_dev) {
      return Status::InvalidArgument(fmt::format(
          "{}: a mount point; pack --force writes the new output beside the old one in {} and "
          "swaps the two, which cannot cross filesystems (remove the old output yourself, or "
          "pack into a subdirectory)",
          options.out, parent));
    }
    return Status::Ok();
  }
  std::error_code ec;
  if (fs::exists(fs::symlink_status(paths.index_path, ec))) {
    return Status::AlreadyExists(
        fmt::format("{}: already exists (use --force to pack again)", report->index_path));
  }
  return RefuseLeftovers(paths.out_real, pattern, paths.out_shown, &report->warnings);
}

// Where this run writes: OUT_DIR itself, created if missing; with --force
// over an earlier output, a fresh OUT_DIR.tmp-HOST-PID-* beside it (removed with
// this object unless ReplaceOutput swapped it in), so that a failed pack
// leaves the earlier output whole.
class OutputDir {
 public:
  ~OutputDir() {
    std::error_code ec;
    if (!fresh_.empty()) fs::remove_all(fresh_, ec);  // Only what this run created.
  }

  Status Prepare(const PackOptions& options, const PackPaths& paths,
                 const ShardNamePattern& pattern, bool replace) {
    if (!replace) {
      if (!options.force) {
        // Checked again: the scan took a while.
        SHARDFS_RETURN_IF_ERROR(RefuseLeftovers(paths.out_real, pattern, paths.out_shown, nullptr));
      }
      std::error_code ec;
      fs::create_directories(paths.out_real, ec);
      if (ec) return Status::IoError(fmt::format("create {}: {}", options.out, ec.message()));
      dir_ = paths.out_real;
      return Status::Ok();
    }
    struct stat st;
    if (::stat(paths.out_real.c_str(), &st) != 0) return Status::FromErrno(errno, options.out);
    std::string fresh = TempPathBeside(paths.out_real);
    if (::mkdir(fresh.c_str(), st.st_mode & 07777) != 0) {
      return Status::FromErrno(errno, fmt::format("create {}", fresh));
    }
    ::chmod(fresh.c_str(), st.st_mode & 07777);  // As the old one, whatever the umask.
    fresh_ = dir_ = std::move(fresh);
    return Status::Ok();
  }

  // Where shards and the index go.
  const std::string& dir() const { return dir_; }

  // --force over an earlier output: puts the complete new output in its
  // place in one step (ReplaceDirectory), then removes the old one, which
  // held only what a pack writes (checked again now). Shard paths in
  // `report` name the new place.
  Status ReplaceOutput(const PackPaths& paths, const ShardNamePattern& pattern,
                       PackReport* report) {
    if (fresh_.empty()) return Status::Ok();
    SHARDFS_ASSIGN_OR_RETURN(const std::vector<std::string> earlier,
                             ListEarlierOutput(paths.out_real, pattern, paths.out_shown));
    SHARDFS_ASSIGN_OR_RETURN(const Replaced r, ReplaceDirectory(fresh_, paths.out_real));
    const std::string parent = fs::path(paths.out_real).parent_path().string();
    fresh_.clear();
    for (std::string& p : report->shard_paths) p = paths.out_real + p.substr(dir_.size());
    dir_ = paths.out_real;
    if (!r.old_path.empty()) {
      if (Status s = RemoveEarlierOutput(r.old_path, earlier); !s.ok()) {
        report->warnings.push_back(s.message());
      }
    }
    return SyncPath(parent);
  }

 private:
  std::string dir_;
  std::string fresh_;
};

Result<TreeScan> Scan(const PackOptions& options, const std::string& src_real, int jobs) {
  TreeScanOptions so;
  so.excludes = options.excludes;
  so.from_list = options.from_list;
  so.follow_symlinks = options.follow_symlinks;
  so.jobs = jobs;
  so.quiet = options.quiet;
  return ScanTree(src_real, so);
}

// The pack has failed already: open every file (writing nothing) so that
// the unreadable ones are listed too, not only what the scan found.
Status ListUnreadable(const ShardPlan& plan, std::vector<PlannedMember>* members, int root_fd,
                      int jobs, PackReport* report) {
  ReadPlan reads = PlanReads(*plan.scan, members);
  SourcePrefetch prefetch(plan.scan->entries, std::move(reads.entries), root_fd);
  Progress progress("pack: check", "shards", 0, 0, true);
  prefetch.Start(jobs);
  Status s = CheckSources(plan, &prefetch, &progress, report);
  prefetch.Stop();
  return s.ok() ? Status::InvalidArgument("cannot pack") : s;
}

// Publishes the index, last; removes this run's shards if that fails.
Status PublishIndex(const PackOptions& options, const std::string& index_path,
                    index::IndexWriter* index, PackReport* report) {
  index::WriteOptions wo;
  wo.force = options.force;
  wo.created_by = "shardfs pack";
  const std::string compress = options.compress == index::Codec::kNone
                                   ? ""
                                   : fmt::format(" compress={} compress_level={} group_bytes={}",
                                                 index::CodecName(options.compress),
                                                 options.compress_level, options.group_bytes);
  wo.build_options =
      !options.from_index.empty()
          ? fmt::format("checksum=xxh3 shard_size={} max_files={} name={} from_index=yes view={}",
                        options.shard_size, options.max_files, options.name,
                        options.view.empty() ? "default" : options.view)
          : fmt::format(
                "checksum=xxh3 shard_size={} max_files={} name={} excludes={} from_list={} "
                "skip_unreadable={} skip_special={} follow_symlinks={}",
                options.shard_size, options.max_files, options.name,
                fmt::join(options.excludes, ","), options.from_list.empty() ? "no" : "yes",
                options.skip_unreadable, options.skip_special, options.follow_symlinks);
  wo.build_options += compress;
  Result<index::WriteStats> stats = index->Finish(index_path, wo);
  if (!stats.ok()) {
    RemoveShards(report);
    return stats.status();
  }
  report->index_stats = std::move(stats).value();
  return Status::Ok();
}

// An index source: the published index and shards against the source view;
// on a difference (or if the check cannot be made) both are removed.
Status CheckAgainstSource(const IndexSource& from, const std::string& index_path, int jobs,
                          PackReport* report) {
  Status s = VerifyPacked(from, index_path, jobs, &report->errors);
  if (s.ok() && report->errors.empty()) return Status::Ok();
  (void)index::RemoveOwnFiles(index_path, index::DirKind::kIndex);  // This run's own index.
  RemoveShards(report);
  if (!s.ok()) return s.WithContext("checking the packed index");
  return Status::Corruption(
      fmt::format("the packed tree differs from the source in {} place(s)", report->errors.size()));
}

// Pack with `options` checked and completed (--compress: the shard name's
// extension, the level).
Status PackChecked(const PackOptions& options, PackReport* report) {
  const auto start = std::chrono::steady_clock::now();
  SHARDFS_ASSIGN_OR_RETURN(ShardNamePattern pattern, ParseShardName(options.name));
  if (options.shard_size < kTarBlock + kTarTrailer) {
    return Status::InvalidArgument("--shard-size must be at least 1536 bytes");
  }
  SHARDFS_ASSIGN_OR_RETURN(const PackPaths paths, ResolvePaths(options));
  report->index_path = paths.out_shown + "index";
  std::vector<std::string> earlier;  // With --force: an earlier output to replace.
  SHARDFS_RETURN_IF_ERROR(RefuseExisting(options, paths, pattern, report, &earlier));
  const int jobs = options.jobs > 0
                       ? options.jobs
                       : std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency()));

  // 1. Scan (or list the index); 2. members in pack order, what is left
  // out, hard links.
  std::unique_ptr<IndexSource> from;
  TreeScan loose;
  if (!options.from_index.empty()) {
    SHARDFS_ASSIGN_OR_RETURN(
        from, OpenIndexSource(options.from_index, options.view, options.resolve_partition));
    SHARDFS_RETURN_IF_ERROR(RefuseOverwritingSource(*from, paths, pattern, options.force));
  } else {
    SHARDFS_ASSIGN_OR_RETURN(loose, Scan(options, paths.src_real, jobs));
  }
  const TreeScan& scan = from ? from->scan : loose;
  report->warnings.insert(report->warnings.end(), scan.warnings.begin(), scan.warnings.end());
  std::vector<PlannedMember> members = PlanMembers(scan, options, report);
  WarnUngroupable(scan, members, &report->warnings);

  UniqueFd root;
  if (!from) {
    root.reset(::open(paths.src_real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return Status::FromErrno(errno, options.src);
  }
  ShardPlan plan;
  plan.scan = &scan;
  plan.members = &members;
  plan.pattern = pattern;
  plan.skip_unreadable = options.skip_unreadable;
  plan.compress.codec = options.compress;
  plan.compress.level = options.compress_level;
  plan.compress.group_bytes = options.group_bytes;
  if (from) plan.stored = &from->shards;
  if (!report->errors.empty() && from) return Status::InvalidArgument("cannot pack");
  if (!report->errors.empty()) return ListUnreadable(plan, &members, root.get(), jobs, report);

  // 3. Shards; 4. the output directory; 5. read and write; 6. the index.
  const uint32_t shard_total = CutShards(scan, options.shard_size, options.max_files, &members);
  ReadPlan reads = PlanReads(scan, &members);
  OutputDir out;
  SHARDFS_RETURN_IF_ERROR(out.Prepare(options, paths, pattern, !earlier.empty()));
  plan.out_dir = out.dir();
  const std::string index_path = out.dir() + "/index";
  auto prefetch =
      from ? std::make_unique<SourcePrefetch>(scan.entries, std::move(reads.entries), &from->shards)
           : std::make_unique<SourcePrefetch>(scan.entries, std::move(reads.entries), root.get());
  Progress progress("pack", "shards", shard_total, reads.bytes, options.quiet);
  index::IndexWriter index;
  prefetch->Start(jobs);
  Status s = WriteShards(plan, prefetch.get(), &progress, &index, report);
  prefetch->Stop();
  progress.Stop();
  SHARDFS_RETURN_IF_ERROR(s);
  SHARDFS_RETURN_IF_ERROR(PublishIndex(options, index_path, &index, report));
  if (from) SHARDFS_RETURN_IF_ERROR(CheckAgainstSource(*from, index_path, jobs, report));
  SHARDFS_RETURN_IF_ERROR(out.ReplaceOutput(paths, pattern, report));
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace

Status Pack(const PackOptions& options, PackReport* report) {
  *report = PackReport{};
  if (options.compress == index::Codec::kNone) return PackChecked(options, report);
  PackOptions o = options;
  if (o.compress_level < 0) o.compress_level = DefaultCompressLevel(o.compress);
  GroupCompression c{o.compress, o.compress_level, o.group_bytes};
  SHARDFS_RETURN_IF_ERROR(CheckGroupCompression(c));
  // Shard names get the codec's extension (train-000000.tar.zst) unless --name has it.
  const std::string ext = o.compress == index::Codec::kZstd ? ".zst" : ".gz";
  if (!o.name.ends_with(ext)) o.name += ext;
  return PackChecked(o, report);
}

}  // namespace shardfs::tools
