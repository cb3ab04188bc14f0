// src/mount/control_socket.h: the client refuses a listener of another uid before
// sending a byte, never waits without a bound, and refuses a control
// directory that is not the owner's alone. The listeners are real sockets in
// child processes; when the test runs as root, the "other uid" listener runs
// as nobody (65534), otherwise as ourselves while the client expects another.
#include "src/mount/control_socket.h"

#include <fmt/format.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

namespace shardfs::mount {
namespace {

using shardfs::testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

// A listener at `path` in a child process, as `uid` (when we are root). It
// accepts one connection if `accept`, reads what arrives for a moment
// (never answering) and reports the byte count through a pipe.
class Listener {
 public:
  Listener(const std::string& path, uid_t uid, bool accept, int backlog = 16) {
    int ready[2], report[2];
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(report), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(report[0]);
      if (::getuid() == 0 && uid != 0 &&
          (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
           ::setresuid(uid, uid, uid) != 0)) {
        ::_exit(3);
      }
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.data(), path.size());
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
          ::listen(fd, backlog) != 0) {
        ::_exit(4);
      }
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(5);
      long total = 0;
      if (accept) {
        int conn = ::accept(fd, nullptr, nullptr);
        timeval tv{1, 0};
        ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[4096];
        for (ssize_t n; (n = ::read(conn, buf, sizeof buf)) > 0;) total += n;
      }
      if (::write(report[1], &total, sizeof total) != sizeof total) ::_exit(6);
      ::pause();  // Holds the socket until killed.
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(report[1]);
    report_ = report[0];
    char c = 0;
    ready_ = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
  }
  ~Listener() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(report_);
  }
  bool ready() const { return ready_; }
  // The bytes it received (after its read timed out or the peer closed).
  long BytesReceived() {
    long total = -1;
    if (::read(report_, &total, sizeof total) != sizeof total) return -1;
    return total;
  }

 private:
  pid_t pid_ = -1;
  int report_ = -1;
  bool ready_ = false;
};

// A directory the listener's uid may bind in.
std::string OpenDir(const TempDir& tmp) {
  std::string dir = tmp / "sockets";
  EXPECT_EQ(::mkdir(dir.c_str(), 0777), 0);
  EXPECT_EQ(::chmod(dir.c_str(), 0777), 0);
  EXPECT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  return dir;
}

// As root: nobody listens, the mount's owner is root. Otherwise we listen,
// and the owner is someone else.
struct Strangers {
  uid_t listener;
  uid_t owner;
};
Strangers OtherUid() {
  if (::getuid() == 0) return {kNobody, 0};
  return {::getuid(), ::getuid() + 1};
}

TEST(ControlSocketTest, ListenerOfAnotherUidIsRefusedBeforeAnyByte) {
  TempDir tmp;
  const std::string path = OpenDir(tmp) + "/ctl";
  const Strangers who = OtherUid();
  Listener l(path, who.listener, /*accept=*/true);
  ASSERT_TRUE(l.ready());
  Result<UniqueFd> fd = ConnectControlSocket(path, "squatted", who.owner, 2000);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find(fmt::format("runs as uid {}", who.listener)),
            std::string::npos)
      << fd.status().message();
  EXPECT_EQ(l.BytesReceived(), 0);
}

TEST(ControlSocketTest, ListenerOfTheOwnerIsTalkedTo) {
  TempDir tmp;
  const std::string path = OpenDir(tmp) + "/ctl";
  Listener l(path, ::getuid(), /*accept=*/true);
  ASSERT_TRUE(l.ready());
  Result<UniqueFd> fd = ConnectControlSocket(path, "ours", ::getuid(), 2000);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  ASSERT_EQ(::write(fd->get(), "stats", 5), 5);
  fd->reset();
  EXPECT_EQ(l.BytesReceived(), 5);
}

TEST(ControlSocketTest, ConnectToAListenerThatNeverAcceptsTimesOut) {
  TempDir tmp;
  const std::string path = OpenDir(tmp) + "/ctl";
  Listener l(path, ::getuid(), /*accept=*/false, /*backlog=*/0);
  ASSERT_TRUE(l.ready());
  // The backlog takes one connection; the next waits for room.
  std::vector<UniqueFd> held;
  Status last;
  const auto start = Clock::now();
  for (int i = 0; i < 4 && last.ok(); ++i) {
    Result<UniqueFd> fd = ConnectControlSocket(path, "full", ::getuid(), 300);
    if (fd.ok()) {
      held.push_back(std::move(fd).value());
    } else {
      last = fd.status();
    }
  }
  ASSERT_FALSE(last.ok());
  EXPECT_NE(last.message().find("did not take the connection within 0.3 s"), std::string::npos)
      << last.message();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

TEST(ControlSocketTest, AnAnswerThatNeverComesTimesOut) {
  TempDir tmp;
  const std::string path = OpenDir(tmp) + "/ctl";
  Listener l(path, ::getuid(), /*accept=*/true);
  ASSERT_TRUE(l.ready());
  Result<UniqueFd> fd = ConnectControlSocket(path, "mute", ::getuid(), 2000);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  const auto start = Clock::now();
  Result<std::string> answer = ControlExchange(fd->get(), {"stats"}, 2000, 300);
  ASSERT_FALSE(answer.ok());
  EXPECT_NE(answer.status().message().find("timed out"), std::string::npos)
      << answer.status().message();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

TEST(ControlSocketTest, NoListenerIsNotFound) {
  TempDir tmp;
  Result<UniqueFd> fd = ConnectControlSocket(tmp / "none", "none", ::getuid(), 1000);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Status::Code::kNotFound);
}

TEST(ControlSocketTest, DirectoryMustBeTheOwnersAlone) {
  TempDir tmp;
  const std::string dir = tmp / "ctl";
  // Created 0700 and ours: accepted.
  ASSERT_TRUE(OpenControlDir(dir, ::getuid(), /*create=*/true).ok());
  // Someone else's (as the owner we expect differs).
  Result<UniqueFd> other = OpenControlDir(dir, ::getuid() + 1, /*create=*/false);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("owned by uid"), std::string::npos);
  // Open to others.
  ASSERT_EQ(::chmod(dir.c_str(), 0711), 0);
  Result<UniqueFd> open = OpenControlDir(dir, ::getuid(), /*create=*/true);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("mode 0711"), std::string::npos);
  // A symbolic link in its place.
  const std::string link = tmp / "link";
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  Result<UniqueFd> via_link = OpenControlDir(link, ::getuid(), /*create=*/true);
  ASSERT_FALSE(via_link.ok());
  EXPECT_NE(via_link.status().message().find("not a directory"), std::string::npos);
  // Missing, not to be created.
  EXPECT_EQ(OpenControlDir(tmp / "missing", ::getuid(), false).status().code(),
            Status::Code::kNotFound);
}

TEST(ControlSocketTest, DirectoriesDependOnTheOwnerOnly) {
  EXPECT_EQ(ControlDirs(0), std::vector<std::string>{"/run/shardfs"});
  EXPECT_EQ(ControlDirs(1000),
            (std::vector<std::string>{"/run/user/1000/shardfs", "/tmp/shardfs-1000"}));
  EXPECT_EQ(DaemonControlDir(0), "/run/shardfs");
}

}  // namespace
}  // namespace shardfs::mount
