#include "tools/pack/pack.h"

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
#include "base/log.h"
#include "base/paths.h"
#include "base/storage.h"
#include "base/strings.h"
#include "base/temp_dirs.h"
#include "index/index_files.h"
#include "src/archive/tar_writer.h"
#include "tools/builder/view_export.h"  // WriteFileAtomically
#include "tools/pack/output_dir.h"
#include "tools/pack/pack_from_index.h"
#include "tools/pack/pack_part.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/shard_name.h"
#include "tools/pack/shard_writer.h"
#include "tools/pack/source_prefetch.h"
#include "tools/pack/source_tree.h"
#include "tools/pack/verify.h"  // EscapePath

namespace shardfs::pack {
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
    SHARDFS_ASSIGN_OR_RETURN(*earlier, ListEarlierOutput(paths.out_real, paths.out_shown));
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

// The hidden name a part's temporary directories are made beside
// (TempPathBeside): OUT_DIR/.part-K.
std::string PartTempBase(const std::string& part_out) {
  const fs::path p(part_out);
  return (p.parent_path() / ("." + p.filename().string())).string();
}

// Where this run writes: OUT_DIR itself, created if missing; with --force
// over an earlier output, a fresh OUT_DIR.tmp-HOST-PID-* beside it (removed with
// this object unless ReplaceOutput swapped it in), so that a failed pack
// leaves the earlier output whole.
class OutputDir {
 public:
  ~OutputDir() {
    (void)DropRecord();  // Left only if the pack failed (and removed its shards).
    std::error_code ec;
    if (!fresh_.empty()) fs::remove_all(fresh_, ec);  // Only what this run created.
    if (registered_) ForgetTempDir(fresh_);
  }

  Status Prepare(const PackOptions& options, const PackPaths& paths,
                 const ShardNamePattern& pattern, bool replace) {
    if (options.part.count > 0) return PreparePart(paths, replace);
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

  // Records the names of the `shards` shards this run is about to write in
  // dir() (kPackRecordName, tools/pack/output_dir.h) until the index is published:
  // a pack killed before then leaves the record with its shards, so that a
  // --force re-run knows them for its own.
  Status RecordShards(const ShardNamePattern& pattern, uint32_t shards) {
    std::vector<std::string> names;
    names.reserve(shards);
    for (uint32_t i = 0; i < shards; ++i) names.push_back(pattern.Format(i));
    SHARDFS_RETURN_IF_ERROR(WritePackRecord(dir_, names));
    recorded_ = true;
    return Status::Ok();
  }

  // The index is published: removes this run's record; then, --force over
  // an earlier output, puts the complete new output in its place in one
  // step (ReplaceDirectory) and removes the old one, which held only what a
  // pack writes (checked again now). Shard paths in `report` name the new
  // place.
  Status ReplaceOutput(const PackPaths& paths, PackReport* report) {
    if (Status s = DropRecord(); !s.ok()) report->warnings.push_back(s.message());
    if (fresh_.empty()) return Status::Ok();
    if (registered_) {
      ForgetTempDir(fresh_);  // Before it is renamed into place.
      registered_ = false;
    }
    if (part_ && !replace_) return PublishPart(paths, report);
    SHARDFS_ASSIGN_OR_RETURN(const std::vector<std::string> earlier,
                             ListEarlierOutput(paths.out_real, paths.out_shown));
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
  // Removes this run's record, if any.
  Status DropRecord() {
    if (!recorded_) return Status::Ok();
    recorded_ = false;
    return RemovePackRecord(dir_);
  }

  // --part: always a fresh hidden directory (base/temp_dirs.h names,
  // removed if a signal ends the pack), made beside OUT_DIR/part-K inside
  // OUT_DIR, so that no glob of the parts (part-*) takes an unfinished one.
  Status PreparePart(const PackPaths& paths, bool replace) {
    const fs::path out(paths.out_real);
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (ec) {
      return Status::IoError(
          fmt::format("create {}: {}", out.parent_path().string(), ec.message()));
    }
    part_ = true;
    replace_ = replace;
    std::string fresh = TempPathBeside(PartTempBase(paths.out_real));
    SHARDFS_RETURN_IF_ERROR(MakeTempDir(fresh));
    registered_ = true;
    fresh_ = dir_ = std::move(fresh);
    return Status::Ok();
  }

  // Renames the complete part to OUT_DIR/part-K, which must be missing or
  // an empty directory, and never over one that appeared meanwhile (another
  // task packing the same part).
  Status PublishPart(const PackPaths& paths, PackReport* report) {
    if (IsEmptyDirectory(paths.out_real)) ::rmdir(paths.out_real.c_str());
    if (Status s = RenameToMissing(fresh_, paths.out_real); !s.ok()) {
      struct stat st;
      if (::lstat(paths.out_real.c_str(), &st) == 0) {
        return Status::AlreadyExists(fmt::format(
            "{}: appeared while this pack ran (another task packing the same part?); this "
            "run's output is removed (use --force to replace it)",
            paths.out_shown));
      }
      return s;
    }
    for (std::string& p : report->shard_paths) p = paths.out_real + p.substr(dir_.size());
    fresh_.clear();
    dir_ = paths.out_real;
    return SyncPath(fs::path(paths.out_real).parent_path().string());
  }

  std::string dir_;
  std::string fresh_;
  bool registered_ = false;  // fresh_ is registered for removal on a signal.
  bool recorded_ = false;    // dir_ holds this run's kPackRecordName.
  bool part_ = false;
  bool replace_ = false;  // --part --force over an earlier part.
};

// With --part: only the part's entries (see tools/pack/pack_part.h), and
// report->part says what it took.
Result<TreeScan> Scan(const PackOptions& options, const std::string& src_real, int jobs,
                      PackReport* report) {
  TreeScanOptions so;
  so.excludes = options.excludes;
  so.from_list = options.from_list;
  so.follow_symlinks = options.follow_symlinks;
  so.jobs = jobs;
  so.quiet = options.quiet;
  if (options.part.count == 0) return ScanTree(src_real, so);
  if (!options.from_list.empty()) {
    SHARDFS_ASSIGN_OR_RETURN(std::vector<std::string> listed, ReadPathList(options.from_list));
    const std::vector<std::string> mine = TakeListPart(listed, options.part, &report->part);
    so.only = &mine;
    SHARDFS_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(src_real, so));
    scan.listed = std::move(listed);  // The order of the part's samples.
    return scan;
  }
  SHARDFS_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(src_real, so));
  TakeScanPart(&scan, options.part, options.follow_symlinks, &report->part);
  return scan;
}

// --part: what a killed task of the same part left (its hidden temporary
// directory, made on this host by a process that is gone) is removed, if it
// holds only what a pack writes; others are named in a warning.
void RemoveStalePartDirs(const PackPaths& paths, PackReport* report) {
  const fs::path base(PartTempBase(paths.out_real));
  const std::string base_name = base.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(base.parent_path(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<TempDirMaker> maker = ParseTempDirName(name, base_name);
    if (!maker) continue;
    const std::string dir = it->path().string();
    pid_t pid = 0;
    if (!index::IsStaleBuildDirName(name, base_name, &pid)) {
      if (maker->host == TempHostName() && maker->pid == ::getpid()) continue;
      report->warnings.push_back(fmt::format(
          "{}: left by process {} on host {}, which may still be packing this part; kept", dir,
          maker->pid, maker->host));
      continue;
    }
    Result<std::vector<std::string>> names = ListEarlierOutput(dir, dir + "/");
    Status s = names.ok() ? RemoveEarlierOutput(dir, *names) : names.status();
    report->warnings.push_back(
        s.ok()
            ? fmt::format("{}: removed: left by process {} of this host, which is gone", dir, pid)
            : fmt::format("{}: left by process {} of this host, which is gone; kept: {}", dir, pid,
                          s.message()));
  }
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
  wo.created_by = kPackCreatedBy;
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
  wo.build_options += options.shuffle ? fmt::format(" shuffle={}", options.shuffle_seed)
                                      : std::string(" shuffle=no");
  if (options.part.count > 0) {
    wo.partition = fmt::format("{}/{}", options.part.index, options.part.count);
    wo.partition_shards = report->part.units;
    wo.build_options += fmt::format(" part={} from_list={}", wo.partition,
                                    options.from_list.empty() ? "no" : "yes");
  }
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
// How the tree at `src` is read (ChooseSourceReading), its storage told by
// statfs; an index source ("") is read as local files.
SourceReading PackReading(int jobs, const std::string& src) {
  Result<StorageInfo> info = src.empty() ? Result<StorageInfo>(StorageInfo{}) : DetectStorage(src);
  const SourceReading r =
      ChooseSourceReading(jobs, std::thread::hardware_concurrency(), info.ok() ? &*info : nullptr);
  if (info.ok() && info->network) {
    log::Info("source {} on network storage ({}): {} files read at once{}", src, info->fstype,
              r.jobs, r.direct ? ", small files with O_DIRECT" : "");
  }
  return r;
}

Status PackChecked(const PackOptions& options, PackReport* report) {
  const auto start = std::chrono::steady_clock::now();
  SHARDFS_ASSIGN_OR_RETURN(ShardNamePattern pattern, ParseShardName(options.name));
  if (options.shard_size < archive::kTarBlock + archive::kTarTrailer) {
    return Status::InvalidArgument("--shard-size must be at least 1536 bytes");
  }
  SHARDFS_ASSIGN_OR_RETURN(const PackPaths paths, ResolvePaths(options));
  report->index_path = paths.out_shown + "index";
  // 1. List the index source (before the output is judged: that the output
  // would overwrite the source says more than who made what it holds) or,
  // below, scan the tree; 2. members in pack order, what is left out, hard
  // links.
  std::unique_ptr<IndexSource> from;
  if (!options.from_index.empty()) {
    SHARDFS_ASSIGN_OR_RETURN(
        from, OpenIndexSource(options.from_index, options.view, options.resolve_partition));
    SHARDFS_RETURN_IF_ERROR(RefuseOverwritingSource(*from, paths, pattern, options.force));
  }
  std::vector<std::string> earlier;  // With --force: an earlier output to replace.
  SHARDFS_RETURN_IF_ERROR(RefuseExisting(options, paths, pattern, report, &earlier));
  const SourceReading reading = PackReading(options.jobs, from ? "" : paths.src_real);
  const int jobs = reading.jobs;

  TreeScan loose;
  if (!from) {
    if (options.part.count > 0) RemoveStalePartDirs(paths, report);
    SHARDFS_ASSIGN_OR_RETURN(loose, Scan(options, paths.src_real, jobs, report));
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
  SHARDFS_RETURN_IF_ERROR(out.RecordShards(pattern, shard_total));
  plan.out_dir = out.dir();
  const std::string index_path = out.dir() + "/index";
  auto prefetch =
      from ? std::make_unique<SourcePrefetch>(scan.entries, std::move(reads.entries), &from->shards)
           : std::make_unique<SourcePrefetch>(scan.entries, std::move(reads.entries), root.get());
  Progress progress("pack", "shards", shard_total, reads.bytes, options.quiet);
  index::IndexWriter index;
  if (reading.direct) prefetch->ReadDirect();
  prefetch->Start(jobs);
  Status s = WriteShards(plan, prefetch.get(), &progress, &index, report);
  prefetch->Stop();
  progress.Stop();
  SHARDFS_RETURN_IF_ERROR(s);
  SHARDFS_RETURN_IF_ERROR(PublishIndex(options, index_path, &index, report));
  if (from) SHARDFS_RETURN_IF_ERROR(CheckAgainstSource(*from, index_path, jobs, report));
  SHARDFS_RETURN_IF_ERROR(out.ReplaceOutput(paths, report));
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace

Status Pack(const PackOptions& options, PackReport* report) {
  *report = PackReport{};
  PackOptions o = options;
  if (o.part.count > 0) {
    if (!o.from_index.empty()) {
      return Status::InvalidArgument("--part packs a part of a tree, not of --from-index");
    }
    if (o.part.index >= o.part.count) {
      return Status::InvalidArgument(
          fmt::format("--part {}/{}: K must be below N", o.part.index, o.part.count));
    }
    o.out = JoinPath(o.out, PartDirName(o.part));
  }
  if (o.compress == index::Codec::kNone) return PackChecked(o, report);
  if (o.compress_level < 0) o.compress_level = DefaultCompressLevel(o.compress);
  GroupCompression c{o.compress, o.compress_level, o.group_bytes};
  SHARDFS_RETURN_IF_ERROR(CheckGroupCompression(c));
  // Shard names get the codec's extension (train-000000.tar.zst) unless --name has it.
  const std::string ext = o.compress == index::Codec::kZstd ? ".zst" : ".gz";
  if (!o.name.ends_with(ext)) o.name += ext;
  return PackChecked(o, report);
}

Status ListSource(const PackOptions& options, PackReport* report) {
  *report = PackReport{};
  const auto start = std::chrono::steady_clock::now();
  TreeScanOptions so;
  so.excludes = options.excludes;
  so.follow_symlinks = options.follow_symlinks;
  so.jobs = PackReading(options.jobs, options.src).jobs;
  so.quiet = options.quiet;
  SHARDFS_ASSIGN_OR_RETURN(const TreeScan scan, ScanTree(options.src, so));
  report->warnings = scan.warnings;
  std::string text;
  for (uint32_t i : SourceLeaves(scan)) {
    const std::string& path = scan.entries[i].path;
    if (path.find('\n') != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "{}: a name with a newline cannot be a line of a list (pack it without --from-list)",
          EscapePath(path)));
    }
    text += path;
    text += '\n';
    ++report->listed;
  }
  SHARDFS_RETURN_IF_ERROR(
      builder::WriteFileAtomically(options.list_only, text).WithContext(options.list_only));
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace shardfs::pack
