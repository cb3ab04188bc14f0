// `shardfs index build` and `shardfs index info`.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <set>
#include <string_view>

#include "base/json_writer.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/progress.h"
#include "base/strings.h"
#include "index/bounded_build.h"
#include "index/index_reader.h"
#include "src/archive/index_bundle.h"
#include "tools/builder/index_build.h"
#include "tools/builder/index_manifest.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

using cli::CommandLine;
using cli::Operands;
using cli::Option;
using cli::SetFlag;
using cli::SetJobs;
using cli::SetNonZeroSize;
using cli::SetString;

std::vector<Option> RemoteLimitOptions(builder::RemoteLimits* limits) {
  return {{"max-shard-size", 0, "SIZE", "the largest remote shard read (default 64G)",
           SetNonZeroSize(&limits->max_shard_size, "--max-shard-size needs a size such as 64G")},
          {"max-list-pages", 0, "N", "pages of one s3:// listing (default 10000)",
           [limits](const char* arg) {
             return ParseCount(arg, 1, UINT64_MAX, &limits->max_list_pages)
                        ? Status::Ok()
                        : Status::InvalidArgument("--max-list-pages needs a count of at least 1");
           }}};
}

std::vector<Option> NestOptionTable(archive::NestOptions* nest) {
  return {{"recursive", 0, nullptr,
           "show a member that is itself a tar or zip as a directory of its tree",
           SetFlag(&nest->recursive)},
          {"recursive-depth", 0, "N", "archive levels opened below a shard (default 4)",
           [nest](const char* arg) {
             uint64_t n = 0;
             if (!ParseCount(arg, 1, 64, &n)) {
               return Status::InvalidArgument("--recursive-depth needs a count from 1 to 64");
             }
             nest->max_depth = static_cast<int>(n);
             nest->depth_given = true;
             return Status::Ok();
           }},
          {"strip-recursive-tar-extension", 0, nullptr,
           "name a nested a.tar's directory a, not a.tar", SetFlag(&nest->strip_extension)},
          {"strip-recursive-zip-extension", 0, nullptr,
           "name a nested a.zip's directory a, not a.zip", SetFlag(&nest->strip_zip_extension)},
          {"max-zip-ratio", 0, "N",
           "refuse a zip whose members declare more than N times its size (default 100)",
           [nest](const char* arg) {
             return ParseCount(arg, 1, UINT64_MAX, &nest->max_zip_ratio)
                        ? Status::Ok()
                        : Status::InvalidArgument("--max-zip-ratio needs a count of at least 1");
           }},
          {"recursive-max-entries", 0, "N",
           "refuse a shard whose nested archives hold more entries (default 100000000)",
           [nest](const char* arg) {
             nest->max_entries_given = true;
             return ParseCount(arg, 1, UINT64_MAX, &nest->max_entries)
                        ? Status::Ok()
                        : Status::InvalidArgument("--recursive-max-entries needs a count");
           }}};
}

std::string CheckNestOptions(const archive::NestOptions& nest) {
  if (nest.recursive) return "";
  if (nest.depth_given) return "--recursive-depth needs --recursive";
  if (nest.strip_extension) return "--strip-recursive-tar-extension needs --recursive";
  if (nest.strip_zip_extension) return "--strip-recursive-zip-extension needs --recursive";
  if (nest.max_entries_given) return "--recursive-max-entries needs --recursive";
  return "";
}

namespace {

// What `index build` says after a build: warnings for what was replaced,
// left out or dropped, then the summary (at Info).
void LogBuildReport(const builder::IndexBuildOptions& o, const builder::IndexBuildReport& r) {
  const auto& st = r.stats;
  if (o.part.count > 0 && r.shards == 0) {
    log::Warning("part {}/{} of {} shard(s) is empty: published an index with an empty tree",
                 o.part.index, o.part.count, r.listed_shards);
  }
  if (st.replaced) {
    log::Warning(
        "{} member(s) replaced by a later member of the same path (the later shard "
        "wins, as with tar extraction), e.g.: {}",
        st.replaced, fmt::join(st.replaced_examples, ", "));
  }
  if (r.rejected) {
    log::Warning("{} member(s) left out (unsafe names or unsupported types), e.g.:", r.rejected);
    for (const auto& ex : r.rejected_examples) log::Warning("  {}", ex);
  }
  if (st.dropped) {
    log::Warning("{} member(s) could not be placed in the tree, e.g.:", st.dropped);
    for (const auto& ex : st.dropped_examples) log::Warning("  {}", ex);
  }
  if (o.nest.recursive) {
    log::Info("--recursive: {} nested archive(s) shown as directories, holding {} member(s)",
              r.nested_archives, r.nested_members);
  }
  double secs = std::max(r.seconds, 1e-9);
  if (o.part.count > 0) {
    const auto [first, last] = builder::ShardPartRange(r.listed_shards, o.part);
    log::Info("part {}/{}: {} of the {} shards listed, from shard {} (0-based)", o.part.index,
              o.part.count, last - first, r.listed_shards, first);
  }
  log::Info(
      "indexed {} shards ({}): {} files, {} dirs ({} implied), {} symlinks, {} hard links, "
      "{} of content; index {} at {}",
      r.shards, HumanBytes(r.shard_bytes), st.files, st.dirs, st.synthesized_dirs, st.symlinks,
      st.hardlinks, HumanBytes(st.bytes), HumanBytes(st.index_bytes), o.out);
  log::Info("{:.2f}s: {:.0f} entries/s, {}/s", secs, r.members / secs,
            HumanBytes(r.shard_bytes / secs));
  if (r.bounded) {
    log::Info("members spilled to disk, joined in {} chunks (--memory {})", r.chunks,
              HumanBytes(o.memory ? o.memory : index::DefaultBuildMemory()));
  }
}

}  // namespace

int RunIndexBuild(int argc, char** argv) {
  builder::IndexBuildOptions o;
  CommandLine cl{
      "index build",
      "--out INDEX [--part K/N] SHARD|DIR|GLOB|URL...\n"
      "--out INDEX [--part K/N] --from-list FILE [SHARD|DIR|GLOB|URL...]",
      {{"out", 'o', "INDEX", "where to publish the index (required)", SetString(&o.out)},
       {"no-checksum", 0, nullptr, "read headers only, no content checksums",
        SetFlag(&o.checksum, false)},
       {"jobs", 'j', "N", "shards scanned at once (default: one per core)", SetJobs(&o.jobs)},
       {"force", 'F', nullptr, "replace an existing index at INDEX", SetFlag(&o.force)},
       {"memory", 0, "SIZE",
        "about the most memory the build takes; members spill to disk beyond it (default: a "
        "quarter of RAM, at most 4G)",
        SetNonZeroSize(&o.memory, "--memory needs a size such as 512M or 4G")},
       {"seek-spacing", 0, "SIZE",
        "decoded bytes between the seek points of a .tar.gz (default 2M; see the man page)",
        SetNonZeroSize(&o.seek_spacing, "--seek-spacing needs a size such as 2M")},
       {"quiet", 'q', nullptr, "no progress and no summary", SetFlag(&o.quiet)},
       {"from-list", 0, "FILE", "also the shards FILE lists, one per line",
        SetString(&o.from_list)},
       {"url-prefix", 0, "URL", "the base of --from-list lines that are not URLs",
        SetString(&o.url_prefix)},
       {"part", 0, "K/N", "only part K (0-based) of N of the shards, for a job array",
        [&o](const char* arg) { return builder::ParseShardPart(arg, &o.part); }}},
      Operands::kAfterOptions};
  std::ranges::move(RemoteLimitOptions(&o.remote), std::back_inserter(cl.options));
  std::ranges::move(NestOptionTable(&o.nest), std::back_inserter(cl.options));
  if (int rc = ParseArgs(cl, argc, argv, &o.inputs); rc >= 0) return rc;
  if (o.out.empty()) return UsageError("index build", "--out INDEX is required");
  if (std::string e = CheckNestOptions(o.nest); !e.empty()) return UsageError("index build", e);
  if (o.inputs.empty() && o.from_list.empty()) {
    return UsageError("index build", "no shards given");
  }
  if (o.quiet) log::SetLevel(log::Level::kWarning);

  Result<builder::IndexBuildReport> r = builder::BuildIndex(o);
  if (!r.ok()) {
    log::Error("index build: {}", r.status().message());
    return kExitFailure;
  }
  LogBuildReport(o, *r);
  return kExitOk;
}

int RunIndexManifest(int argc, char** argv) {
  builder::ManifestOptions o;
  const CommandLine cl{
      "index manifest",
      "--out MANIFEST INDEX...",
      {{"out", 'o', "MANIFEST", "where to write the manifest (required)", SetString(&o.out)},
       {"force", 'F', nullptr, "replace an existing manifest at MANIFEST", SetFlag(&o.force)}},
      Operands::kAfterOptions};
  if (int rc = ParseArgs(cl, argc, argv, &o.parts); rc >= 0) return rc;
  if (o.out.empty()) return UsageError("index manifest", "--out MANIFEST is required");
  if (o.parts.empty()) return UsageError("index manifest", "no partitions given");
  Result<builder::ManifestReport> r = builder::MakeManifest(o);
  if (!r.ok()) {
    log::Error("index manifest: {}", r.status().message());
    return kExitFailure;
  }
  for (const std::string& w : r->warnings) log::Warning("{}", w);
  const index::ManifestTree& t = r->tree;
  if (t.dropped) {
    log::Warning("{} entr(ies) dropped as tar would drop them, e.g.:", t.dropped);
    for (const auto& ex : t.dropped_examples) log::Warning("  {}", ex);
  }
  log::Info(
      "manifest of {} partitions ({} shards): {} files, {} dirs, {} symlinks, {} of content; "
      "{} union directories; manifest {} ({} of partition indexes) at {}; {:.2f}s",
      o.parts.size(), r->shards, t.files, t.dirs, t.symlinks, HumanBytes(t.bytes),
      t.union_dirs.size(), HumanBytes(r->manifest_bytes), HumanBytes(r->partition_bytes), o.out,
      r->seconds);
  return kExitOk;
}

namespace {

// The shards of an index's version, and their bytes: a slice shard (a
// compressed tar inside a shard) is bytes of a file counted once, with its
// shard or its other slices.
struct ShardTotals {
  size_t shards = 0;
  uint64_t bytes = 0;
  uint64_t slices = 0;
};

ShardTotals CountShards(const index::IndexReader& r) {
  // The version's own shards and counts (the index's meta for default@1).
  const index::VersionRecord& v = r.version().record;
  ShardTotals t;
  t.shards = std::min<size_t>(v.shard_count, r.shards().size());
  std::set<std::string_view> files;
  for (size_t i = 0; i < t.shards; ++i) {
    const index::ShardMeta& m = r.shards()[i];
    t.slices += m.slice();
    if (files.insert(r.ShardPath(index::ShardId{static_cast<uint32_t>(i)})).second) {
      t.bytes += m.size;
    }
  }
  return t;
}

// `index info --json`: one line for the index, then one per shard.
void PrintInfoJson(const index::IndexReader& r, const indexref::IndexRef& ref,
                   const ShardTotals& totals) {
  const index::VersionRecord& v = r.version().record;
  JsonObject o;
  o.Str("index", ref.cached ? ref.shown : r.path())
      .Str("view", r.version().label())
      .UNum("schema_version", r.MetaNumber(index::kMetaSchemaVersion))
      .UNum("shards", totals.shards)
      .UNum("slices", totals.slices)
      .UNum("shard_bytes", totals.bytes)
      .UNum("files", v.files)
      .UNum("dirs", v.dirs)
      .UNum("symlinks", v.symlinks)
      .UNum("entries", v.files + v.dirs + v.symlinks)
      .UNum("bytes", v.bytes)
      .Str("checksums", r.Meta(index::kMetaChecksums))
      .Str("build_options", r.Meta(index::kMetaBuildOptions))
      .Str("created_by", r.Meta(index::kMetaCreatedBy));
  if (!r.Meta(index::kMetaPartition).empty()) {
    o.Str("partition", r.Meta(index::kMetaPartition))
        .UNum("partition_shards", r.MetaNumber(index::kMetaPartitionShards));
  }
  o.UNum("index_bytes", r.DiskBytes());
  if (r.manifest()) o.UNum("partitions", r.manifest()->partitions.size());
  fmt::print("{}\n", o.Finish());
  for (size_t i = 0; i < totals.shards; ++i) {
    const auto& s = r.shards()[i];
    JsonObject so;
    so.UNum("shard_id", i)
        .Str("shard", RedactLocation(r.ShardPath(index::ShardId{static_cast<uint32_t>(i)})))
        .Str("stored_path", RedactLocation(s.path))
        .UNum("size", s.size)
        .Num("mtime_ns", s.mtime_ns)
        .Str("fingerprint", fmt::format("{:016x}", s.fingerprint))
        .Bool("remote", s.remote());
    if (s.remote()) so.Str("etag", s.etag);
    if (s.codec() != index::Codec::kNone) so.Str("codec", index::CodecName(s.codec()));
    if (s.slice()) so.UNum("slice_base", s.base).UNum("slice_length", s.length);
    fmt::print("{}\n", so.Finish());
  }
}

// Compressed tar shards among the first `shards`: their seek points and the
// windows stored (nothing if there are none).
void PrintSeekPoints(const index::IndexReader& r, size_t shards) {
  uint64_t compressed = 0, points = 0, windows = 0, window_bytes = 0;
  for (uint32_t i = 0; i < shards; ++i) {
    if (r.shards()[i].codec() == index::Codec::kNone) continue;
    ++compressed;
    std::string value;
    index::SeekTable t;
    if (!r.GetSeekValue(index::ShardId{i}, false, 0, &value).ok() ||
        !index::DecodeSeekTable(value, &t).ok()) {
      continue;
    }
    points += t.points.size();
    for (const index::SeekPoint& p : t.points) {
      windows += p.window > 0;
      window_bytes += p.window;
    }
  }
  if (compressed > 0) {
    fmt::print("seek points:    {} in {} compressed shards, {} with a window ({})\n", points,
               compressed, windows, HumanBytes(window_bytes));
  }
}

// A manifest's partitions, one line each (nothing for an index).
void PrintPartitions(const index::IndexReader& r) {
  const index::Manifest* m = r.manifest();
  if (!m) return;
  const std::vector<const index::IndexReader*> parts = r.partitions();
  fmt::print("partitions:     {} (union directories: {})\n", m->partitions.size(),
             m->trees.front().union_dirs.size());
  for (size_t p = 0; p < m->partitions.size(); ++p) {
    const index::ManifestPartition& mp = m->partitions[p];
    fmt::print("  {:>4}  {}  {} shards{}{}\n", p, mp.ref, mp.shard_count,
               mp.part.empty() ? "" : fmt::format(", part {}", mp.part),
               parts[p] ? fmt::format(", {}", HumanBytes(parts[p]->DiskBytes())) : "");
  }
}

// `index info`: the index, its shards and version, as text.
void PrintInfoText(const index::IndexReader& r, const indexref::IndexRef& ref,
                   const ShardTotals& totals) {
  const index::VersionRecord& v = r.version().record;
  fmt::print("index:          {}\n", ref.cached ? ref.shown : r.path());
  if (ref.cached) fmt::print("cached copy:    {}\n", r.path());
  fmt::print("view:           {}\n", r.version().label());
  fmt::print("schema version: {}\n", r.Meta(index::kMetaSchemaVersion));
  fmt::print("shards:         {} ({}){}\n", totals.shards, HumanBytes(totals.bytes),
             totals.slices
                 ? fmt::format(", {} of them slices (compressed tars inside shards)", totals.slices)
                 : "");
  fmt::print("entries:        {} ({} files, {} dirs, {} symlinks)\n", v.files + v.dirs + v.symlinks,
             v.files, v.dirs, v.symlinks);
  fmt::print("content bytes:  {} ({})\n", v.bytes, HumanBytes(v.bytes));
  fmt::print("checksums:      {}\n", r.Meta(index::kMetaChecksums));
  fmt::print("build options:  {}\n", r.Meta(index::kMetaBuildOptions));
  fmt::print("created by:     {}\n", r.Meta(index::kMetaCreatedBy));
  if (!r.Meta(index::kMetaPartition).empty()) {
    fmt::print("partition:      {} of {} shards\n", r.Meta(index::kMetaPartition),
               r.MetaNumber(index::kMetaPartitionShards));
  }
  fmt::print("index size:     {}\n", HumanBytes(r.DiskBytes()));
  PrintSeekPoints(r, totals.shards);
  PrintPartitions(r);
}

}  // namespace

int RunIndexInfo(int argc, char** argv) {
  bool json = false;
  index::ReaderOptions ro;
  indexref::IndexCacheOptions co;
  CommandLine cl{"index info",
                 "INDEX",
                 {{"json", 0, nullptr, "JSON lines: the index, then one per shard", SetFlag(&json)},
                  ViewOption(&ro.view)},
                 Operands::kAfterOptions};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("index info", "expected one INDEX");
  indexref::IndexRef ref;
  if (!ResolveIndexArg("index info", &args[0], co, &ro, &ref)) return kExitFailure;
  auto reader = index::IndexReader::Open(args[0], ro);
  if (!reader.ok()) {
    log::Error("{}", reader.status().message());
    return kExitFailure;
  }
  const index::IndexReader& r = **reader;
  const ShardTotals totals = CountShards(r);
  if (json) {
    PrintInfoJson(r, ref, totals);
  } else {
    PrintInfoText(r, ref, totals);
  }
  return kExitOk;
}

int RunIndexBundle(int argc, char** argv) {
  const CommandLine cl{"index bundle", "INDEX OUT.tar", {}, Operands::kAfterOptions};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("index bundle", "expected INDEX OUT.tar");
  if (Status s = archive::WriteIndexBundle(args[0], args[1]); !s.ok()) {
    log::Error("index bundle: {}", s.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace shardfs::cli
