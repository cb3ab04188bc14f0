// shardfs: one command with subcommands. See man/shardfs.1 and the page of
// each group of commands (man/shardfs-*.1).
#include <fmt/format.h>

#include <algorithm>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "base/log.h"
#include "base/temp_dirs.h"
#include "src/mount/prefill_lister.h"
#include "tools/cli/command.h"

#ifndef SHARDFS_VERSION
#define SHARDFS_VERSION "unknown"
#endif

namespace shardfs::cli {

namespace {

void PrintHelp() {
  fmt::print(
      "usage: shardfs COMMAND [OPTIONS] ...\n\n"
      "Tar shards as a read-only directory tree, through a RocksDB offset index.\n\n"
      "commands:\n");
  for (const Command& c : AllCommands()) fmt::print("  {:<12} {}\n", c.name, c.summary);
  fmt::print(
      "\n`shardfs COMMAND --help` shows a command's options; man shardfs(1) lists the\n"
      "pages that have them all.\n");
}

}  // namespace

}  // namespace shardfs::cli

namespace {

// Picks the command argv names and runs it. `*command` names it as soon as
// it is known, for the message of an exception that escapes it.
int Dispatch(int argc, char** argv, std::string* command) {
  using namespace shardfs::cli;
  if (argc < 2) {
    fmt::print(stderr, "shardfs: missing command (see shardfs --help)\n");
    return kExitUsage;
  }
  std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    PrintHelp();
    return kExitOk;
  }
  if (first == "--version" || first == "-V") {
    fmt::print("shardfs {}\n", SHARDFS_VERSION);
    return kExitOk;
  }
  for (const Command& c : AllCommands()) {
    std::string name = c.name;
    size_t space = name.find(' ');
    int words = 1;
    if (space != std::string::npos) {
      if (name.substr(0, space) != first || argc < 3 || name.substr(space + 1) != argv[2]) {
        continue;
      }
      words = 2;
    } else if (name != first) {
      continue;
    }
    *command = name;
    int sub_argc = argc - words;
    char** sub_argv = argv + words;
    return c.run(sub_argc, sub_argv);
  }
  if (first == "index" || first == "view") {
    std::string subs;
    for (const Command& c : AllCommands()) {
      std::string_view name = c.name;
      if (name.starts_with(first + " ")) {
        subs += subs.empty() ? "" : ", ";
        subs += fmt::format("'{}'", name.substr(first.size() + 1));
      }
    }
    fmt::print(stderr, "shardfs {}: expected one of {} (see shardfs --help)\n", first, subs);
    return kExitUsage;
  }
  fmt::print(stderr, "shardfs: unknown command '{}' (see shardfs --help)\n", first);
  return kExitUsage;
}

// The last word on an exception no command caught: one line, exit 1. Plain
// stdio, which cannot throw in turn.
int Unexpected(const std::string& command, const char* what) {
  std::fprintf(stderr, "shardfs%s%s: %s\n", command.empty() ? "" : " ", command.c_str(), what);
  return shardfs::cli::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  // Names in archives are bytes, and stay bytes: in the "C" locale
  // libarchive hands pax UTF-8 names through as they are stored (in a UTF-8
  // locale it would normalise them to NFC, naming paths tar never wrote).
  std::setlocale(LC_ALL, "C");
  if (const char* debug = std::getenv("SHARDFS_DEBUG"); debug && *debug && *debug != '0') {
    shardfs::log::SetLevel(shardfs::log::Level::kDebug);
  }
  // Commands report failures as a Status; an exception reaching here is a
  // bug or exhaustion (std::bad_alloc), and still gets a clear message and
  // exit 1 rather than std::terminate's abort.
  // Not a command: the daemon's own lister process (src/mount/prefill_lister.h).
  if (argc >= 2 && std::strcmp(argv[1], shardfs::mount::kPrefillListerArg) == 0) {
    return shardfs::mount::RunPrefillLister(argc, argv);
  }
  std::string command;
  int rc;
  try {
    rc = Dispatch(argc, argv, &command);
  } catch (const std::bad_alloc&) {
    rc = Unexpected(command, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    rc = Unexpected(command, e.what());
  } catch (...) {
    rc = Unexpected(command, "unexpected exception");
  }
  // A signal removing the command's temporary directories (base/temp_dirs.h)
  // may have made it fail: the process ends by that signal, as it would have.
  shardfs::AwaitSignalCleanup();
  return rc;
}
