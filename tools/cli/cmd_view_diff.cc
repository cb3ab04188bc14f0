// `shardfs view diff` and `shardfs view export` (tools/builder/view_diff.h,
// tools/builder/view_export.h): the logic lives in builder/, this file parses the
// command line and writes the text and JSON forms.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>

#include "base/json_writer.h"
#include "base/log.h"
#include "base/parse.h"
#include "index/index_reader.h"
#include "tools/builder/rank_export.h"
#include "tools/builder/view_diff.h"
#include "tools/builder/view_export.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

using cli::CommandLine;
using cli::SetFlag;
using cli::SetString;

namespace {

// Writes `bytes` to stdout; false (after logging) if stdout refused them.
bool PrintAll(const char* command, std::string_view bytes) {
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size();
  ok = std::fflush(stdout) == 0 && ok;
  if (!ok) log::Error("{}: writing to standard output failed", command);
  return ok;
}

std::string JsonStringArray(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out.push_back(',');
    AppendJsonString(&out, items[i]);
  }
  out.push_back(']');
  return out;
}

std::string DiffJson(const builder::ViewDiff& d) {
  std::string renamed = "[";
  for (size_t i = 0; i < d.renamed.size(); ++i) {
    if (i) renamed.push_back(',');
    renamed += JsonObject().Str("from", d.renamed[i].from).Str("to", d.renamed[i].to).Finish();
  }
  renamed.push_back(']');
  return JsonObject()
             .Str("a", d.a)
             .Str("b", d.b)
             .Raw("added", JsonStringArray(d.added))
             .Raw("removed", JsonStringArray(d.removed))
             .Raw("renamed", renamed)
             .Raw("replaced", JsonStringArray(d.replaced))
             .Finish() +
         "\n";
}

std::string KeysJsonLines(const builder::ViewExport& ex) {
  std::string out;
  for (const auto& sh : ex.shards) {
    out += JsonObject().Str("shard", sh.path).Raw("keys", JsonStringArray(sh.keys)).Finish();
    out.push_back('\n');
  }
  return out;
}

}  // namespace

// Options may follow the operands (`view export IDX VIEW --format keys`):
// view names cannot start with '-'.
int RunViewDiff(int argc, char** argv) {
  bool json = false;
  indexref::IndexCacheOptions co;
  CommandLine cl{"view diff",
                 "INDEX VIEW_A VIEW_B",
                 {{"json", 0, nullptr, "one JSON object", SetFlag(&json)}}};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 3) return UsageError("view diff", "expected INDEX VIEW_A VIEW_B");
  indexref::IndexRef ref;
  index::ReaderOptions ro;
  if (!ResolveIndexArg("view diff", &args[0], co, &ro, &ref)) return kExitFailure;
  auto diff = builder::DiffViews(args[0], args[1], args[2], ro.resolve_partition);
  if (!diff.ok()) {
    log::Error("view diff: {}", diff.status().message());
    return kExitFailure;
  }
  // Differences are an answer, not a failure: exit 0 either way.
  return PrintAll("view diff", json ? DiffJson(*diff) : builder::FormatDiffText(*diff))
             ? kExitOk
             : kExitFailure;
}

// --format index: the view (one rank's share with --rank/--world) as an
// index of its own (tools/builder/rank_export.h).
int ExportAsIndex(const std::vector<std::string>& args, const index::ReaderOptions& ro,
                  const std::string& out, bool force) {
  if (out.empty()) return UsageError("view export", "--format index needs --out DIR");
  auto reader = index::IndexReader::Open(args[0], ro);
  if (!reader.ok()) {
    log::Error("view export: {}", reader.status().message());
    return kExitFailure;
  }
  index::WriteOptions wo;
  wo.force = force;
  wo.created_by = "shardfs view export";
  wo.build_options = fmt::format(
      "view export {} {}{}", args[0], (*reader)->version().label(),
      ro.world ? fmt::format(" rank {} of {} seed {}", ro.rank, ro.world, ro.seed) : "");
  auto stats = builder::ExportIndex(**reader, out, wo);
  if (!stats.ok()) {
    log::Error("view export: {}", stats.status().message());
    return kExitFailure;
  }
  log::Info("view export: {} entries in {} shards: index {} ({} bytes)", stats->entries,
            stats->shards, out, stats->written.index_bytes);
  return kExitOk;
}

int RunViewExport(int argc, char** argv) {
  std::string format, out;
  index::ReaderOptions ro;
  bool force = false, rank_set = false, world_set = false, seed_set = false;
  auto count = [](uint32_t* v, bool* set, const char* what) {
    return [v, set, what](const char* arg) {
      uint64_t n = 0;
      if (!ParseCount(arg, 0, 1u << 20, &n)) {
        return Status::InvalidArgument(fmt::format("--{} needs a number, not '{}'", what, arg));
      }
      *v = static_cast<uint32_t>(n);
      if (set) *set = true;
      return Status::Ok();
    };
  };
  indexref::IndexCacheOptions co;
  CommandLine cl{
      "view export",
      "INDEX VIEW --format shards|keys\nINDEX VIEW --format index --out DIR [--rank K --world N]",
      {{"format", 0, "shards|keys|index",
        "shard paths, JSON lines of sample keys per shard, or an index of its own",
        SetString(&format)},
       {"out", 0, "FILE", "write FILE (atomically) instead of standard output (index: DIR)",
        SetString(&out)},
       {"rank", 0, "K", "index: rank K's share (with --world)", count(&ro.rank, &rank_set, "rank")},
       {"world", 0, "N", "index: of N ranks", count(&ro.world, &world_set, "world")},
       {"seed", 0, "S", "index: the partition's seed (as -o seed)",
        [&ro, &seed_set](const char* arg) {
          seed_set = true;
          std::optional<uint64_t> seed = ParseDecimal(arg);
          if (!seed)
            return Status::InvalidArgument(fmt::format("--seed needs a number, not '{}'", arg));
          ro.seed = *seed;
          return Status::Ok();
        }},
       {"force", 0, nullptr, "index: replace an index at DIR", SetFlag(&force)}}};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("view export", "expected INDEX VIEW");
  if (format.empty()) return UsageError("view export", "--format shards|keys|index is required");
  if (format != "shards" && format != "keys" && format != "index") {
    return UsageError("view export",
                      fmt::format("--format must be shards, keys or index, not '{}'", format));
  }
  if (format != "index" && (rank_set || world_set || seed_set || force)) {
    return UsageError("view export", "--rank, --world, --seed and --force go with --format index");
  }
  if (rank_set != world_set || (world_set && ro.rank >= ro.world)) {
    return UsageError("view export", "--rank K and --world N go together, with K < N");
  }
  indexref::IndexRef ref;
  if (!ResolveIndexArg("view export", &args[0], co, &ro, &ref)) return kExitFailure;
  if (format == "index") {
    ro.view = args[1];
    return ExportAsIndex(args, ro, out, force);
  }
  auto ex = builder::ExportView(args[0], args[1], ro.resolve_partition);
  if (!ex.ok()) {
    log::Error("view export: {}", ex.status().message());
    return kExitFailure;
  }
  std::string text = format == "shards" ? builder::FormatShardList(*ex) : KeysJsonLines(*ex);
  if (out.empty()) return PrintAll("view export", text) ? kExitOk : kExitFailure;
  Status s = builder::WriteFileAtomically(out, text);
  if (!s.ok()) {
    log::Error("view export: {}", s.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace shardfs::cli
