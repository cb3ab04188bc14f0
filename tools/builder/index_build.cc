#include "tools/builder/index_build.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <set>
#include <thread>

#include "base/file_kind.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/paths.h"
#include "base/progress.h"
#include "base/storage.h"
#include "base/strings.h"
#include "index/bounded_build.h"
#include "index/index_files.h"
#include "index/index_publish.h"  // AbsoluteIndexPath
#include "src/archive/ctar_scanner.h"
#include "tools/builder/remote_shards.h"
#include "tools/builder/shard_scan.h"

namespace shardfs::builder {
namespace fs = std::filesystem;
namespace {

// A directory contributes its archives: *.tar, *.zip, and compressed tars by
// their usual names (what each holds is then told by its magic).
bool IsShardName(const std::string& name) {
  for (const char* ext : {".tar", ".zip", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst",
                          ".tar.xz", ".txz", ".tar.bz2", ".tbz2"}) {
    if (name.ends_with(ext)) return true;
  }
  return false;
}

bool HasGlobChars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

Status ExpandOne(const std::string& input, const RemoteLimits& limits,
                 std::vector<std::string>* out) {
  if (IsRemoteInput(input)) return ExpandRemoteInput(input, limits, out);
  struct stat st;
  if (::stat(input.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      out->push_back(input);
      return Status::Ok();
    }
    std::vector<std::string> found;
    std::error_code ec;
    for (fs::directory_iterator d(input, ec); !ec && d != fs::directory_iterator();
         d.increment(ec)) {
      std::error_code type_ec;
      if (IsShardName(d->path().filename().string()) && d->is_regular_file(type_ec)) {
        found.push_back(d->path());
      }
    }
    if (ec) return Status::IoError(fmt::format("{}: {}", input, ec.message()));
    if (found.empty()) {
      return Status::InvalidArgument(
          fmt::format("{}: directory has no *.tar or *.zip files", input));
    }
    std::sort(found.begin(), found.end());
    out->insert(out->end(), found.begin(), found.end());
    return Status::Ok();
  }
  if (HasGlobChars(input)) {
    glob_t g{};
    int rc = ::glob(input.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out->push_back(g.gl_pathv[i]);  // Sorted by glob.
    }
    ::globfree(&g);
    if (rc == 0) return Status::Ok();
    return Status::InvalidArgument(fmt::format("{}: pattern matches no file", input));
  }
  return Status::FromErrno(errno, input);
}

}  // namespace

Status ParseShardPart(std::string_view text, ShardPart* part) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("--part {}: expected K/N, part K (0-based) of N, such as 0/4", text));
  }
  const std::string_view k = text.substr(0, slash), n = text.substr(slash + 1);
  if (k.empty()) {
    return Status::InvalidArgument(
        fmt::format("--part {}: no part number before the '/' (an unset variable in "
                    "`--part $VAR/N` leaves none)",
                    text));
  }
  const std::optional<uint64_t> kv = ParseDecimal(k), nv = ParseDecimal(n);
  if (!kv || !nv) {
    return Status::InvalidArgument(
        fmt::format("--part {}: expected K/N in decimal digits, such as 0/4", text));
  }
  if (*nv == 0)
    return Status::InvalidArgument(fmt::format("--part {}: N must be at least 1", text));
  if (*nv > kMaxShardParts) {
    return Status::InvalidArgument(fmt::format(
        "--part {}: N must be at most {} (shard ids are 32-bit)", text, kMaxShardParts));
  }
  if (*kv >= *nv) {
    return Status::InvalidArgument(
        fmt::format("--part {}: K must be below N (parts are numbered 0 to {})", text, *nv - 1));
  }
  part->index = *kv;
  part->count = *nv;
  return Status::Ok();
}

std::pair<uint64_t, uint64_t> ShardPartRange(uint64_t n, const ShardPart& part) {
  // floor(k*n/N) as k*(n/N) + floor(k*(n%N)/N): no product overflows, as k
  // and n%N are below N <= 2^32.
  const uint64_t q = n / part.count, r = n % part.count;
  auto bound = [&](uint64_t k) { return k * q + k * r / part.count; };
  return {bound(part.index), bound(part.index + 1)};
}

Result<std::vector<std::string>> ExpandShardInputs(const std::vector<std::string>& inputs,
                                                   const std::string& from_list,
                                                   const std::string& url_prefix,
                                                   const RemoteLimits& limits) {
  std::vector<std::string> all = inputs;
  if (!url_prefix.empty() && from_list.empty()) {
    return Status::InvalidArgument("--url-prefix names the shards of a --from-list file");
  }
  if (!url_prefix.empty() && !IsRemoteInput(url_prefix)) {
    return Status::InvalidArgument(
        fmt::format("--url-prefix {}: expected an http://, https:// or s3:// URL", url_prefix));
  }
  if (!from_list.empty()) {
    std::ifstream in(from_list);
    if (!in) return Status::FromErrno(errno, fmt::format("--from-list {}", from_list));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (!url_prefix.empty() && !IsRemoteInput(line)) {
        // Names relative to the prefix, "/" between them once.
        std::string_view name = line;
        while (name.starts_with("/")) name.remove_prefix(1);
        line = url_prefix + (url_prefix.ends_with("/") ? "" : "/") + std::string(name);
      }
      all.push_back(line);
    }
  }
  std::vector<std::string> out;
  for (const std::string& input : all) SHARDFS_RETURN_IF_ERROR(ExpandOne(input, limits, &out));
  if (out.empty()) return Status::InvalidArgument("no shards given");
  return out;
}

namespace {

// Before any scan: a shard that is not a regular file fails the build at
// once (stat does not open, so a FIFO cannot block here; ScanTar checks
// again on the descriptor it reads). Adds up the shards' bytes.
Status CheckShardFiles(const std::vector<std::string>& shards, uint64_t* bytes) {
  for (const std::string& s : shards) {
    if (IsRemoteInput(s)) continue;  // Its size is known once it is read.
    struct stat st;
    if (::stat(s.c_str(), &st) != 0) return Status::FromErrno(errno, fmt::format("shard {}", s));
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(
          fmt::format("shard {}: {}, expected a regular file", s, FileKind(st.st_mode)));
    }
    *bytes += static_cast<uint64_t>(st.st_size);
  }
  return Status::Ok();
}

// Scans every shard with `jobs` threads; stops handing out shards after the
// first failure, which it returns.
// Shard i gets id first_id + i.
// With `bounded`, thread t hands its members to bounded->spiller(t).
Status ScanShards(const std::vector<std::string>& shards, uint32_t first_id, int jobs,
                  const IndexBuildOptions& options, uint64_t shard_bytes,
                  std::vector<ScannedShard>* scans, index::BoundedIndexWriter* bounded = nullptr) {
  if (options.seek_spacing > archive::kMaxSeekSpacing) {
    return Status::InvalidArgument(fmt::format(
        "--seek-spacing {}: at most {} MiB (a mount decodes at most {} MiB for one read)",
        options.seek_spacing, archive::kMaxSeekSpacing >> 20, codec::kMaxIntervalBytes >> 20));
  }
  scans->assign(shards.size(), ScannedShard{});
  Progress progress("index build", "shards", shards.size(), shard_bytes, options.quiet);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&](int t) {
    for (size_t i; (i = next.fetch_add(1)) < shards.size() && !failed.load();) {
      ScannedShard& scan = (*scans)[i];
      if (bounded) scan.spiller = bounded->spiller(t);
      // An exception must not leave a thread (that would abort): it fails
      // this shard's scan like any other error.
      try {
        ScanShard(shards[i], index::ShardId{first_id + static_cast<uint32_t>(i)}, options.checksum,
                  options.remote.max_shard_size,
                  options.seek_spacing ? options.seek_spacing : archive::kDefaultSeekSpacing,
                  options.nest, &progress, &scan);
      } catch (const std::bad_alloc&) {
        scan.status = Status::IoError(
            fmt::format("shard {}: out of memory while scanning", RedactLocation(shards[i])));
      } catch (const std::exception& e) {
        scan.status =
            Status::IoError(fmt::format("shard {}: {}", RedactLocation(shards[i]), e.what()));
      }
      if (!scan.status.ok()) failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < jobs; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (auto& t : threads) t.join();
  progress.Stop();
  // Shards after a failure may not have been scanned; report the failure.
  for (const ScannedShard& scan : *scans) {
    if (!scan.status.ok()) return scan.status;
  }
  return Status::Ok();
}

// The meta of the file at `path` as `scan` found it: the shard's, and the
// start of each of its slices'.
index::ShardMeta FileMeta(const std::string& path, const ScannedShard& scan) {
  index::ShardMeta meta;
  meta.path = path;
  meta.size = scan.info.size;
  meta.mtime_ns = scan.info.mtime_ns;
  meta.fingerprint = scan.info.fingerprint;
  if (scan.remote) {
    meta.flags |= index::kShardRemote;
    meta.etag = scan.etag;
  }
  return meta;
}

// Hands the scans to the writer (an IndexWriter, or a MemberCollector for
// `index add`), shard by shard in the order given (a later shard's member
// replaces an earlier one's, as in tar), freeing each scan's members as it
// goes.
template <typename Writer>
void AddScans(const std::vector<std::string>& shards, std::vector<ScannedShard>* scans,
              Writer* writer, IndexBuildReport* report) {
  size_t total_members = 0;
  for (const ScannedShard& scan : *scans) total_members += scan.members.size();
  writer->Reserve(total_members);
  // Slices get ids after every shard of the build, in shard order.
  const uint32_t first_slice =
      scans->empty() ? 0 : (*scans)[0].id.value + static_cast<uint32_t>(scans->size());
  uint32_t next_slice = first_slice;
  for (size_t i = 0; i < scans->size(); ++i) {
    ScannedShard& scan = (*scans)[i];
    index::ShardMeta meta = FileMeta(shards[i], scan);
    if (scan.info.zip) meta.flags |= index::kShardZip;
    if (scan.compressed.codec != index::Codec::kNone) {
      meta.set_codec(scan.compressed.codec);
      writer->AddSeekKeys(SeekKeys(scan.id, scan.compressed));
      scan.compressed = archive::CompressedScan{};
    }
    writer->AddShard(std::move(meta));
    report->members += scan.info.members + scan.nested_members;
    report->nested_archives += scan.nested_archives;
    report->nested_members += scan.nested_members;
    report->rejected += scan.rejected;
    for (auto& ex : scan.rejected_examples) {
      if (report->rejected_examples.size() < kRejectedExamples)
        report->rejected_examples.push_back(ex);
    }
    if (!scan.slices.empty()) {
      if constexpr (requires { writer->SetSliceIds(scan.id, next_slice); }) {
        writer->SetSliceIds(scan.id, next_slice);  // Its members are spilled already.
      }
      for (index::MemberEntry& e : scan.members) {
        if (e.shard.value & kSliceMark) e.shard.value = next_slice + (e.shard.value & ~kSliceMark);
      }
      next_slice += static_cast<uint32_t>(scan.slices.size());
    }
    const size_t first = writer->member_count();
    writer->AddMembers(std::move(scan.members));
    for (const auto& [k, extents] : scan.sparse) writer->SetExtents(first + k, extents);
    for (const auto& [k, encoding] : scan.encoded) writer->SetEncoded(first + k, encoding);
    HugeVector<index::MemberEntry>().swap(scan.members);  // Freed as it goes.
  }
  // The slices: each names its shard's file, as the shard's meta does.
  next_slice = first_slice;
  for (size_t i = 0; i < scans->size(); ++i) {
    ScannedShard& scan = (*scans)[i];
    for (archive::NestedScanner::Slice& slice : scan.slices) {
      index::ShardMeta meta = FileMeta(shards[i], scan);
      meta.flags |= index::kShardSlice;
      meta.base = slice.base;
      meta.length = slice.length;
      meta.set_codec(slice.scan.codec);
      writer->AddShard(std::move(meta));
      writer->AddSeekKeys(SeekKeys(index::ShardId{next_slice++}, slice.scan));
    }
    std::vector<archive::NestedScanner::Slice>().swap(scan.slices);
  }
}

// Keeps what AddScans hands it, for `index add`.
struct MemberCollector {
  ScannedShards* out;
  void Reserve(size_t n) { out->members.reserve(n); }
  void AddShard(index::ShardMeta meta) { out->shards.push_back(std::move(meta)); }
  size_t member_count() const { return out->members.size(); }
  void AddMembers(HugeVector<index::MemberEntry>&& batch) {
    out->members.insert(out->members.end(), std::make_move_iterator(batch.begin()),
                        std::make_move_iterator(batch.end()));
  }
  void SetExtents(size_t member, const std::vector<index::Extent>& extents) {
    out->extents[static_cast<uint32_t>(member)] = index::EncodeExtents(extents);
  }
  void SetEncoded(size_t member, const index::EncodedMember& encoding) {
    out->extents[static_cast<uint32_t>(member)] = index::EncodeEncodedTrailer(encoding);
  }
  void AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs) {
    out->seek_keys.insert(out->seek_keys.end(), std::make_move_iterator(kvs.begin()),
                          std::make_move_iterator(kvs.end()));
  }
};

// For a bounded build, whose members the scan already spilled: AddScans
// registers the shards and adds up the report.
struct SpilledMembers {
  index::BoundedIndexWriter* writer;
  void Reserve(size_t) {}
  void AddShard(index::ShardMeta meta) { writer->AddShard(std::move(meta)); }
  size_t member_count() const { return 0; }
  void AddMembers(HugeVector<index::MemberEntry>&&) {}
  void SetExtents(size_t, const std::vector<index::Extent>&) {}
  void SetEncoded(size_t, const index::EncodedMember&) {}
  void AddSeekKeys(std::vector<std::pair<std::string, std::string>> kvs) {
    writer->AddSeekKeys(std::move(kvs));
  }
  void SetSliceIds(index::ShardId shard, uint32_t first) { writer->SetSliceIds(shard, first); }
};

// The index published at options.out replaces (with --force) and then
// removes what was there, so no input may lie there: a shard, a directory
// given, the --from-list file. InvalidArgument naming both otherwise.
Status RefuseOutputHoldingInputs(const IndexBuildOptions& options,
                                 const std::vector<std::string>& shards) {
  SHARDFS_ASSIGN_OR_RETURN(const std::string out_real, ResolvePath(options.out));
  std::vector<std::string> inputs = shards;
  for (const std::string& in : options.inputs) {
    struct stat st;
    if (::lstat(in.c_str(), &st) == 0) inputs.push_back(in);  // Not a pattern.
  }
  if (!options.from_list.empty()) inputs.push_back(options.from_list);
  for (const std::string& in : inputs) {
    if (IsRemoteInput(in)) continue;
    Result<std::string> real = ResolvePath(in);
    if (real.ok() && PathWithin(*real, out_real)) {
      return Status::InvalidArgument(
          fmt::format("--out {} holds the input {}: the index would replace it; choose another "
                      "--out",
                      options.out, in));
    }
  }
  return Status::Ok();
}

// Whether the in-memory build surely fits in `memory`: every member takes
// a 512-byte header at least, so the shards' bytes bound the member count.
// A remote shard's size is not known before it is read: it does not fit.
bool FitsInMemory(const std::vector<std::string>& shards, uint64_t shard_bytes, uint64_t memory) {
  for (const std::string& s : shards) {
    if (IsRemoteInput(s)) return false;
  }
  return shard_bytes / 512 <= memory / index::kInMemoryBytesPerMember;
}

// Shards scanned at once: --jobs, else one per core, and on network storage
// at least kNetworkJobs, so that round trips overlap instead of adding up
// (a scan there waits on the network far more than on a core).
constexpr int kNetworkJobs = 8;
int Jobs(const IndexBuildOptions& options, const std::vector<std::string>& shards) {
  int jobs = options.jobs > 0 ? options.jobs
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (options.jobs == 0 && jobs < kNetworkJobs) {
    std::set<std::string> dirs;
    for (const std::string& s : shards) {
      if (IsRemoteInput(s)) continue;
      std::string dir = std::filesystem::path(s).parent_path().string();
      if (!dirs.insert(dir.empty() ? "." : dir).second) continue;
      Result<StorageInfo> info = DetectStorage(dir.empty() ? "." : dir);
      if (info.ok() && info->network) {
        log::Info("shards on network storage ({} at {}): scanning {} at once", info->fstype,
                  dir.empty() ? "." : dir, kNetworkJobs);
        jobs = kNetworkJobs;
        break;
      }
    }
  }
  return std::max(1, std::min<int>(jobs, static_cast<int>(shards.size())));
}

}  // namespace

Result<ScannedShards> ScanNewShards(const IndexBuildOptions& options, uint32_t first_id) {
  ScannedShards out;
  SHARDFS_ASSIGN_OR_RETURN(
      std::vector<std::string> shards,
      ExpandShardInputs(options.inputs, options.from_list, options.url_prefix, options.remote));
  SHARDFS_RETURN_IF_ERROR(CheckShardFiles(shards, &out.report.shard_bytes));
  std::vector<ScannedShard> scans;
  SHARDFS_RETURN_IF_ERROR(
      ScanShards(shards, first_id, Jobs(options, shards), options, out.report.shard_bytes, &scans));
  MemberCollector collector{&out};
  AddScans(shards, &scans, &collector, &out.report);
  out.report.shards = shards.size();
  return out;
}

Result<IndexBuildReport> BuildIndex(const IndexBuildOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  SHARDFS_RETURN_IF_ERROR(index::CheckOutputPath(options.out, options.force));
  // An earlier build's temporary directory whose process is gone (killed
  // with SIGKILL): removed now, whether or not this build gets to publish.
  SHARDFS_ASSIGN_OR_RETURN(const std::filesystem::path out_abs,
                           index::AbsoluteIndexPath(options.out));
  index::RemoveStaleBuildDirs(out_abs);
  SHARDFS_ASSIGN_OR_RETURN(
      std::vector<std::string> shards,
      ExpandShardInputs(options.inputs, options.from_list, options.url_prefix, options.remote));
  IndexBuildReport report;
  report.listed_shards = shards.size();
  // Checked on the whole list: no task of the array may publish over any shard.
  SHARDFS_RETURN_IF_ERROR(RefuseOutputHoldingInputs(options, shards));
  if (options.part.count > 0) {
    // Every task of a job array expands the same inputs to the same list,
    // and keeps its own contiguous run of it.
    const auto [first, last] = ShardPartRange(shards.size(), options.part);
    shards = std::vector<std::string>(shards.begin() + static_cast<ptrdiff_t>(first),
                                      shards.begin() + static_cast<ptrdiff_t>(last));
  }
  report.shards = shards.size();
  SHARDFS_RETURN_IF_ERROR(CheckShardFiles(shards, &report.shard_bytes));

  index::WriteOptions wo;
  wo.force = options.force;
  wo.build_options =
      fmt::format("checksum={} shards={}", options.checksum ? "xxh3" : "off", shards.size());
  wo.created_by = "shardfs index build";
  if (options.nest.recursive) {
    wo.build_options += fmt::format(" recursive={}{}{}", options.nest.max_depth,
                                    options.nest.strip_extension ? " strip-tar-extension" : "",
                                    options.nest.strip_zip_extension ? " strip-zip-extension" : "");
  }
  if (options.part.count > 0) {
    wo.partition = fmt::format("{}/{}", options.part.index, options.part.count);
    wo.partition_shards = report.listed_shards;
    wo.build_options += " part=" + wo.partition;
  }

  const int jobs = Jobs(options, shards);
  std::vector<ScannedShard> scans;
  const uint64_t memory = options.memory ? options.memory : index::DefaultBuildMemory();
  report.bounded = !FitsInMemory(shards, report.shard_bytes, memory);
  if (report.bounded) {
    SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<index::BoundedIndexWriter> writer,
                             index::BoundedIndexWriter::Create(options.out, memory, jobs));
    SHARDFS_RETURN_IF_ERROR(
        ScanShards(shards, 0, jobs, options, report.shard_bytes, &scans, writer.get()));
    log::Debug("index build: scanned {} shards in {:.3f}s (members spilled)", shards.size(),
               since_start());
    SpilledMembers spilled{writer.get()};
    AddScans(shards, &scans, &spilled, &report);
    SHARDFS_ASSIGN_OR_RETURN(report.stats, writer->Finish(options.out, wo));
    report.chunks = writer->chunks();
    report.seconds = since_start();
    return report;
  }
  SHARDFS_RETURN_IF_ERROR(ScanShards(shards, 0, jobs, options, report.shard_bytes, &scans));
  log::Debug("index build: scanned {} shards in {:.3f}s", shards.size(), since_start());

  index::IndexWriter writer;
  AddScans(shards, &scans, &writer, &report);
  SHARDFS_ASSIGN_OR_RETURN(report.stats, writer.Finish(options.out, wo));
  report.seconds = since_start();
  return report;
}

}  // namespace shardfs::builder
