// tools/cli/cmd_bench.cc: where `shardfs bench` finds the benchmark, and the
// command line it runs it with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tools/cli/command.h"

namespace shardfs::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(BenchTest, TheScriptIsBelowTheRootTheEnvironmentNames) {
  const std::string from_env = BenchScriptPath("/somewhere/shardfs");
  EXPECT_THAT(from_env, StartsWith("/somewhere/shardfs/"));
  EXPECT_THAT(from_env, EndsWith("/shardfs_bench.py"));
}

TEST(BenchTest, WithoutTheEnvironmentTheConfiguredSourceTreesScript) {
  // This test is built from a source tree, which holds the benchmark.
  const std::string configured = BenchScriptPath(nullptr);
  EXPECT_EQ(access(configured.c_str(), R_OK), 0) << configured;
  EXPECT_EQ(BenchScriptPath(""), configured);  // Set but empty: not set.
  EXPECT_NE(BenchScriptPath("/somewhere"), configured);
}

TEST(BenchTest, EveryArgumentGoesToTheScriptInOrder) {
  std::vector<std::string> words = {"bench", "--files", "10", "a b", "--", "-x", "--help"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::vector<std::string> got = BenchArgv("/s/b.py", static_cast<int>(argv.size()), argv.data());
  ASSERT_EQ(got.size(), words.size() + 1);
  EXPECT_THAT(got[0], HasSubstr("python"));  // The build's interpreter, or python3 from PATH.
  EXPECT_THAT(std::vector<std::string>(got.begin() + 1, got.end()),
              ElementsAre("/s/b.py", "--files", "10", "a b", "--", "-x", "--help"));
  EXPECT_THAT(BenchArgv("/s/b.py", 1, argv.data()), ElementsAre(got[0], "/s/b.py"));
}

}  // namespace
}  // namespace shardfs::cli
