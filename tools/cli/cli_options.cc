#include "tools/cli/cli_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/parse.h"

namespace shardfs::cli {
namespace {

// How the option is spelled in messages: "--out", or "-o" if it has no long name.
std::string Spelling(const Option& o) {
  return o.name ? fmt::format("--{}", o.name) : fmt::format("-{}", o.short_name);
}

// Finds `--name` as getopt_long does: an exact name, else a unique prefix.
Result<const Option*> FindLong(const std::vector<Option>& options, std::string_view name) {
  std::vector<const Option*> prefixed;
  for (const Option& o : options) {
    if (!o.name) continue;
    if (name == o.name) return &o;
    if (std::string_view(o.name).starts_with(name)) prefixed.push_back(&o);
  }
  if (prefixed.size() == 1) return prefixed[0];
  if (prefixed.empty()) return Status::InvalidArgument(fmt::format("unknown option '--{}'", name));
  std::vector<std::string> names;
  for (const Option* o : prefixed) names.push_back(Spelling(*o));
  return Status::InvalidArgument(
      fmt::format("option '--{}' is ambiguous ({})", name, fmt::join(names, ", ")));
}

const Option* FindShort(const std::vector<Option>& options, char c) {
  for (const Option& o : options) {
    if (o.short_name != 0 && o.short_name == c) return &o;
  }
  return nullptr;
}

bool WantsHelp(int argc, char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

// An argument spelled "[=WHEN]" is optional: only `--name=VALUE` gives one.
bool IsOptionalArg(const Option& o) { return o.arg != nullptr && o.arg[0] == '['; }

// Parses the option at argv[*i] (a long one, or a bundle of short ones) and
// moves *i past it and its argument.
Status ParseOption(const std::vector<Option>& options, int argc, char* const* argv, int* i) {
  const char* word = argv[(*i)++];
  if (word[1] == '-') {
    std::string_view body = word + 2;
    size_t eq = body.find('=');
    SHARDFS_ASSIGN_OR_RETURN(const Option* o, FindLong(options, body.substr(0, eq)));
    if (IsOptionalArg(*o))
      return o->set(eq == std::string_view::npos ? nullptr : word + 2 + eq + 1);
    if (!o->arg) {
      if (eq != std::string_view::npos) {
        return Status::InvalidArgument(fmt::format("option '{}' takes no argument", Spelling(*o)));
      }
      return o->set(nullptr);
    }
    if (eq != std::string_view::npos) return o->set(word + 2 + eq + 1);
    if (*i == argc) {
      return Status::InvalidArgument(fmt::format("option '{}' needs an argument", Spelling(*o)));
    }
    return o->set(argv[(*i)++]);
  }
  for (const char* p = word + 1; *p; ++p) {
    const Option* o = FindShort(options, *p);
    if (!o) return Status::InvalidArgument(fmt::format("unknown option '-{}'", *p));
    if (!o->arg) {
      SHARDFS_RETURN_IF_ERROR(o->set(nullptr));
      continue;
    }
    if (p[1]) return o->set(p + 1);  // -j4
    if (*i == argc) {
      return Status::InvalidArgument(fmt::format("option '-{}' needs an argument", *p));
    }
    return o->set(argv[(*i)++]);
  }
  return Status::Ok();
}

}  // namespace

Result<ParsedArgs> ParseCommandLine(const CommandLine& cl, int argc, char* const* argv) {
  ParsedArgs parsed;
  if (WantsHelp(argc, argv)) {
    parsed.help = true;
    return parsed;
  }
  int i = 1;
  if (cl.operands == Operands::kVerbatim) {
    parsed.operands.assign(argv + i, argv + argc);
    return parsed;
  }
  while (i < argc) {
    std::string_view word = argv[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (word.size() < 2 || word[0] != '-') {  // An operand, "-" included.
      if (cl.operands == Operands::kAfterOptions) break;
      parsed.operands.emplace_back(word);
      ++i;
      continue;
    }
    SHARDFS_RETURN_IF_ERROR(ParseOption(cl.options, argc, argv, &i));
  }
  parsed.operands.insert(parsed.operands.end(), argv + i, argv + argc);
  return parsed;
}

std::string FormatHelp(const CommandLine& cl, std::string_view summary) {
  std::string out;
  std::string_view synopsis = cl.synopsis;
  const char* options = cl.options.empty() ? "" : " [OPTIONS]";
  for (bool first = true; first || !synopsis.empty(); first = false) {
    size_t nl = std::min(synopsis.find('\n'), synopsis.size());
    out += fmt::format("{}shardfs {}{} {}\n", first ? "usage: " : "       ", cl.command, options,
                       synopsis.substr(0, nl));
    synopsis.remove_prefix(std::min(nl + 1, synopsis.size()));
  }
  out += fmt::format("\n{}.\n\noptions:\n", summary);
  std::vector<std::pair<std::string, const char*>> rows;
  for (const Option& o : cl.options) {
    std::string left = o.short_name ? fmt::format("-{}", o.short_name) : "  ";
    if (o.name) left += fmt::format("{}--{}", o.short_name ? ", " : "  ", o.name);
    if (o.arg) left += fmt::format("{}{}", IsOptionalArg(o) ? "" : " ", o.arg);
    rows.emplace_back(std::move(left), o.help);
  }
  rows.emplace_back("-h, --help", "this help");
  size_t width = 0;
  for (const auto& [left, help] : rows) width = std::max(width, left.size());
  for (const auto& [left, help] : rows) out += fmt::format("  {:<{}}  {}\n", left, width, help);
  if (!cl.more_help.empty()) out += "\n" + cl.more_help;
  out += fmt::format("\nAll options: man {}(1).\n", ManPageOf(cl.command));
  return out;
}

std::string_view ManPageOf(std::string_view command) {
  auto group = [&](std::string_view g) {
    return command == g || (command.starts_with(g) && command[g.size()] == ' ');
  };
  if (group("index") || command == "ls" || command == "stat") return "shardfs-index";
  if (group("view")) return "shardfs-view";
  if (group("mount") || group("umount") || group("stats") || group("cache")) {
    return "shardfs-mount";
  }
  if (group("pack") || group("verify")) return "shardfs-pack";
  return "shardfs";
}

OptionSetter SetFlag(bool* flag, bool value) {
  return [flag, value](const char*) {
    *flag = value;
    return Status::Ok();
  };
}

OptionSetter SetString(std::string* value) {
  return [value](const char* arg) {
    *value = arg;
    return Status::Ok();
  };
}

OptionSetter AppendString(std::vector<std::string>* values) {
  return [values](const char* arg) {
    values->emplace_back(arg);
    return Status::Ok();
  };
}

OptionSetter SetJobs(int* jobs) {
  return [jobs](const char* arg) {
    return ParseJobs(arg, jobs) ? Status::Ok()
                                : Status::InvalidArgument("-j needs a count 1..4096");
  };
}

OptionSetter SetNonZeroSize(uint64_t* size, std::string error) {
  return [size, error = std::move(error)](const char* arg) {
    if (ParseSize(arg, size) && *size != 0) return Status::Ok();
    return Status::InvalidArgument(fmt::format(fmt::runtime(error), arg));
  };
}

}  // namespace shardfs::cli
