// `shardfs stats`, `shardfs cache warm`, `shardfs cache drop`: requests to a
// running mount's daemon over its control socket (src/control_server.h).
#include <getopt.h>

#include <string>
#include <vector>

#include "base/log.h"
#include "src/command.h"
#include "src/control_server.h"

namespace shardfs::cli {

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
  static const option kLong[] = {{"json", no_argument, nullptr, 'j'},
                                 {"shards", no_argument, nullptr, 's'},
                                 {nullptr, 0, nullptr, 0}};
  std::vector<std::string> words{"stats"};
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "+", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'j': words.push_back("json"); break;
      case 's': words.push_back("shards"); break;
      default: return UsageError("stats", "unknown option");
    }
  }
  if (argc - optind != 1) return UsageError("stats", "expected MOUNTPOINT");
  return Ask("stats", argv[optind], words);
}

int RunCacheWarm(int argc, char** argv) {
  if (argc < 2) return UsageError("cache warm", "expected MOUNTPOINT [PATH...]");
  std::vector<std::string> words{"warm"};
  // Paths inside the mount, relative to its root ("a/b" or "/a/b").
  for (int i = 2; i < argc; ++i) words.push_back(argv[i]);
  // As long as the fetches take: the daemon answers once they are done.
  return Ask("cache warm", argv[1], words, /*reply_timeout_ms=*/0);
}

int RunCacheDrop(int argc, char** argv) {
  if (argc != 2) return UsageError("cache drop", "expected MOUNTPOINT");
  return Ask("cache drop", argv[1], {"drop"});
}

}  // namespace shardfs::cli
