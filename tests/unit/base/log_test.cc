// base/log.h: a sink takes every message with its fields at or above the
// level.
#include "base/log.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs {
namespace {

std::vector<std::string>* sunk = nullptr;
void TestSink(log::Level level, std::string_view message, const log::Fields& f) {
  sunk->push_back(
      fmt::format("{} {} [{}|{}|{}]", static_cast<int>(level), message, f.shard, f.path, f.reason));
}

TEST(LogTest, ASinkTakesEveryMessageWithItsFieldsAtOrAboveTheLevel) {
  std::vector<std::string> got;
  sunk = &got;
  log::SetSink(&TestSink);
  log::Debug("not {}", "shown");
  log::Warning("w {}", 1);
  log::ErrorAbout({.shard = "s.tar", .path = "a/b", .reason = "checksum"}, "e {}", 2);
  log::SetSink(nullptr);
  sunk = nullptr;
  EXPECT_THAT(got, ::testing::ElementsAre("2 w 1 [||]", "3 e 2 [s.tar|a/b|checksum]"));
}

}  // namespace
}  // namespace shardfs
