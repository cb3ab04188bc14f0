// `shardfs bench`: runs the benchmark script of the source tree with the
// remaining arguments; its --help is the benchmark's. tools/cli/meson.build
// says where the script is and which interpreter runs it.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/cli/command.h"

#ifndef SHARDFS_BENCH_SCRIPT
#define SHARDFS_BENCH_SCRIPT ""
#endif
#ifndef SHARDFS_CONFIGURED_SOURCE_ROOT
#define SHARDFS_CONFIGURED_SOURCE_ROOT ""
#endif
#ifndef SHARDFS_CONFIGURED_BUILD_ROOT
#define SHARDFS_CONFIGURED_BUILD_ROOT ""
#endif
#ifndef SHARDFS_BENCH_PYTHON
#define SHARDFS_BENCH_PYTHON "python3"
#endif

namespace shardfs::cli {

namespace {

// Sets the environment variable `name` to `value` unless it is set or
// `value` is empty.
void DefaultEnv(const char* name, const std::string& value) {
  if (!value.empty()) setenv(name, value.c_str(), /*overwrite=*/0);
}

}  // namespace

std::string BenchScriptPath(const char* env_root) {
  const bool from_env = env_root && *env_root;
  std::string root = from_env ? env_root : SHARDFS_CONFIGURED_SOURCE_ROOT;
  if (root.empty()) root = ".";
  return fmt::format("{}/{}", root, SHARDFS_BENCH_SCRIPT);
}

std::vector<std::string> BenchArgv(const std::string& script, int argc, char** argv) {
  std::vector<std::string> out = {SHARDFS_BENCH_PYTHON, script};
  out.insert(out.end(), argv + 1, argv + argc);
  return out;
}

// Every argument is the benchmark's, --help too: it lists the benchmark's
// options. The benchmark measures this very binary ($SHARDFS, its
// --shardfs, unless set) and the bench_reader of the build tree this binary
// comes from ($SHARDFS_BUILD_ROOT, its --build-dir, unless set).
int RunBench(int argc, char** argv) {
  const std::string script = BenchScriptPath(std::getenv("SHARDFS_SOURCE_ROOT"));
  if (access(script.c_str(), R_OK) != 0) {
    fmt::print(stderr,
               "shardfs bench: no benchmark at {} ({}): it runs from a shardfs source tree; "
               "set SHARDFS_SOURCE_ROOT to one\n",
               script, std::strerror(errno));
    return kExitFailure;
  }
  std::error_code ec;
  DefaultEnv("SHARDFS", std::filesystem::read_symlink("/proc/self/exe", ec).string());
  DefaultEnv("SHARDFS_BUILD_ROOT", SHARDFS_CONFIGURED_BUILD_ROOT);
  std::vector<std::string> args = BenchArgv(script, argc, argv);
  std::vector<char*> exec_argv;
  for (std::string& a : args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(exec_argv[0], exec_argv.data());
  fmt::print(stderr, "shardfs bench: cannot run {} {}: {}\n", args[0], script,
             std::strerror(errno));
  return kExitFailure;
}

}  // namespace shardfs::cli
