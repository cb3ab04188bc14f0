// The `shardfs` command line: one unit per subcommand, with its name, a short
// help text and a run function (RocksDB ldb's one class per command).
// Exit codes: 0 ok, 1 failure, 2 usage.
#ifndef SHARDFS_TOOLS_CLI_COMMAND_H_
#define SHARDFS_TOOLS_CLI_COMMAND_H_

#include <string>
#include <vector>

#include "index/index_reader.h"
#include "src/archive/nested_scan.h"
#include "src/indexref/index_ref.h"
#include "tools/builder/index_build.h"
#include "tools/cli/cli_options.h"

namespace shardfs::cli {
struct RemoteLimits;
struct NestOptions;
}  // namespace shardfs::cli

namespace shardfs::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The options and operands of each are a table in its run function
// (tools/cli/cli_options.h), from which its `--help` is printed too.
struct Command {
  const char* name;     // "index build", "ls", ...
  const char* summary;  // One line for `shardfs --help` and `shardfs NAME --help`.
  // argv[0] is the command name; returns the exit code.
  int (*run)(int argc, char** argv);
};

// Every command, in the order `shardfs --help` lists them.
const std::vector<Command>& AllCommands();

// Prints "shardfs NAME: REASON (see shardfs NAME --help)" and returns 2.
int UsageError(const char* command, const std::string& reason);

// Parses argv by `cl` (tools/cli/cli_options.h) into `*operands`. Returns -1 to go
// on, else the exit code: 0 once `--help` is printed, 2 after a usage error.
int ParseArgs(const cli::CommandLine& cl, int argc, char** argv,
              std::vector<std::string>* operands);

// --max-shard-size and --max-list-pages, for every command that reads remote
// shards (cmd_index.cc).
std::vector<cli::Option> RemoteLimitOptions(builder::RemoteLimits* limits);
// --recursive and its companions (src/archive/nested_scan.h), and --max-zip-ratio
// (every zip's bomb bound, with or without --recursive), for `index build`
// and `index add`; CheckNestOptions: the usage error for a companion given
// without --recursive, or "".
std::vector<cli::Option> NestOptionTable(archive::NestOptions* nest);
std::string CheckNestOptions(const archive::NestOptions& nest);

// --view VIEW, for the commands that read one view of an index (cmd_ls.cc).
cli::Option ViewOption(std::string* view);

// --cache-dir DIR and --max-index-size SIZE, for every command that reads an
// index, which may be given by URL or as a bundle (cmd_ls.cc).
std::vector<cli::Option> IndexCacheOptions(indexref::IndexCacheOptions* o);

// Resolves the INDEX argument `*index` in place (src/indexref/index_ref.h):
// a URL is fetched and a bundle unpacked into the index cache, and `*index`
// becomes the copy's path, which `*ref` holds; sets ro->resolve_partition
// (when `ro` is not null). Logs the error and returns false on failure.
bool ResolveIndexArg(const char* command, std::string* index, const indexref::IndexCacheOptions& o,
                     index::ReaderOptions* ro, indexref::IndexRef* ref);

// Logs why `command` cannot write into the INDEX argument `index` (a URL or
// a bundle) and returns false; true for a local index.
bool WritableIndexArg(const char* command, const std::string& index);

// Commands, defined in cmd_*.cc.
int RunIndexBuild(int argc, char** argv);
int RunIndexInfo(int argc, char** argv);
int RunIndexBundle(int argc, char** argv);
int RunIndexManifest(int argc, char** argv);
int RunLs(int argc, char** argv);
int RunStat(int argc, char** argv);
int RunMount(int argc, char** argv);
int RunUmount(int argc, char** argv);
int RunPack(int argc, char** argv);
int RunVerify(int argc, char** argv);
// Views and versions (cmd_view.cc, cmd_view_diff.cc).
int RunIndexAdd(int argc, char** argv);
int RunViewCreate(int argc, char** argv);
int RunViewLs(int argc, char** argv);
int RunViewLog(int argc, char** argv);
int RunViewDiff(int argc, char** argv);
int RunViewRm(int argc, char** argv);
int RunViewTag(int argc, char** argv);
int RunViewExport(int argc, char** argv);
// A running mount's counters and cache (cmd_stats.cc).
int RunStats(int argc, char** argv);
int RunCacheWarm(int argc, char** argv);
int RunCacheDrop(int argc, char** argv);
// The benchmark of the source tree, run with the arguments (cmd_bench.cc).
int RunBench(int argc, char** argv);
// Where `shardfs bench` finds the benchmark script: below `env_root`
// ($SHARDFS_SOURCE_ROOT) when it is set and not empty, else below the source
// tree this binary was configured from.
std::string BenchScriptPath(const char* env_root);
// The interpreter, `script`, then argv[1..argc): what `shardfs bench` runs.
std::vector<std::string> BenchArgv(const std::string& script, int argc, char** argv);

}  // namespace shardfs::cli

#endif  // SHARDFS_TOOLS_CLI_COMMAND_H_
