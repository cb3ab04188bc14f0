// Helpers shared by the unit tests of every library (base/ and up):
// temporary directories, running real tools (tar, bsdtar, busybox, python3),
// files as bytes, and source trees with hostile names to archive. Uses base/
// alone; what needs a library above it lives in tests/unit/<library>/.
//
// Truth in these tests comes from the source tree on disk and from other
// programs' view of an archive, never from shardfs's own output.
#ifndef SHARDFS_TESTS_UNIT_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"

namespace shardfs::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // -1: did not start or died of a signal.
  std::string out;
  std::string err;
  bool ok() const { return exit_code == 0; }
  // For failure messages: the command, its exit code and stderr.
  std::string describe;
};

// Runs argv[0] (looked up in PATH) with `argv`, stdin from /dev/null, in
// `cwd` if given, with LC_ALL=C.UTF-8 so tools behave the same everywhere.
// Captures stdout and stderr.
CommandResult Run(const std::vector<std::string>& argv, const std::string& cwd = "");

// Runs `fn` (returning a Status) on a thread of its own and waits at most
// `deadline` for it: a regression that blocks fails the test instead of
// hanging the suite (the blocked thread is left behind; the process ends
// without it). std::nullopt if `fn` did not return in time.
template <typename Fn>
std::optional<Status> WithDeadline(Fn fn,
                                   std::chrono::seconds deadline = std::chrono::seconds(20)) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> done = promise->get_future();
  std::thread([promise, fn] { promise->set_value(fn()); }).detach();
  if (done.wait_for(deadline) != std::future_status::ready) return std::nullopt;
  return done.get();
}

// The python3 the build found (meson's find_program), for tarfile.
std::string Python3();

std::string ReadFile(const std::string& path);
// The names in directory `dir`, sorted.
std::vector<std::string> DirNames(const std::string& dir);
void WriteFile(const std::string& path, std::string_view data);
// `n` bytes from a fixed-seed generator: the same bytes every run.
std::string PseudoRandomBytes(size_t n, uint64_t seed);
// One 512-byte ustar header (mode 0644, owner 0:0) with a valid checksum;
// `name` fills the 100-byte field, cut there.
std::string UstarHeader(std::string_view name, char type, uint64_t size, int64_t mtime);
// A ustar tar of one member, data.bin (0644, mtime 1600000000), holding
// `content`, with its two end blocks: enough for the scanners.
std::string OneMemberTar(const std::string& content);

struct stat Lstat(const std::string& path);
int64_t MtimeNs(const struct stat& st);
// Every path below `root`, relative to it, raw bytes; `root` itself is not
// included.
std::vector<std::string> WalkTree(const std::string& root);

// What a source tree holds. kFull has every hostile case; kUstar only names
// the ustar format can store (100-byte names, prefix-split paths); kV7 only
// names of at most 99 bytes.
enum class TreeFlavor { kFull, kUstar, kV7 };

// Creates a source tree at `root` (which must not exist): nested and empty
// directories, empty and multi-block files, odd and unicode and non-UTF-8
// names, symlinks (relative, dangling, absolute), a hard link, varied
// permission bits and a distinct sub-second mtime on every entry.
void BuildSourceTree(const std::string& root, TreeFlavor flavor);

// The names directly in `dir`, bytewise sorted: the member list to hand a
// tar writer so member names carry no "./" prefix.
std::vector<std::string> TopLevelNames(const std::string& dir);

}  // namespace shardfs::testing

#endif  // SHARDFS_TESTS_UNIT_TEST_UTIL_H_
