// `shardfs view create|ls|log|rm|tag` and `shardfs index add`: the named
// views and versions of an index (index/view_store.h).
#include <fmt/format.h>

#include "base/log.h"
#include "src/command.h"

namespace shardfs::cli {
namespace {

int NotYet(const char* command) {
  log::Error("{}: not built yet", command);
  return kExitFailure;
}

}  // namespace

int RunIndexAdd(int, char**) { return NotYet("index add"); }
int RunViewCreate(int, char**) { return NotYet("view create"); }
int RunViewLs(int, char**) { return NotYet("view ls"); }
int RunViewLog(int, char**) { return NotYet("view log"); }
int RunViewRm(int, char**) { return NotYet("view rm"); }
int RunViewTag(int, char**) { return NotYet("view tag"); }

}  // namespace shardfs::cli
