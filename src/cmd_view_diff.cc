// `shardfs view diff` and `shardfs view export` (tools/view_diff.h,
// tools/view_export.h).
#include "base/log.h"
#include "src/command.h"

namespace shardfs::cli {

int RunViewDiff(int, char**) {
  log::Error("view diff: not built yet");
  return kExitFailure;
}
int RunViewExport(int, char**) {
  log::Error("view export: not built yet");
  return kExitFailure;
}

}  // namespace shardfs::cli
