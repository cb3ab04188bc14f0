// `shardfs pack` (from a directory tree or, with --from-index, from an index
// view) and `shardfs verify`.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "base/log.h"
#include "base/parse.h"
#include "base/progress.h"
#include "tools/builder/index_build.h"  // ParseShardPart
#include "tools/cli/command.h"
#include "tools/pack/pack.h"
#include "tools/pack/verify.h"

namespace shardfs::cli {

using cli::AppendString;
using cli::CommandLine;
using cli::Option;
using cli::SetFlag;
using cli::SetJobs;
using cli::SetNonZeroSize;
using cli::SetString;

namespace {

// Prints at most this many lines of one list (skipped entries, errors), then
// how many more there were.
constexpr size_t kListed = 1000;

void PrintList(log::Level level, std::string_view what, const std::vector<std::string>& lines) {
  for (size_t i = 0; i < lines.size() && i < kListed; ++i) {
    log::Write(level, fmt::format("{}: {}", what, lines[i]));
  }
  if (lines.size() > kListed) {
    log::Write(level, fmt::format("... and {} more", lines.size() - kListed));
  }
}

// pack's options, set into `o`.
std::vector<Option> PackOptionTable(pack::PackOptions* o) {
  return {
      {"out", 'o', "OUT_DIR", "where the shards and the index go (required)", SetString(&o->out)},
      {"shard-size", 0, "SIZE", "largest shard, trailer included (default 1GiB)",
       SetNonZeroSize(&o->shard_size, "--shard-size: bad size '{}'")},
      {"max-files", 0, "N", "members per shard at most (default: no limit)",
       SetNonZeroSize(&o->max_files, "--max-files: bad number '{}'")},
      {"name", 0, "PATTERN", "shard file names, one printf integer conversion",
       SetString(&o->name)},
      {"jobs", 'j', "N", "threads reading files ahead (default: twice the cores)",
       SetJobs(&o->jobs)},
      {"from-list", 0, "FILE", "only the paths FILE lists, samples in its order",
       SetString(&o->from_list)},
      {"shuffle", 0, "SEED", "samples in an order drawn from SEED, not the tree's or a list's",
       [o](const char* arg) {
         const std::optional<uint64_t> seed = ParseDecimal(arg);
         if (!seed) {
           return Status::InvalidArgument(fmt::format(
               "--shuffle: bad seed '{}' (a whole number from 0 to 18446744073709551615)", arg));
         }
         o->shuffle = true;
         o->shuffle_seed = *seed;
         return Status::Ok();
       }},
      {"exclude", 0, "GLOB", "leave out what matches (repeatable)", AppendString(&o->excludes)},
      {"skip-unreadable", 0, nullptr, "skip what cannot be read instead of failing",
       SetFlag(&o->skip_unreadable)},
      {"skip-special", 0, nullptr, "leave out sockets, FIFOs and devices",
       SetFlag(&o->skip_special)},
      {"follow-symlinks", 0, nullptr, "store what a symlink inside SRC_DIR names",
       SetFlag(&o->follow_symlinks)},
      {"quiet", 'q', nullptr, "no progress and no summary", SetFlag(&o->quiet)},
      {"force", 0, nullptr, "replace an earlier pack at OUT_DIR", SetFlag(&o->force)},
      {"from-index", 0, "INDEX", "pack a view of INDEX instead of a tree",
       SetString(&o->from_index)},
      {"view", 0, "VIEW", "the view to pack (with --from-index)", SetString(&o->view)},
      {"compress", 0, "CODEC", "zstd or gzip shards, readable by random access (default: none)",
       [o](const char* arg) {
         const std::string_view a = arg;
         if (a == "zstd") {
           o->compress = index::Codec::kZstd;
         } else if (a == "gzip") {
           o->compress = index::Codec::kGzip;
         } else if (a == "none") {
           o->compress = index::Codec::kNone;
         } else {
           return Status::InvalidArgument(
               fmt::format("--compress: '{}' is not zstd, gzip or none", a));
         }
         return Status::Ok();
       }},
      {"compress-level", 0, "N", "the codec's level (zstd default 3, gzip 6)",
       [o](const char* arg) {
         uint64_t n = 0;
         if (!ParseCount(arg, 0, 99, &n)) {
           return Status::InvalidArgument(fmt::format("--compress-level: bad level '{}'", arg));
         }
         o->compress_level = static_cast<int>(n);
         return Status::Ok();
       }},
      {"group-bytes", 0, "SIZE", "uncompressed bytes per compressed group (default 1M)",
       SetNonZeroSize(&o->group_bytes, "--group-bytes: bad size '{}'")},
      {"part", 0, "K/N", "only part K (0-based) of N, into OUT_DIR/part-K, for a job array",
       [o](const char* arg) { return builder::ParseShardPart(arg, &o->part); }},
      {"list-only", 0, "FILE", "write the tree's paths to FILE for --from-list; pack nothing",
       SetString(&o->list_only)}};
}

// Checks the options and the operands (`positional`) together, setting
// o->src. Returns -1 to go on, else the exit code (a usage error).
int CheckPackArgs(const std::vector<std::string>& positional, pack::PackOptions* o) {
  if (!o->list_only.empty()) {
    if (!o->out.empty() || o->part.count > 0 || !o->from_index.empty() || !o->from_list.empty() ||
        o->shuffle) {
      return UsageError("pack",
                        "--list-only takes no --out, --part, --from-index, --from-list or "
                        "--shuffle (the list is in tree order)");
    }
    if (positional.size() != 1) return UsageError("pack", "expected one SRC_DIR");
    o->src = positional[0];
    return -1;
  }
  if (o->out.empty()) return UsageError("pack", "--out OUT_DIR is required");
  if (o->part.count > 0 && !o->from_index.empty()) {
    return UsageError("pack", "--part packs a part of a SRC_DIR, not of --from-index");
  }
  if (!o->from_index.empty()) {
    if (!positional.empty()) return UsageError("pack", "--from-index takes no SRC_DIR");
    // A view already says which entries to keep.
    if (!o->from_list.empty() || !o->excludes.empty() || o->skip_unreadable || o->skip_special ||
        o->follow_symlinks) {
      return UsageError("pack",
                        "--from-index does not take --from-list, --exclude, "
                        "--skip-unreadable, --skip-special or --follow-symlinks");
    }
  } else {
    if (!o->view.empty()) return UsageError("pack", "--view needs --from-index");
    if (positional.size() != 1) return UsageError("pack", "expected one SRC_DIR");
    o->src = positional[0];
  }
  if (auto p = pack::ParseShardName(o->name); !p.ok()) {
    return UsageError("pack", p.status().message());
  }
  if (o->compress == index::Codec::kNone &&
      (o->compress_level >= 0 || o->group_bytes != pack::kDefaultGroupBytes)) {
    return UsageError("pack", "--compress-level and --group-bytes need --compress zstd|gzip");
  }
  return -1;
}

// Parses the command line into `o`. Returns -1 to go on, else the exit code.
int ParsePackArgs(int argc, char** argv, pack::PackOptions* o, indexref::IndexCacheOptions* co) {
  CommandLine cl{"pack",
                 "SRC_DIR --out OUT_DIR [--shuffle SEED] [--part K/N [--from-list FILE]]\n"
                 "SRC_DIR --list-only FILE\n"
                 "--from-index INDEX [--view VIEW] --out OUT_DIR",
                 PackOptionTable(o)};
  std::ranges::move(IndexCacheOptions(co), std::back_inserter(cl.options));
  std::vector<std::string> positional;
  if (int rc = ParseArgs(cl, argc, argv, &positional); rc >= 0) return rc;
  return CheckPackArgs(positional, o);
}

void LogPackSummary(const pack::PackReport& r) {
  double secs = std::max(r.seconds, 1e-9);
  log::Info(
      "packed {} files ({}), {} dirs, {} symlinks, {} hard links ({} stored again as a "
      "copy in a later shard) into {} shards ({}); skipped {}; {:.2f}s, {:.0f} files/s, "
      "{}/s; index at {}",
      r.files, HumanBytes(r.bytes), r.dirs, r.symlinks, r.hardlinks + r.link_copies, r.link_copies,
      r.shards, HumanBytes(r.shard_bytes), r.skipped.size(), secs, r.files / secs,
      HumanBytes(r.bytes / secs), r.index_path);
  if (r.tar_bytes > 0) {
    log::Info("compressed {} of tar into {} ({:.3f}x)", HumanBytes(r.tar_bytes),
              HumanBytes(r.shard_bytes),
              static_cast<double>(r.shard_bytes) / static_cast<double>(r.tar_bytes));
  }
}

}  // namespace

int RunPack(int argc, char** argv) {
  pack::PackOptions o;
  indexref::IndexCacheOptions co;
  if (int rc = ParsePackArgs(argc, argv, &o, &co); rc >= 0) return rc;
  if (o.quiet) log::SetLevel(log::Level::kWarning);
  indexref::IndexRef ref;
  index::ReaderOptions ro;
  if (!o.from_index.empty() && !ResolveIndexArg("pack", &o.from_index, co, &ro, &ref)) {
    return kExitFailure;
  }
  o.resolve_partition = ro.resolve_partition;

  pack::PackReport r;
  if (!o.list_only.empty()) {
    Status s = pack::ListSource(o, &r);
    for (const std::string& w : r.warnings) log::Warning("{}", w);
    if (!s.ok()) {
      log::Error("pack --list-only: {}; no list written", s.message());
      return kExitFailure;
    }
    log::Info("listed {} paths of {} in {}; {:.2f}s", r.listed, o.src, o.list_only, r.seconds);
    return kExitOk;
  }
  Status s = pack::Pack(o, &r);
  for (const std::string& w : r.warnings) log::Warning("{}", w);
  if (!s.ok()) {
    PrintList(log::Level::kError, "cannot pack", r.errors);
    log::Error("pack: {}; no index written", s.message());
    return kExitFailure;
  }
  PrintList(log::Level::kWarning, "skipped", r.skipped);
  if (o.part.count > 0) {
    if (r.part.taken == 0) {
      log::Warning("part {}/{} of {} unit(s) is empty: published an index with only the root",
                   o.part.index, o.part.count, r.part.units);
    }
    log::Info("part {}/{}: {} of the {} units (samples and other leaves){}", o.part.index,
              o.part.count, r.part.taken, r.part.units,
              o.from_list.empty() ? "" : fmt::format(" listed in {}", o.from_list));
  }
  LogPackSummary(r);
  return kExitOk;
}

int RunVerify(int argc, char** argv) {
  pack::VerifyOptions o;
  indexref::IndexCacheOptions co;
  CommandLine cl{
      "verify",
      "INDEX SRC_DIR\n--mounted MOUNTPOINT SRC_DIR",
      {{"mounted", 0, "MOUNTPOINT", "compare a mount instead of an index", SetString(&o.mounted)},
       {"full", 0, nullptr, "compare contents byte for byte", SetFlag(&o.full)},
       {"jobs", 'j', "N", "files compared at once (default: twice the cores)", SetJobs(&o.jobs)},
       {"quiet", 'q', nullptr, "no progress; differences and errors only", SetFlag(&o.quiet)}}};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> positional;
  if (int rc = ParseArgs(cl, argc, argv, &positional); rc >= 0) return rc;
  indexref::IndexRef ref;
  if (o.mounted.empty()) {
    if (positional.size() != 2) return UsageError("verify", "expected INDEX SRC_DIR");
    o.index = positional[0];
    o.src = positional[1];
    index::ReaderOptions ro;
    if (!ResolveIndexArg("verify", &o.index, co, &ro, &ref)) return kExitFailure;
    o.resolve_partition = ro.resolve_partition;
  } else {
    if (positional.size() != 1)
      return UsageError("verify", "expected --mounted MOUNTPOINT SRC_DIR");
    o.src = positional[0];
  }
  if (o.quiet) log::SetLevel(log::Level::kWarning);

  pack::VerifyReport r;
  Status s = pack::Verify(o, &r);
  if (!s.ok()) {
    log::Error("verify: {}", s.message());
    return kExitFailure;
  }
  for (const std::string& line : r.differences) fmt::print("{}\n", line);
  std::fflush(stdout);
  double secs = std::max(r.seconds, 1e-9);
  std::string what =
      fmt::format("{} source entries, {} packed entries, {} files ({}) compared in {:.2f}s ({}/s)",
                  r.source_entries, r.packed_entries, r.files_compared,
                  HumanBytes(r.bytes_compared), secs, HumanBytes(r.bytes_compared / secs));
  if (r.identical()) {
    log::Info("verify: identical: {}", what);
    return kExitOk;
  }
  std::vector<std::string> parts;
  for (const auto& [kind, n] : r.counts) parts.push_back(fmt::format("{} {}", n, kind));
  // A failed verify always says so, even with --quiet.
  log::Warning("verify: {} difference(s) ({}): {}", r.differences.size(), fmt::join(parts, ", "),
               what);
  return kExitFailure;
}

}  // namespace shardfs::cli
