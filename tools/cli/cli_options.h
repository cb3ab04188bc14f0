// The one option parser of the `shardfs` commands. A command declares its
// options as data, a table of {long name, short name, argument, help, setter},
// and keeps only its run logic; `--help` is printed from the same table, so
// help and parsing cannot drift.
//
// The grammar is getopt_long's: `--name`, `--name=VALUE`, `--name VALUE`, a
// long name shortened to any unique prefix, `-x`, `-xVALUE`, `-x VALUE`,
// flags bundled (`-qF`), `--` ending the options, `-` an operand.
#ifndef SHARDFS_TOOLS_CLI_CLI_OPTIONS_H_
#define SHARDFS_TOOLS_CLI_CLI_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardfs::cli {

// What an option does when given: `arg` is its argument, nullptr for a flag.
// A non-ok Status is a usage error whose message is the reason
// ("-j needs a count 1..4096").
using OptionSetter = std::function<Status(const char* arg)>;

struct Option {
  const char* name;  // Long name without "--"; nullptr if the option has none.
  char short_name;   // 0 if none.
  // The argument's name in help ("INDEX"); nullptr for a flag. One in
  // brackets ("[=WHEN]") is optional and given only as `--name=VALUE`; the
  // setter gets nullptr without it. Long options only.
  const char* arg;
  const char* help;  // One line for `--help`.
  OptionSetter set;
};

// Where the operands may stand.
enum class Operands {
  kAnywhere,      // Before, between or after the options (getopt's permuting order).
  kAfterOptions,  // The first operand ends the options (getopt's "+").
  kVerbatim,      // No options: every argument is an operand, "--" and "-x" too.
};

struct CommandLine {
  const char* command;  // "index build"
  // What follows "shardfs COMMAND [OPTIONS]" in the usage line; a '\n' starts
  // another form of the command.
  const char* synopsis;
  std::vector<Option> options;
  Operands operands = Operands::kAnywhere;
  // Printed by `--help` after the options ("" for nothing): more to choose
  // from, such as the mount's -o options. Ends with a newline.
  std::string more_help = {};
};

struct ParsedArgs {
  // `--help` or `-h` stood before any "--": nothing else was parsed.
  bool help = false;
  std::vector<std::string> operands;  // In the order given.
};

// Parses argv[1..argc) by `cl` (argv[0] is the command's name), calling each
// option's setter in command-line order. Returns InvalidArgument naming the
// bad option ("unknown option '--bogus'", "option '--out' needs an
// argument"), or the first error a setter returns.
Result<ParsedArgs> ParseCommandLine(const CommandLine& cl, int argc, char* const* argv);

// `shardfs COMMAND --help`: the usage line(s), `summary`, every option of the
// table with its help, `more_help`, and where all options are described (the
// man page).
std::string FormatHelp(const CommandLine& cl, std::string_view summary);

// The man page of `command` ("index build", "mount", ...): its group's page
// (shardfs-index, shardfs-view, shardfs-mount, shardfs-pack), else shardfs.
std::string_view ManPageOf(std::string_view command);

// Setters for the common cases.
OptionSetter SetFlag(bool* flag, bool value = true);
OptionSetter SetString(std::string* value);
OptionSetter AppendString(std::vector<std::string>* values);
// -j: a thread count 1..4096 (base/parse.h ParseJobs).
OptionSetter SetJobs(int* jobs);
// A size such as 64G, not 0 (base/parse.h ParseSize); else the usage error
// `error`, in which "{}" stands for the argument.
OptionSetter SetNonZeroSize(uint64_t* size, std::string error);

}  // namespace shardfs::cli

#endif  // SHARDFS_TOOLS_CLI_CLI_OPTIONS_H_
