#include "tests/unit/test_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

extern char** environ;

namespace shardfs::testing {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void Die(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

std::string ReadAllFd(int fd) {
  std::string out;
  if (::lseek(fd, 0, SEEK_SET) < 0) Die("lseek");
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Die("read");
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void MkDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0) Die("mkdir " + path);
  if (::chmod(path.c_str(), mode) != 0) Die("chmod " + path);
}

void MkFile(const std::string& path, std::string_view content, mode_t mode) {
  WriteFile(path, content);
  if (::chmod(path.c_str(), mode) != 0) Die("chmod " + path);
}

void Symlink(const std::string& target, const std::string& path) {
  if (::symlink(target.c_str(), path.c_str()) != 0) Die("symlink " + path);
}

void HardLink(const std::string& existing, const std::string& path) {
  if (::link(existing.c_str(), path.c_str()) != 0) Die("link " + path);
}

// A name of exactly `len` bytes: `stem` padded with a repeating pattern.
std::string NameOfLength(std::string stem, size_t len) {
  const std::string pattern = "0123456789abcdefghijklmnopqrstuvwxyz";
  for (size_t i = 0; stem.size() < len; ++i) stem.push_back(pattern[i % pattern.size()]);
  stem.resize(len);
  return stem;
}

// Creates directories below `root`/`first_dir` so that a file path
// (relative to `root`) of exactly `total` bytes can be made; returns that
// relative path. Components stay under 100 bytes.
std::string MakePathOfLength(const std::string& root, const std::string& first_dir, size_t total) {
  std::string rel = first_dir;
  if (!fs::exists(root + "/" + rel)) MkDir(root + "/" + rel, 0755);
  int level = 0;
  while (total - rel.size() - 1 > 90) {
    std::string comp = NameOfLength(fmt::format("lvl{}-", level++), 60);
    rel += "/" + comp;
    MkDir(root + "/" + rel, 0755);
  }
  size_t left = total - rel.size() - 1;
  rel += "/" + NameOfLength("file-", left);
  return rel;
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = fmt::format("{}/shardfs-unit-XXXXXX", base && *base ? base : "/tmp");
  if (!::mkdtemp(tmpl.data())) Die("mkdtemp " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  // Make read-only directories removable first.
  for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  }
  fs::remove_all(path_, ec);
}

CommandResult Run(const std::vector<std::string>& argv, const std::string& cwd) {
  CommandResult r;
  std::string cmdline;
  for (const auto& a : argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  int out_fd = ::memfd_create("stdout", MFD_CLOEXEC);
  int err_fd = ::memfd_create("stderr", MFD_CLOEXEC);
  if (out_fd < 0 || err_fd < 0) Die("memfd_create");

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "LC_ALL=", 7) != 0) env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("LC_ALL=C.UTF-8");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argp[0], &fa, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    r.err = fmt::format("cannot start {}: {}", argv[0], std::strerror(rc));
  } else {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) Die("waitpid");
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadAllFd(out_fd);
    r.err = ReadAllFd(err_fd);
  }
  ::close(out_fd);
  ::close(err_fd);
  r.describe = fmt::format("command `{}` exited {}; stderr:\n{}", cmdline, r.exit_code,
                           r.err.substr(0, 4000));
  return r;
}

std::string Python3() { return SHARDFS_TEST_PYTHON3; }

std::vector<std::string> DirNames(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open " + path);
  std::string out = ReadAllFd(fd);
  ::close(fd);
  return out;
}

void WriteFile(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("create " + path);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Die("write " + path);
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) Die("close " + path);
}

std::string PseudoRandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(gen() & 0xff);
  return out;
}

std::string UstarHeader(std::string_view name, char type, uint64_t size, int64_t mtime) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h.data() + 136, 12, "%011llo", static_cast<unsigned long long>(mtime));
  h[156] = type;
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}

std::string OneMemberTar(const std::string& content) {
  std::string tar = UstarHeader("data.bin", '0', content.size(), 1600000000) + content;
  tar.resize((tar.size() + 511) / 512 * 512 + 1024, '\0');
  return tar;
}

struct stat Lstat(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) Die("lstat " + path);
  return st;
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::vector<std::string> WalkTree(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    out.push_back(e.path().lexically_relative(root).native());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> TopLevelNames(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().native());
  std::sort(out.begin(), out.end());
  return out;
}

void BuildSourceTree(const std::string& root, TreeFlavor flavor) {
  auto at = [&](const std::string& rel) { return root + "/" + rel; };
  MkDir(root, 0755);
  MkFile(at("empty.txt"), "", 0644);
  MkFile(at("hello.txt"), "hello world\n", 0644);
  MkFile(at("exec.sh"), "#!/bin/sh\necho hi\n", 0755);
  MkFile(at("ro.bin"), PseudoRandomBytes(5000, 1), 0444);
  MkFile(at("private.key"), PseudoRandomBytes(777, 2), 0600);
  MkFile(at("block512.bin"), PseudoRandomBytes(512, 3), 0640);
  MkFile(at("big.bin"), PseudoRandomBytes(300 * 1024 + 17, 4), 0644);
  MkDir(at("dir"), 0755);
  MkDir(at("dir/sub"), 0750);
  MkFile(at("dir/sub/leaf.txt"), "leaf\n", 0644);
  MkDir(at("dir/empty-dir"), 0700);
  MkDir(at("dir/setgid"), 02775);
  MkFile(at("dir/setgid/f"), "x", 0664);
  Symlink("hello.txt", at("link-rel"));
  Symlink("../hello.txt", at("dir/link-up"));
  Symlink("does/not/exist", at("dangling"));
  Symlink("/etc/hostname", at("link-abs"));
  Symlink("dir/sub", at("link-to-dir"));
  MkDir(at("hard"), 0755);
  MkFile(at("hard/orig.bin"), PseudoRandomBytes(3000, 5), 0644);
  HardLink(at("hard/orig.bin"), at("hard/link.bin"));
  MkDir(at("odd"), 0755);
  const char* odd[] = {
      "with space.txt",
      " leading",
      "trailing ",
      "new\nline",
      "tab\there",
      "back\\slash",
      "quote\"'",
      "-dash",
      "*?[glob]",
      "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93.txt",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e.txt",
      "emoji-\xf0\x9f\x98\x80",
      "bad\xff\xfe.bin",
      "latin1-\xe9t\xe9",
  };
  uint64_t seed = 100;
  for (const char* name : odd) {
    MkFile(at(std::string("odd/") + name), PseudoRandomBytes(seed * 37 % 1000, seed), 0644);
    ++seed;
  }
  MkDir(at("\xc3\xbcn\xc3\xaf"), 0755);
  MkFile(at("\xc3\xbcn\xc3\xaf/c\xc3\xb6"
            "d\xc3\xa9.txt"),
         "unicode dir\n", 0644);

  if (flavor == TreeFlavor::kFull) {
    MkFile(at(NameOfLength("n100-", 100)), "one hundred\n", 0644);
    MkFile(at(NameOfLength("n101-", 101)), "one hundred and one\n", 0644);
    MkFile(at(NameOfLength("n255-", 255)), PseudoRandomBytes(1234, 6), 0644);
    std::string p256 = MakePathOfLength(root, "p256", 256);
    MkFile(at(p256), "two hundred fifty-six\n", 0644);
    std::string p300 = MakePathOfLength(root, "deep", 300);
    MkFile(at(p300), PseudoRandomBytes(2000, 7), 0644);
    Symlink(p300, at("link-long-target"));
    HardLink(at(p300), at("hard/" + NameOfLength("long-hard-link-", 120)));
  } else if (flavor == TreeFlavor::kUstar) {
    MkFile(at(NameOfLength("u100-", 100)), "exactly one hundred\n", 0644);
    std::string d1 = NameOfLength("prefix-a-", 80);
    std::string d2 = NameOfLength("prefix-b-", 71);
    MkDir(at(d1), 0755);
    MkDir(at(d1 + "/" + d2), 0755);
    MkFile(at(d1 + "/" + d2 + "/" + NameOfLength("split-name-", 90)), PseudoRandomBytes(999, 8),
           0644);
  }

  // Distinct mtimes, most with nanoseconds, some whole seconds; set last so
  // creating children does not move a directory's mtime afterwards.
  std::vector<std::string> all = WalkTree(root);
  for (size_t k = 0; k < all.size(); ++k) {
    struct timespec ts[2];
    ts[0].tv_sec = ts[1].tv_sec = static_cast<time_t>(1500000000 + k * 86413);
    ts[0].tv_nsec = ts[1].tv_nsec =
        k % 5 == 0 ? 0 : static_cast<long>((k * 987654321ull + 123456789ull) % 1000000000ull);
    if (::utimensat(AT_FDCWD, at(all[k]).c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
      Die("utimensat " + all[k]);
    }
  }
}

}  // namespace shardfs::testing
