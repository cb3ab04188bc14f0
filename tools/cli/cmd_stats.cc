// `shardfs stats`, `shardfs cache warm`, `shardfs cache drop`: requests to a
// running mount's daemon over its control socket (src/mount/control_server.h).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json_writer.h"
#include "base/log.h"
#include "src/mount/control_server.h"
#include "src/mount/kernel_mount.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

using cli::CommandLine;
using cli::Operands;

namespace {

int Ask(const char* command, const std::string& mountpoint, const std::vector<std::string>& words,
        int reply_timeout_ms = mount::kControlReplyTimeoutMs) {
  Result<std::string> answer = mount::ControlRequest(mountpoint, words, reply_timeout_ms);
  if (!answer.ok()) {
    std::string msg = answer.status().message();
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    log::Error("{}: {}", command, msg);
    return kExitFailure;
  }
  fmt::print("{}", *answer);
  return kExitOk;
}

}  // namespace

int RunStats(int argc, char** argv) {
  std::vector<std::string> words{"stats"};
  auto ask_for = [&words](const char* word) {
    return [&words, word](const char*) {
      words.push_back(word);
      return Status::Ok();
    };
  };
  const CommandLine cl{
      "stats",
      "MOUNTPOINT",
      {{"json", 0, nullptr, "one JSON object", ask_for("json")},
       {"shards", 0, nullptr, "also the counters of each shard", ask_for("shards")}},
      Operands::kAfterOptions};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("stats", "expected MOUNTPOINT");
  // A kernel mount has no daemon to ask: what serves it is all there is.
  std::string image;
  if (mount::IsKernelMount(std::filesystem::absolute(args[0]).lexically_normal().string(),
                           &image)) {
    bool json = std::find(words.begin(), words.end(), "json") != words.end();
    if (json) {
      fmt::print("{}\n", JsonObject().Str("path", "kernel").Str("image", image).Finish());
    } else {
      fmt::print("path: kernel (EROFS image {}; no daemon, no counters)\n", image);
    }
    return kExitOk;
  }
  return Ask("stats", args[0], words);
}

// No options: a PATH is a path inside the mount, whatever it begins with.
int RunCacheWarm(int argc, char** argv) {
  const CommandLine cl{
      "cache warm", "MOUNTPOINT [PATH...]   (no PATH: the whole view)", {}, Operands::kVerbatim};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.empty()) return UsageError("cache warm", "expected MOUNTPOINT [PATH...]");
  std::vector<std::string> words{"warm"};
  // Paths inside the mount, relative to its root ("a/b" or "/a/b").
  words.insert(words.end(), args.begin() + 1, args.end());
  // As long as the fetches take: the daemon answers once they are done.
  return Ask("cache warm", args[0], words, /*reply_timeout_ms=*/0);
}

int RunCacheDrop(int argc, char** argv) {
  const CommandLine cl{"cache drop", "MOUNTPOINT", {}, Operands::kVerbatim};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("cache drop", "expected MOUNTPOINT");
  return Ask("cache drop", args[0], {"drop"});
}

}  // namespace shardfs::cli
