// `shardfs pack` (from a directory tree or, with --from-index, from an index
// view) and `shardfs verify`.
#include <getopt.h>

#include <string>

#include <fmt/format.h>

#include "base/log.h"
#include "base/parse.h"
#include "src/command.h"
#include "tools/pack.h"
#include "tools/progress.h"
#include "tools/verify.h"

namespace shardfs::cli {
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

// Parses the command line into `o`. Returns -1 to go on, else the exit code.
int ParsePackArgs(int argc, char** argv, tools::PackOptions* o) {
  enum {
    kShardSize = 256, kMaxFiles, kName, kFromList, kExclude, kSkipUnreadable, kSkipSpecial,
    kFollow, kForce, kFromIndex, kView,
  };
  static const option kLong[] = {
      {"out", required_argument, nullptr, 'o'},
      {"shard-size", required_argument, nullptr, kShardSize},
      {"max-files", required_argument, nullptr, kMaxFiles},
      {"name", required_argument, nullptr, kName},
      {"jobs", required_argument, nullptr, 'j'},
      {"from-list", required_argument, nullptr, kFromList},
      {"exclude", required_argument, nullptr, kExclude},
      {"skip-unreadable", no_argument, nullptr, kSkipUnreadable},
      {"skip-special", no_argument, nullptr, kSkipSpecial},
      {"follow-symlinks", no_argument, nullptr, kFollow},
      {"quiet", no_argument, nullptr, 'q'},
      {"force", no_argument, nullptr, kForce},
      {"from-index", required_argument, nullptr, kFromIndex},
      {"view", required_argument, nullptr, kView},
      {nullptr, 0, nullptr, 0}};
  std::vector<std::string> positional;
  optind = 0;
  // Options may follow SRC_DIR ("shardfs pack SRC --out OUT"), so no '+'.
  for (int c; (c = getopt_long(argc, argv, "-o:j:q", kLong, nullptr)) != -1;) {
    switch (c) {
      case 1: positional.push_back(optarg); break;
      case 'o': o->out = optarg; break;
      case kShardSize:
        if (!ParseSize(optarg, &o->shard_size) || o->shard_size == 0) {
          return UsageError("pack", fmt::format("--shard-size: bad size '{}'", optarg));
        }
        break;
      case kMaxFiles: {
        uint64_t n = 0;
        if (!ParseSize(optarg, &n) || n == 0) {
          return UsageError("pack", fmt::format("--max-files: bad number '{}'", optarg));
        }
        o->max_files = n;
        break;
      }
      case kName: o->name = optarg; break;
      case 'j':
        if (!ParseJobs(optarg, &o->jobs)) return UsageError("pack", "-j needs a count 1..4096");
        break;
      case kFromList: o->from_list = optarg; break;
      case kExclude: o->excludes.push_back(optarg); break;
      case kSkipUnreadable: o->skip_unreadable = true; break;
      case kSkipSpecial: o->skip_special = true; break;
      case kFollow: o->follow_symlinks = true; break;
      case 'q': o->quiet = true; break;
      case kForce: o->force = true; break;
      case kFromIndex: o->from_index = optarg; break;
      case kView: o->view = optarg; break;
      default: return UsageError("pack", "unknown option");
    }
  }
  for (int i = optind; i < argc; ++i) positional.push_back(argv[i]);
  if (o->out.empty()) return UsageError("pack", "--out OUT_DIR is required");
  if (!o->from_index.empty()) {
    if (!positional.empty()) return UsageError("pack", "--from-index takes no SRC_DIR");
    // A view already says which entries to keep.
    if (!o->from_list.empty() || !o->excludes.empty() || o->skip_unreadable || o->skip_special ||
        o->follow_symlinks) {
      return UsageError("pack", "--from-index does not take --from-list, --exclude, "
                                "--skip-unreadable, --skip-special or --follow-symlinks");
    }
  } else {
    if (!o->view.empty()) return UsageError("pack", "--view needs --from-index");
    if (positional.size() != 1) return UsageError("pack", "expected one SRC_DIR");
    o->src = positional[0];
  }
  if (auto p = tools::ParseShardName(o->name); !p.ok()) {
    return UsageError("pack", p.status().message());
  }
  return -1;
}

void LogPackSummary(const tools::PackReport& r) {
  double secs = std::max(r.seconds, 1e-9);
  log::Info("packed {} files ({}), {} dirs, {} symlinks, {} hard links ({} stored again as a "
            "copy in a later shard) into {} shards ({}); skipped {}; {:.2f}s, {:.0f} files/s, "
            "{}/s; index at {}",
            r.files, tools::HumanBytes(r.bytes), r.dirs, r.symlinks, r.hardlinks + r.link_copies,
            r.link_copies, r.shards,
            tools::HumanBytes(r.shard_bytes), r.skipped.size(), secs, r.files / secs,
            tools::HumanBytes(r.bytes / secs), r.index_path);
}

}  // namespace

int RunPack(int argc, char** argv) {
  tools::PackOptions o;
  if (int rc = ParsePackArgs(argc, argv, &o); rc >= 0) return rc;
  if (o.quiet) log::SetLevel(log::Level::kWarning);

  tools::PackReport r;
  Status s = tools::Pack(o, &r);
  for (const std::string& w : r.warnings) log::Warning("{}", w);
  if (!s.ok()) {
    PrintList(log::Level::kError, "cannot pack", r.errors);
    log::Error("pack: {}; no index written", s.message());
    return kExitFailure;
  }
  PrintList(log::Level::kWarning, "skipped", r.skipped);
  LogPackSummary(r);
  return kExitOk;
}

int RunVerify(int argc, char** argv) {
  enum { kMounted = 256, kFull };
  static const option kLong[] = {{"mounted", required_argument, nullptr, kMounted},
                                 {"full", no_argument, nullptr, kFull},
                                 {"jobs", required_argument, nullptr, 'j'},
                                 {"quiet", no_argument, nullptr, 'q'},
                                 {nullptr, 0, nullptr, 0}};
  tools::VerifyOptions o;
  std::vector<std::string> positional;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "-j:q", kLong, nullptr)) != -1;) {
    switch (c) {
      case 1: positional.push_back(optarg); break;
      case kMounted: o.mounted = optarg; break;
      case kFull: o.full = true; break;
      case 'j':
        if (!ParseJobs(optarg, &o.jobs)) return UsageError("verify", "-j needs a count 1..4096");
        break;
      case 'q': o.quiet = true; break;
      default: return UsageError("verify", "unknown option");
    }
  }
  for (int i = optind; i < argc; ++i) positional.push_back(argv[i]);
  if (o.mounted.empty()) {
    if (positional.size() != 2) return UsageError("verify", "expected INDEX SRC_DIR");
    o.index = positional[0];
    o.src = positional[1];
  } else {
    if (positional.size() != 1) return UsageError("verify", "expected --mounted MOUNTPOINT SRC_DIR");
    o.src = positional[0];
  }
  if (o.quiet) log::SetLevel(log::Level::kWarning);

  tools::VerifyReport r;
  Status s = tools::Verify(o, &r);
  if (!s.ok()) {
    log::Error("verify: {}", s.message());
    return kExitFailure;
  }
  for (const std::string& line : r.differences) fmt::print("{}\n", line);
  std::fflush(stdout);
  double secs = std::max(r.seconds, 1e-9);
  std::string what = fmt::format(
      "{} source entries, {} packed entries, {} files ({}) compared in {:.2f}s ({}/s)",
      r.source_entries, r.packed_entries, r.files_compared, tools::HumanBytes(r.bytes_compared),
      secs, tools::HumanBytes(r.bytes_compared / secs));
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
