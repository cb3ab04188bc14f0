// tools/cli/cli_options.h: getopt_long's grammar from a table of options, usage
// errors naming the bad option, and --help printed from the same table.
#include "tools/cli/cli_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace shardfs::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A command with one option of each kind; the setters record what they got.
struct Fixture {
  bool quiet = false;
  bool checksum = true;
  std::string out;
  int jobs = 0;
  uint64_t size = 0;
  std::vector<std::string> excludes;
  std::vector<std::string> whens;  // --when, "(none)" without an argument.
  std::vector<std::string> order;  // Options in the order their setters ran.

  CommandLine Make(Operands operands) {
    auto seen = [this](const char* what, OptionSetter set) -> OptionSetter {
      return [this, what, set](const char* arg) {
        order.push_back(what);
        return set(arg);
      };
    };
    return {"test cmd",
            "INDEX [PATH]\n--other FORM",
            {{"out", 'o', "INDEX", "the index to write", seen("out", SetString(&out))},
             {"quiet", 'q', nullptr, "warnings only", seen("quiet", SetFlag(&quiet))},
             {"no-checksum", 0, nullptr, "no xxh3", seen("no-checksum", SetFlag(&checksum, false))},
             {"jobs", 'j', "N", "threads", seen("jobs", SetJobs(&jobs))},
             {"exclude", 0, "GLOB", "leave out", seen("exclude", AppendString(&excludes))},
             {"excluded-size", 0, "SIZE", "a size",
              seen("excluded-size", SetNonZeroSize(&size, "bad size '{}'"))},
             {"when", 0, "[=WHEN]", "an optional argument",
              seen("when",
                   [this](const char* arg) {
                     whens.push_back(arg ? arg : "(none)");
                     return Status::Ok();
                   })},
             {nullptr, 'd', nullptr, "debug", seen("d", SetFlag(&quiet, false))}},
            operands};
  }

  Result<ParsedArgs> Parse(std::initializer_list<const char*> args,
                           Operands operands = Operands::kAnywhere) {
    std::vector<char*> argv{const_cast<char*>("cmd")};
    for (const char* a : args) argv.push_back(const_cast<char*>(a));
    return ParseCommandLine(Make(operands), static_cast<int>(argv.size()), argv.data());
  }

  // The message of a refused command line.
  std::string Refused(std::initializer_list<const char*> args,
                      Operands operands = Operands::kAnywhere) {
    Result<ParsedArgs> r = Parse(args, operands);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    return r.status().message();
  }
};

TEST(CliOptionsTest, LongAndShortSpellings) {
  Fixture f;
  auto r = f.Parse({"--out=a", "-q", "--jobs", "3", "--exclude", "x", "--exclude=y", "idx"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(f.out, "a");
  EXPECT_TRUE(f.quiet);
  EXPECT_EQ(f.jobs, 3);
  EXPECT_THAT(f.excludes, ElementsAre("x", "y"));
  EXPECT_THAT(r->operands, ElementsAre("idx"));
  EXPECT_THAT(f.order, ElementsAre("out", "quiet", "jobs", "exclude", "exclude"));

  Fixture g;
  r = g.Parse({"-qj4", "-o", "b", "-obb", "--no-checksum"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(g.quiet);
  EXPECT_EQ(g.jobs, 4);
  EXPECT_EQ(g.out, "bb");
  EXPECT_FALSE(g.checksum);
  EXPECT_THAT(r->operands, IsEmpty());
}

TEST(CliOptionsTest, ARequiredArgumentIsTheNextWordWhateverItIs) {
  Fixture f;
  auto r = f.Parse({"--out", "-q", "--exclude", "--", "x"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(f.out, "-q");
  EXPECT_FALSE(f.quiet);
  EXPECT_THAT(f.excludes, ElementsAre("--"));
  EXPECT_THAT(r->operands, ElementsAre("x"));
}

TEST(CliOptionsTest, AnOptionalArgumentIsOnlyTheOneAfterTheEqualsSign) {
  Fixture f;
  auto r = f.Parse({"--when", "auto", "--when=auto", "--when="});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(f.whens, ElementsAre("(none)", "auto", ""));
  EXPECT_THAT(r->operands, ElementsAre("auto"));
  EXPECT_THAT(FormatHelp(f.Make(Operands::kAnywhere), "s"), HasSubstr("--when[=WHEN]"));
}

TEST(CliOptionsTest, UniquePrefixesOfLongNames) {
  Fixture f;
  auto r = f.Parse({"--qu", "--no", "--o", "x"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(f.quiet);
  EXPECT_FALSE(f.checksum);
  EXPECT_EQ(f.out, "x");
  // An exact name wins over the longer names it begins.
  Fixture g;
  EXPECT_EQ(g.Refused({"--exclude", "a", "--excl", "b"}),
            "option '--excl' is ambiguous (--exclude, --excluded-size)");
  Fixture h;
  ASSERT_TRUE(h.Parse({"--exclude", "a"}).ok());
  EXPECT_THAT(h.excludes, ElementsAre("a"));
}

TEST(CliOptionsTest, OperandsAnywhereOrAfterOptions) {
  Fixture f;
  auto r = f.Parse({"a", "-q", "b", "-", "--", "-j", "--out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(f.quiet);
  EXPECT_THAT(r->operands, ElementsAre("a", "b", "-", "-j", "--out"));

  Fixture g;
  r = g.Parse({"-q", "a", "--out", "x"}, Operands::kAfterOptions);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(g.quiet);
  EXPECT_EQ(g.out, "");
  EXPECT_THAT(r->operands, ElementsAre("a", "--out", "x"));

  Fixture h;
  r = h.Parse({"--", "-q"}, Operands::kAfterOptions);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->operands, ElementsAre("-q"));

  Fixture v;
  r = v.Parse({"-q", "--", "x"}, Operands::kVerbatim);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(v.quiet);
  EXPECT_THAT(r->operands, ElementsAre("-q", "--", "x"));
}

TEST(CliOptionsTest, UsageErrorsNameTheOption) {
  Fixture f;
  EXPECT_EQ(f.Refused({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(f.Refused({"-qZ"}), "unknown option '-Z'");
  EXPECT_EQ(f.Refused({"--out"}), "option '--out' needs an argument");
  EXPECT_EQ(f.Refused({"-j"}), "option '-j' needs an argument");
  EXPECT_EQ(f.Refused({"--quiet=yes"}), "option '--quiet' takes no argument");
  EXPECT_EQ(f.Refused({"-j", "0"}), "-j needs a count 1..4096");
  EXPECT_EQ(f.Refused({"--excluded-size", "0"}), "bad size '0'");
  EXPECT_EQ(f.Refused({"--excluded-size=1Q"}), "bad size '1Q'");
  // The first error stops the parse: later setters do not run.
  Fixture g;
  g.Refused({"--bogus", "-q"});
  EXPECT_FALSE(g.quiet);
  // After options end, a bad one is an operand.
  Fixture h;
  auto r = h.Parse({"x", "--bogus"}, Operands::kAfterOptions);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->operands, ElementsAre("x", "--bogus"));
}

TEST(CliOptionsTest, HelpBeforeDoubleDashWinsOverEverything) {
  for (Operands o : {Operands::kAnywhere, Operands::kAfterOptions, Operands::kVerbatim}) {
    Fixture f;
    auto r = f.Parse({"--bogus", "x", "-h"}, o);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->help);
    r = f.Parse({"--out", "--help"}, o);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->help);
    EXPECT_EQ(f.out, "");
    r = f.Parse({"--", "--help"}, o);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->help);
  }
}

TEST(CliOptionsTest, HelpListsEveryOptionOfTheTable) {
  Fixture f;
  CommandLine cl = f.Make(Operands::kAnywhere);
  std::string help = FormatHelp(cl, "does a test");
  EXPECT_THAT(help, HasSubstr("usage: shardfs test cmd [OPTIONS] INDEX [PATH]\n"
                              "       shardfs test cmd [OPTIONS] --other FORM\n"));
  EXPECT_THAT(help, HasSubstr("\ndoes a test.\n"));
  for (const Option& o : cl.options) {
    if (o.name) {
      EXPECT_THAT(help, HasSubstr(std::string("--") + o.name)) << o.name;
    }
    EXPECT_THAT(help, HasSubstr(o.help));
  }
  EXPECT_THAT(help, HasSubstr("  -o, --out INDEX "));
  EXPECT_THAT(help, HasSubstr("      --no-checksum "));
  EXPECT_THAT(help, HasSubstr("  -d "));
  EXPECT_THAT(help, HasSubstr("-h, --help"));
  EXPECT_THAT(help, HasSubstr("man shardfs(1)"));
}

TEST(CliOptionsTest, HelpEndsWithMoreHelpBeforeTheManPage) {
  Fixture f;
  CommandLine cl = f.Make(Operands::kAnywhere);
  EXPECT_THAT(FormatHelp(cl, "s"), Not(HasSubstr("\n\n\nAll options")));
  cl.more_help = "more:\n  a=1  one\n";
  EXPECT_THAT(FormatHelp(cl, "s"),
              HasSubstr(" this help\n\nmore:\n  a=1  one\n\nAll options: man shardfs(1).\n"));
}

TEST(CliOptionsTest, EachCommandPointsAtItsGroupsManPage) {
  EXPECT_EQ(ManPageOf("index build"), "shardfs-index");
  EXPECT_EQ(ManPageOf("ls"), "shardfs-index");
  EXPECT_EQ(ManPageOf("view create"), "shardfs-view");
  EXPECT_EQ(ManPageOf("mount"), "shardfs-mount");
  EXPECT_EQ(ManPageOf("cache warm"), "shardfs-mount");
  EXPECT_EQ(ManPageOf("pack"), "shardfs-pack");
  EXPECT_EQ(ManPageOf("verify"), "shardfs-pack");
  EXPECT_EQ(ManPageOf("packer"), "shardfs");
  EXPECT_EQ(ManPageOf("test cmd"), "shardfs");
}

}  // namespace
}  // namespace shardfs::cli
