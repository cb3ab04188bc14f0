// `shardfs mount` and `shardfs umount`: their command lines, then the
// mount's sequence (src/mount/mount_and_serve.h).
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/log.h"
#include "src/indexref/index_ref.h"
#include "src/mount/mount_and_serve.h"
#include "src/mount/mount_options.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

namespace {

using mount::MountArgs;

// The -o options for `mount --help`, one line each (src/mount/mount_options.h);
// the few long names push their help to the right rather than all of them.
std::string MountOptionHelp() {
  std::string out = "-o options (OPT[,OPT...]; others go to libfuse, such as allow_other):\n";
  for (const mount::MountOptionDoc& d : mount::MountOptionDocs()) {
    out += fmt::format("  {:<24}  {}\n", fmt::format("{}{}", d.name, d.value), d.help);
  }
  return out;
}

// Parses the command line into `a`. Returns -1 to go on, else the exit code.
int ParseMountArgs(int argc, char** argv, MountArgs* a) {
  std::vector<std::string> o_lists;
  const CommandLine cl{
      "mount",
      "INDEX MOUNTPOINT",
      {{"foreground", 'f', nullptr, "stay in the foreground", SetFlag(&a->foreground)},
       {nullptr, 'o', "OPT[,OPT...]", "mount options (man shardfs-mount(1))",
        AppendString(&o_lists)},
       {"check", 0, nullptr, "check every shard before mounting", SetFlag(&a->check)},
       {"kernel", 0, "[=auto]", "serve with the kernel's EROFS driver (auto: else with FUSE)",
        [&](const char* arg) {
          o_lists.push_back(arg ? fmt::format("kernel={}", arg) : "kernel");
          return Status::Ok();
        }},
       {"allow-missing-shards", 0, nullptr, "mount even if shards are missing",
        SetFlag(&a->allow_missing)},
       {"debug", 'd', nullptr, "-f -o debug",
        [&](const char*) {
          a->foreground = true;
          o_lists.push_back("debug");
          return Status::Ok();
        }}},
      Operands::kAfterOptions,
      MountOptionHelp()};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("mount", "expected INDEX MOUNTPOINT");
  std::error_code ec;
  a->index = indexref::IsIndexUrl(args[0])
                 ? args[0]
                 : std::filesystem::absolute(args[0], ec).lexically_normal().string();
  if (!ec) {
    a->mountpoint = std::filesystem::absolute(args[1], ec).lexically_normal().string();
  }
  if (ec) {
    log::Error("mount: cannot make paths absolute: {}", ec.message());
    return kExitFailure;
  }
  Status s = mount::ParseMountOptions(o_lists, &a->options);
  if (!s.ok()) return UsageError("mount", s.message());
  if (a->options.debug) log::SetLevel(log::Level::kDebug);
  for (const std::string& w : a->options.warnings) log::Warning("{}", w);
  return -1;
}

}  // namespace

int RunMount(int argc, char** argv) {
  MountArgs a;
  if (int rc = ParseMountArgs(argc, argv, &a); rc >= 0) return rc;
  return mount::Mount(std::move(a));
}

int RunUmount(int argc, char** argv) {
  const CommandLine cl{"umount", "MOUNTPOINT", {}, Operands::kVerbatim};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("umount", "expected MOUNTPOINT");
  return mount::Unmount(args[0]);
}

}  // namespace shardfs::cli
