// `shardfs index build` and `shardfs index info`.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "base/json_writer.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/strings.h"
#include "index/bounded_build.h"
#include "index/index_reader.h"
#include "src/command.h"
#include "tools/index_build.h"
#include "tools/progress.h"

namespace shardfs::app {

using cli::CommandLine;
using cli::Operands;
using cli::Option;
using cli::SetFlag;
using cli::SetJobs;
using cli::SetNonZeroSize;
using cli::SetString;

std::vector<Option> RemoteLimitOptions(tools::RemoteLimits* limits) {
  return {{"max-shard-size", 0, "SIZE", "the largest remote shard read (default 64G)",
           SetNonZeroSize(&limits->max_shard_size, "--max-shard-size needs a size such as 64G")},
          {"max-list-pages", 0, "N", "pages of one s3:// listing (default 10000)",
           [limits](const char* arg) {
             return ParseCount(arg, 1, UINT64_MAX, &limits->max_list_pages)
                        ? Status::Ok()
                        : Status::InvalidArgument("--max-list-pages needs a count of at least 1");
           }}};
}

int RunIndexBuild(int argc, char** argv) {
  tools::IndexBuildOptions o;
  CommandLine cl{
      "index build",
      "--out INDEX SHARD|DIR|GLOB|URL...\n"
      "--out INDEX --from-list FILE [SHARD|DIR|GLOB|URL...]",
      {{"out", 'o', "INDEX", "where to publish the index (required)", SetString(&o.out)},
       {"no-checksum", 0, nullptr, "read headers only, no content checksums",
        SetFlag(&o.checksum, false)},
       {"jobs", 'j', "N", "shards scanned at once (default: one per core)", SetJobs(&o.jobs)},
       {"force", 'F', nullptr, "replace an existing index at INDEX", SetFlag(&o.force)},
       {"memory", 0, "SIZE",
        "about the most memory the build takes; members spill to disk beyond it (default: a "
        "quarter of RAM, at most 4G)",
        SetNonZeroSize(&o.memory, "--memory needs a size such as 512M or 4G")},
       {"quiet", 'q', nullptr, "no progress and no summary", SetFlag(&o.quiet)},
       {"from-list", 0, "FILE", "also the shards FILE lists, one per line",
        SetString(&o.from_list)},
       {"url-prefix", 0, "URL", "the base of --from-list lines that are not URLs",
        SetString(&o.url_prefix)}},
      Operands::kAfterOptions};
  std::ranges::move(RemoteLimitOptions(&o.remote), std::back_inserter(cl.options));
  if (int rc = ParseArgs(cl, argc, argv, &o.inputs); rc >= 0) return rc;
  if (o.out.empty()) return UsageError("index build", "--out INDEX is required");
  if (o.inputs.empty() && o.from_list.empty()) {
    return UsageError("index build", "no shards given");
  }
  if (o.quiet) log::SetLevel(log::Level::kWarning);

  Result<tools::IndexBuildReport> r = tools::BuildIndex(o);
  if (!r.ok()) {
    log::Error("index build: {}", r.status().message());
    return kExitFailure;
  }
  const auto& st = r->stats;
  if (st.replaced) {
    log::Warning(
        "{} member(s) replaced by a later member of the same path (the later shard "
        "wins, as with tar extraction), e.g.: {}",
        st.replaced, fmt::join(st.replaced_examples, ", "));
  }
  if (r->rejected) {
    log::Warning("{} member(s) left out (unsafe names or unsupported types), e.g.:", r->rejected);
    for (const auto& ex : r->rejected_examples) log::Warning("  {}", ex);
  }
  if (st.dropped) {
    log::Warning("{} member(s) could not be placed in the tree, e.g.:", st.dropped);
    for (const auto& ex : st.dropped_examples) log::Warning("  {}", ex);
  }
  double secs = std::max(r->seconds, 1e-9);
  log::Info(
      "indexed {} shards ({}): {} files, {} dirs ({} implied), {} symlinks, {} hard links, "
      "{} of content; index {} at {}",
      r->shards, tools::HumanBytes(r->shard_bytes), st.files, st.dirs, st.synthesized_dirs,
      st.symlinks, st.hardlinks, tools::HumanBytes(st.bytes), tools::HumanBytes(st.index_bytes),
      o.out);
  log::Info("{:.2f}s: {:.0f} entries/s, {}/s", secs, r->members / secs,
            tools::HumanBytes(r->shard_bytes / secs));
  if (r->bounded) {
    log::Info("members spilled to disk, joined in {} chunks (--memory {})", r->chunks,
              tools::HumanBytes(o.memory ? o.memory : index::DefaultBuildMemory()));
  }
  return kExitOk;
}

int RunIndexInfo(int argc, char** argv) {
  bool json = false;
  index::ReaderOptions ro;
  const CommandLine cl{
      "index info",
      "INDEX",
      {{"json", 0, nullptr, "JSON lines: the index, then one per shard", SetFlag(&json)},
       ViewOption(&ro.view)},
      Operands::kAfterOptions};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("index info", "expected one INDEX");
  auto reader = index::IndexReader::Open(args[0], ro);
  if (!reader.ok()) {
    log::Error("{}", reader.status().message());
    return kExitFailure;
  }
  const index::IndexReader& r = **reader;
  // The version's own shards and counts (the index's meta for default@1).
  const index::VersionRecord& v = r.version().record;
  const size_t shards = std::min<size_t>(v.shard_count, r.shards().size());
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < shards; ++i) shard_bytes += r.shards()[i].size;
  if (json) {
    JsonObject o;
    o.Str("index", r.path())
        .Str("view", r.version().label())
        .UNum("schema_version", r.MetaNumber(index::kMetaSchemaVersion))
        .UNum("shards", shards)
        .UNum("shard_bytes", shard_bytes)
        .UNum("files", v.files)
        .UNum("dirs", v.dirs)
        .UNum("symlinks", v.symlinks)
        .UNum("entries", v.files + v.dirs + v.symlinks)
        .UNum("bytes", v.bytes)
        .Str("checksums", r.Meta(index::kMetaChecksums))
        .Str("build_options", r.Meta(index::kMetaBuildOptions))
        .Str("created_by", r.Meta(index::kMetaCreatedBy))
        .UNum("index_bytes", r.DiskBytes());
    fmt::print("{}\n", o.Finish());
    for (size_t i = 0; i < shards; ++i) {
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
      fmt::print("{}\n", so.Finish());
    }
    return kExitOk;
  }
  fmt::print("index:          {}\n", r.path());
  fmt::print("view:           {}\n", r.version().label());
  fmt::print("schema version: {}\n", r.Meta(index::kMetaSchemaVersion));
  fmt::print("shards:         {} ({})\n", shards, tools::HumanBytes(shard_bytes));
  fmt::print("entries:        {} ({} files, {} dirs, {} symlinks)\n", v.files + v.dirs + v.symlinks,
             v.files, v.dirs, v.symlinks);
  fmt::print("content bytes:  {} ({})\n", v.bytes, tools::HumanBytes(v.bytes));
  fmt::print("checksums:      {}\n", r.Meta(index::kMetaChecksums));
  fmt::print("build options:  {}\n", r.Meta(index::kMetaBuildOptions));
  fmt::print("created by:     {}\n", r.Meta(index::kMetaCreatedBy));
  fmt::print("index size:     {}\n", tools::HumanBytes(r.DiskBytes()));
  return kExitOk;
}

}  // namespace shardfs::app
