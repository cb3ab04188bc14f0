// The command table and what every command's parser shares
// (tools/cli/command.h).
#include "tools/cli/command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardfs::cli {

const std::vector<Command>& AllCommands() {
  static const std::vector<Command> kCommands = {
      {"index build", "scan tar shards and write an index", RunIndexBuild},
      {"index add", "append shards to an index as a new version of the full tree", RunIndexAdd},
      {"index info", "what an index holds", RunIndexInfo},
      {"index bundle", "an index as one tar file, to serve by URL", RunIndexBundle},
      {"index manifest", "one tree from several indexes (partitions)", RunIndexManifest},
      {"ls", "list a directory of the indexed tree", RunLs},
      {"stat", "entries of the indexed tree, with their shards and offsets", RunStat},
      {"view create", "make a new version of a named view (a subset, renames)", RunViewCreate},
      {"view ls", "the views of an index", RunViewLs},
      {"view log", "the versions of a view", RunViewLog},
      {"view diff", "what changed between two views or versions", RunViewDiff},
      {"view rm", "remove a view or one version of it", RunViewRm},
      {"view tag", "name a version of a view", RunViewTag},
      {"view export", "a view as shard lists and sample keys, for WebDataset-style readers",
       RunViewExport},
      {"mount", "mount an index as a read-only filesystem", RunMount},
      {"umount", "unmount a shardfs mount", RunUmount},
      {"stats", "a mount's reads, fetches, cache and requests", RunStats},
      {"cache warm", "fetch files of a mount into its chunk cache", RunCacheWarm},
      {"cache drop", "empty a mount's chunk cache", RunCacheDrop},
      {"pack", "pack a directory tree (or a view of an index) into tar shards and an index",
       RunPack},
      {"verify", "compare a packed tree with its source", RunVerify},
      {"bench", "run the benchmark of the source tree (shardfs_bench.py)", RunBench},
  };
  return kCommands;
}

int UsageError(const char* command, const std::string& reason) {
  fmt::print(stderr, "shardfs {}: {} (see shardfs {} --help)\n", command, reason, command);
  return kExitUsage;
}

int ParseArgs(const CommandLine& cl, int argc, char** argv, std::vector<std::string>* operands) {
  Result<ParsedArgs> parsed = ParseCommandLine(cl, argc, argv);
  if (!parsed.ok()) return UsageError(cl.command, parsed.status().message());
  if (parsed->help) {
    std::string_view name = cl.command;
    auto c = std::find_if(AllCommands().begin(), AllCommands().end(),
                          [&](const Command& c) { return name == c.name; });
    fmt::print("{}", FormatHelp(cl, c != AllCommands().end() ? c->summary : ""));
    return kExitOk;
  }
  *operands = std::move(parsed->operands);
  return -1;
}

}  // namespace shardfs::cli
