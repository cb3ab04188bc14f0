// `shardfs view diff` and `shardfs view export` (tools/view_diff.h,
// tools/view_export.h): the logic lives in tools/, this file parses the
// command line and writes the text and JSON forms.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "base/json_writer.h"
#include "base/log.h"
#include "src/command.h"
#include "tools/view_diff.h"
#include "tools/view_export.h"

namespace shardfs::app {

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

std::string DiffJson(const tools::ViewDiff& d) {
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

std::string KeysJsonLines(const tools::ViewExport& ex) {
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
  const CommandLine cl{"view diff",
                       "INDEX VIEW_A VIEW_B",
                       {{"json", 0, nullptr, "one JSON object", SetFlag(&json)}}};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 3) return UsageError("view diff", "expected INDEX VIEW_A VIEW_B");
  auto diff = tools::DiffViews(args[0], args[1], args[2]);
  if (!diff.ok()) {
    log::Error("view diff: {}", diff.status().message());
    return kExitFailure;
  }
  // Differences are an answer, not a failure: exit 0 either way.
  return PrintAll("view diff", json ? DiffJson(*diff) : tools::FormatDiffText(*diff))
             ? kExitOk
             : kExitFailure;
}

int RunViewExport(int argc, char** argv) {
  std::string format, out;
  const CommandLine cl{
      "view export",
      "INDEX VIEW --format shards|keys",
      {{"format", 0, "shards|keys", "shard paths, or JSON lines of sample keys per shard",
        SetString(&format)},
       {"out", 0, "FILE", "write FILE (atomically) instead of standard output", SetString(&out)}}};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("view export", "expected INDEX VIEW");
  if (format.empty()) return UsageError("view export", "--format shards|keys is required");
  if (format != "shards" && format != "keys") {
    return UsageError("view export",
                      fmt::format("--format must be shards or keys, not '{}'", format));
  }
  auto ex = tools::ExportView(args[0], args[1]);
  if (!ex.ok()) {
    log::Error("view export: {}", ex.status().message());
    return kExitFailure;
  }
  std::string text = format == "shards" ? tools::FormatShardList(*ex) : KeysJsonLines(*ex);
  if (out.empty()) return PrintAll("view export", text) ? kExitOk : kExitFailure;
  Status s = tools::WriteFileAtomically(out, text);
  if (!s.ok()) {
    log::Error("view export: {}", s.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace shardfs::app
