// src/reader/filesystem.h called directly, no FUSE: the tree, attributes and bytes
// it serves over an index of a shard written from a source tree, compared with
// that tree; and what it does when a shard changes under it.
#include "src/reader/filesystem.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "index/fingerprint.h"
#include "index/index_reader.h"
#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader {
namespace {

namespace fs = std::filesystem;
using index::EntryType;
using reader_testing::InodeOf;
using reader_testing::OpenFs;
using shardfs::testing::TempDir;
using ::testing::HasSubstr;

// Writes everything below `src` into `shard` (reader_testing::WriteShard,
// in name order: a directory before what it holds) and indexes it at `idx`.
void MakeIndexedShard(const std::string& src, const std::string& shard, const std::string& idx,
                      bool checksum = true) {
  reader_testing::IndexShards({reader_testing::WriteShard(src, shard, testing::WalkTree(src))}, idx,
                              checksum);
}

std::unique_ptr<Filesystem> Open(const std::string& idx, FilesystemOptions options = {}) {
  return reader_testing::OpenFs(idx, options);
}

// Reads [offset, offset + size) through Filesystem::Read.
Status ReadAt(Filesystem& fs, InodeId inode, uint64_t offset, size_t size, std::string* out) {
  out->assign(size, '\0');
  size_t n = 0;
  Status s = fs.Read(inode, offset, size, out->data(), &n);
  out->resize(s.ok() ? n : 0);
  return s;
}

// The whole file, in chunks of `chunk` bytes.
Status ReadAll(Filesystem& fs, InodeId inode, size_t chunk, std::string* out) {
  out->clear();
  for (;;) {
    std::string part;
    SHARDFS_RETURN_IF_ERROR(ReadAt(fs, inode, out->size(), chunk, &part));
    if (part.empty()) return Status::Ok();
    if (part.size() > chunk) return Status::Corruption("read more than asked");
    out->append(part);
  }
}

class FilesystemTreeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    src_ = *dir_ / "src";
    testing::BuildSourceTree(src_, testing::TreeFlavor::kFull);
    MakeIndexedShard(src_, *dir_ / "shard.tar", *dir_ / "idx");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static std::string src_;
};
TempDir* FilesystemTreeTest::dir_ = nullptr;
std::string FilesystemTreeTest::src_;

// Walks the mounted tree from the root and compares every entry with the
// source: names, types, modes, sizes, mtimes, link counts, targets, bytes.
TEST_F(FilesystemTreeTest, TreeMatchesTheSource) {
  auto fs = Open(*dir_ / "idx");
  ASSERT_TRUE(fs);
  size_t entries = 0;
  std::map<ino_t, InodeId> inode_of_source;  // Hard links: one inode both sides.
  std::function<void(InodeId, const std::string&)> walk = [&](InodeId dir, const std::string& rel) {
    std::vector<std::pair<std::string, EntryRecord>> kids;
    Status s = fs->ReadDir(dir, "", [&](std::string_view name, const EntryRecord& rec) {
      EntryRecord copy = rec;
      copy.target = {};
      kids.emplace_back(std::string(name), copy);
      return true;
    });
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<std::string> want;
    for (const auto& e : fs::directory_iterator(rel.empty() ? src_ : src_ + "/" + rel)) {
      want.push_back(e.path().filename().native());
    }
    std::sort(want.begin(), want.end());
    std::vector<std::string> names;
    for (const auto& k : kids) names.push_back(k.first);
    ASSERT_EQ(names, want) << "in '" << rel << "'";
    size_t subdirs = 0;
    for (const auto& [name, listed] : kids) {
      const std::string path = rel.empty() ? name : rel + "/" + name;
      const std::string at = src_ + "/" + path;
      SCOPED_TRACE("'" + path + "'");
      ++entries;
      struct stat want_st = testing::Lstat(at);
      EntryRecord rec;
      index::RecordHolder holder;
      ASSERT_TRUE(fs->Lookup(dir, name, &rec, &holder).ok());
      EXPECT_EQ(rec.inode, listed.inode);
      EntryRecord attr;
      index::RecordHolder attr_holder;
      ASSERT_TRUE(fs->GetAttr(rec.inode, &attr, &attr_holder).ok());
      EXPECT_EQ(attr.inode, rec.inode);
      struct stat st;
      fs->ToStat(attr, &st);
      EXPECT_EQ(st.st_ino, rec.inode.value);
      EXPECT_EQ(st.st_mode & S_IFMT, want_st.st_mode & S_IFMT);
      if (!S_ISLNK(want_st.st_mode)) {
        EXPECT_EQ(st.st_mode & 07777, want_st.st_mode & 07777);
      }
      EXPECT_EQ(st.st_uid, want_st.st_uid);
      EXPECT_EQ(st.st_gid, want_st.st_gid);
      EXPECT_EQ(st.st_mtim.tv_sec, want_st.st_mtim.tv_sec);
      EXPECT_EQ(st.st_mtim.tv_nsec, want_st.st_mtim.tv_nsec);
      EXPECT_EQ(static_cast<uint64_t>(st.st_blocks),
                (static_cast<uint64_t>(st.st_size) + 511) / 512);
      if (S_ISDIR(want_st.st_mode)) {
        ++subdirs;
        size_t own_subdirs = 0;
        for (const auto& e : fs::directory_iterator(at)) {
          own_subdirs += e.is_directory() && !e.is_symlink();
        }
        EXPECT_EQ(st.st_nlink, 2 + own_subdirs);
        walk(rec.inode, path);
      } else if (S_ISLNK(want_st.st_mode)) {
        std::string target(4096, '\0');
        ssize_t n = ::readlink(at.c_str(), target.data(), target.size());
        ASSERT_GT(n, 0);
        target.resize(static_cast<size_t>(n));
        std::string_view got;
        index::RecordHolder link_holder;
        ASSERT_TRUE(fs->ReadLink(rec.inode, &got, &link_holder).ok());
        EXPECT_EQ(got, target);
        EXPECT_EQ(static_cast<uint64_t>(st.st_size), target.size());
        EXPECT_EQ(st.st_nlink, 1u);
      } else {
        EXPECT_EQ(st.st_size, want_st.st_size);
        EXPECT_EQ(st.st_nlink, want_st.st_nlink);
        auto [it, fresh] = inode_of_source.emplace(want_st.st_ino, rec.inode);
        EXPECT_EQ(it->second, rec.inode) << "hard links must share an inode";
        std::string got;
        ASSERT_TRUE(ReadAll(*fs, rec.inode, 65536, &got).ok());
        EXPECT_TRUE(got == testing::ReadFile(at)) << "content differs";
      }
    }
    (void)subdirs;
  };
  walk(index::kRootInode, "");
  EXPECT_EQ(entries, testing::WalkTree(src_).size());
}

TEST_F(FilesystemTreeTest, ReadsInOddChunksAtRandomOffsetsAndPastTheEnd) {
  auto fs = Open(*dir_ / "idx");
  ASSERT_TRUE(fs);
  const std::string want = testing::ReadFile(src_ + "/big.bin");
  ASSERT_GT(want.size(), 300000u);
  InodeId big = reader_testing::InodeOf(*fs, "big.bin");
  for (size_t chunk : {1, 7, 511, 512, 513, 4097, 65537, 1 << 20}) {
    if (chunk == 1) {
      // Byte by byte over the first and the last few kilobytes only.
      for (uint64_t off : {uint64_t{0}, uint64_t{want.size() - 3000}}) {
        for (uint64_t i = off; i < off + 3000; ++i) {
          std::string b;
          ASSERT_TRUE(ReadAt(*fs, big, i, 1, &b).ok());
          ASSERT_EQ(b, want.substr(i, 1)) << "byte " << i;
        }
      }
      continue;
    }
    std::string got;
    ASSERT_TRUE(ReadAll(*fs, big, chunk, &got).ok());
    EXPECT_TRUE(got == want) << "chunk " << chunk;
  }
  std::mt19937_64 gen(77);
  for (int i = 0; i < 500; ++i) {
    uint64_t off = gen() % (want.size() + 100);
    size_t len = gen() % 70000;
    std::string got;
    ASSERT_TRUE(ReadAt(*fs, big, off, len, &got).ok());
    std::string expect = off < want.size() ? want.substr(off, len) : "";
    ASSERT_TRUE(got == expect) << "offset " << off << " length " << len;
  }
  std::string got;
  ASSERT_TRUE(ReadAt(*fs, big, want.size(), 4096, &got).ok());
  EXPECT_EQ(got.size(), 0u);
  ASSERT_TRUE(ReadAt(*fs, big, want.size() + 12345, 10, &got).ok());
  EXPECT_EQ(got.size(), 0u);
  ASSERT_TRUE(ReadAt(*fs, big, uint64_t{1} << 62, 10, &got).ok());
  EXPECT_EQ(got.size(), 0u);
  ASSERT_TRUE(ReadAt(*fs, big, want.size() - 1, 4096, &got).ok());
  EXPECT_EQ(got, want.substr(want.size() - 1));
  ASSERT_TRUE(ReadAt(*fs, big, 100, 0, &got).ok());
  EXPECT_EQ(got.size(), 0u);

  // Empty files read as empty.
  InodeId empty = reader_testing::InodeOf(*fs, "empty.txt");
  ASSERT_TRUE(ReadAt(*fs, empty, 0, 100, &got).ok());
  EXPECT_EQ(got.size(), 0u);
  // A read that may splice clamps to the file and names the shard's
  // descriptor and where the bytes are in it, reading nothing.
  std::string untouched(4096, 'x');
  Result<reader::ReadReply> r = fs->Read(big, want.size() - 10, 4096, untouched.data(), true);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->length, 10u);
  ASSERT_TRUE(r->spliced());
  EXPECT_EQ(untouched, std::string(4096, 'x'));
  std::string raw(10, '\0');
  ASSERT_EQ(::pread(r->fd, raw.data(), 10, static_cast<off_t>(r->pos)), 10);
  EXPECT_EQ(raw, want.substr(want.size() - 10));
  // Push-ahead is told where the bytes lay: the end of the file, not all of it.
  EXPECT_TRUE(r->push.active);
  EXPECT_EQ(r->push.position, r->pos);
  EXPECT_EQ(r->push.length, 10u);
  EXPECT_TRUE(r->push.ends_file);
  EXPECT_FALSE(r->push.whole_file);
  // Without may_splice the same read lands in the buffer.
  r = fs->Read(big, want.size() - 10, 4096, untouched.data(), false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->spliced());
  EXPECT_EQ(untouched.substr(0, 10), want.substr(want.size() - 10));
}

// A ChunkedReader over local shards' descriptors that counts its calls: a
// shard read through it is one the FUSE edge cannot splice from (a remote
// shard, or a local one behind -o cache_dir).
class CountingReader : public ChunkedReader {
 public:
  Status ReadShard(const ShardHandle& shard, uint64_t pos, size_t len, char* buf) override {
    ++reads;
    return PreadExact(shard->fd(), buf, len, pos);
  }
  void NoteDelivered(index::ShardId, uint64_t, bool) override { ++delivered; }
  Status Recheck(index::ShardId) override { return Status::Ok(); }
  int reads = 0;
  int delivered = 0;
};

// The READ of a shard that cannot be spliced walks down once: Read looks
// the file up, checks it and reads it, each once.
TEST_F(FilesystemTreeTest, AReadThroughTheChunkedReaderResolvesAndChecksOnce) {
  CountingReader chunked;
  auto fs = Open(
      *dir_ / "idx",
      FilesystemOptions{.verify = VerifyMode::kAlways, .chunked = &chunked, .chunk_local = true});
  ASSERT_TRUE(fs);
  const InodeId hello = reader_testing::InodeOf(*fs, "hello.txt");
  for (int i = 1; i <= 2; ++i) {
    std::string got(4096, '\0');
    Result<reader::ReadReply> r = fs->Read(hello, 0, 4096, got.data(), true);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->length, 12u);
    EXPECT_FALSE(r->spliced());  // No chunk file on disk: the bytes.
    EXPECT_FALSE(r->push.shard->direct());
    EXPECT_EQ(got.substr(0, r->length), "hello world\n");
    EXPECT_EQ(chunked.reads, 2 * i);  // verify=always: the checksum pass, then the range.
    EXPECT_EQ(chunked.delivered, i);
  }
}

TEST_F(FilesystemTreeTest, OwnershipAndUmaskOverrides) {
  FilesystemOptions o;
  o.uid = 1234;
  o.gid = 4321;
  o.umask = 027;
  auto fs = Open(*dir_ / "idx", o);
  ASSERT_TRUE(fs);
  for (const char* p : {"hello.txt", "exec.sh", "dir", "dir/setgid", "private.key", "link-rel"}) {
    EntryRecord rec;
    index::RecordHolder holder;
    ASSERT_TRUE(fs->reader().LookupPath(p, &rec, &holder).ok()) << p;
    struct stat st;
    fs->ToStat(rec, &st);
    struct stat want = testing::Lstat(src_ + "/" + p);
    EXPECT_EQ(st.st_uid, 1234u) << p;
    EXPECT_EQ(st.st_gid, 4321u) << p;
    EXPECT_EQ(st.st_mode & S_IFMT, want.st_mode & S_IFMT) << p;
    if (!S_ISLNK(want.st_mode)) {
      EXPECT_EQ(st.st_mode & 07777, want.st_mode & 07777 & ~027u) << p;
    }
  }
  // Without overrides, the archive's values.
  auto plain = Open(*dir_ / "idx");
  EntryRecord rec;
  index::RecordHolder holder;
  ASSERT_TRUE(plain->reader().LookupPath("exec.sh", &rec, &holder).ok());
  struct stat st;
  plain->ToStat(rec, &st);
  EXPECT_EQ(st.st_mode, testing::Lstat(src_ + "/exec.sh").st_mode);
}

TEST_F(FilesystemTreeTest, WrongKindsAndMissingEntries) {
  auto fs = Open(*dir_ / "idx");
  ASSERT_TRUE(fs);
  EntryRecord rec;
  index::RecordHolder holder;
  EXPECT_EQ(fs->Lookup(index::kRootInode, "no such name", &rec, &holder).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(fs->Lookup(index::kRootInode, std::string(256, 'n'), &rec, &holder).code(),
            Status::Code::kNotFound);
  EXPECT_FALSE(fs->Lookup(reader_testing::InodeOf(*fs, "hello.txt"), "child", &rec, &holder).ok());
  uint64_t max = fs->reader().MetaNumber(index::kMetaMaxInode);
  ASSERT_GT(max, 10u);
  EXPECT_TRUE(fs->GetAttr(InodeId{max}, &rec, &holder).ok());
  EXPECT_EQ(fs->GetAttr(InodeId{max + 1}, &rec, &holder).code(), Status::Code::kNotFound);
  std::string_view target;
  EXPECT_EQ(fs->ReadLink(reader_testing::InodeOf(*fs, "hello.txt"), &target, &holder).code(),
            Status::Code::kInvalidArgument);
  std::string got;
  EXPECT_EQ(ReadAt(*fs, reader_testing::InodeOf(*fs, "dir"), 0, 10, &got).code(),
            Status::Code::kIsADirectory);
  EXPECT_EQ(ReadAt(*fs, reader_testing::InodeOf(*fs, "link-rel"), 0, 10, &got).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(ReadAt(*fs, InodeId{max + 1}, 0, 10, &got).code(), Status::Code::kNotFound);
  // ReadDir resumes after a name.
  std::vector<std::string> after;
  ASSERT_TRUE(fs->ReadDir(reader_testing::InodeOf(*fs, "dir"), "link-up",
                          [&](std::string_view n, const EntryRecord&) {
                            after.emplace_back(n);
                            return true;
                          })
                  .ok());
  EXPECT_EQ(after, (std::vector<std::string>{"setgid", "sub"}));
}

// WillNeed asks the kernel for a plain file's bytes (a batch's reads then
// overlap): the pages of its range of the shard come into the page cache,
// from a shard whose pages were all dropped; other entries are left alone.
TEST(FilesystemWillNeedTest, BringsAFilesRangeOfTheShardIntoThePageCache) {
  TempDir dir;
  const std::string src = dir / "src";
  fs::create_directories(src + "/d");
  testing::WriteFile(src + "/a.bin", testing::PseudoRandomBytes(3 << 20, 1));
  testing::WriteFile(src + "/d/b.bin", testing::PseudoRandomBytes(1 << 20, 2));
  testing::WriteFile(src + "/empty", "");
  const std::string shard = dir / "shard.tar";
  MakeIndexedShard(src, shard, dir / "idx");
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t shard_size = fs::file_size(shard);
  // Again if another process dropped the page cache meanwhile.
  for (int attempt = 0;; ++attempt) {
    const uint64_t drops = reader_testing::CacheDrops();
    auto fsys = Open(dir / "idx");
    ASSERT_TRUE(fsys);
    EntryRecord a, b, d, empty;
    index::RecordHolder ha, hb, hd, he;
    ASSERT_TRUE(fsys->Lookup(index::kRootInode, "a.bin", &a, &ha).ok());
    ASSERT_TRUE(fsys->Lookup(index::kRootInode, "d", &d, &hd).ok());
    ASSERT_TRUE(fsys->Lookup(d.inode, "b.bin", &b, &hb).ok());
    ASSERT_TRUE(fsys->Lookup(index::kRootInode, "empty", &empty, &he).ok());
    {
      UniqueFd fd(::open(shard.c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(fd.valid());
      ASSERT_EQ(::fdatasync(fd.get()), 0);
      ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
    }
    // b.bin's pages, and a.bin's past its first MiB (opening the shard
    // checks its fingerprint: its first and last 64 KiB, and the kernel
    // reads ahead of the first) up to its last whole page.
    const uint64_t b_from = b.offset / page * page;
    const uint64_t b_to = (b.offset + b.size + page - 1) / page * page;
    const uint64_t a_from = (a.offset + (1 << 20)) / page * page;
    const uint64_t a_to = (a.offset + a.size) / page * page;
    ASSERT_EQ(reader_testing::ResidentPages(shard, 0, shard_size).first, 0u)
        << "the shard's pages were not dropped (a temp dir on tmpfs keeps them)";
    fsys->WillNeed(d);      // A directory: nothing.
    fsys->WillNeed(empty);  // No bytes: nothing.
    const size_t after_others = reader_testing::ResidentPages(shard, 0, shard_size).first;
    fsys->WillNeed(b);
    // The reads it starts complete on their own (mincore counts a page once
    // its bytes are in): wait for them, for 20 s at most.
    auto [in, total] = reader_testing::ResidentPages(shard, b_from, b_to);
    for (int i = 0; i < 2000 && in < total; ++i) {
      ::usleep(10000);
      std::tie(in, total) = reader_testing::ResidentPages(shard, b_from, b_to);
    }
    const size_t a_in = reader_testing::ResidentPages(shard, a_from, a_to).first;
    if (reader_testing::CacheDrops() != drops) {
      ASSERT_LT(attempt, 4) << "the page cache was dropped by others during every attempt";
      continue;
    }
    EXPECT_EQ(after_others, 0u) << "a directory or an empty file brought pages in";
    EXPECT_EQ(in, total) << "of b.bin's range";
    EXPECT_EQ(a_in, 0u) << "only b.bin's range was asked for";
    // And the bytes read after are the file's.
    std::string got;
    ASSERT_TRUE(ReadAt(*fsys, b.inode, 0, b.size, &got).ok());
    EXPECT_EQ(got, testing::PseudoRandomBytes(1 << 20, 2));
    break;
  }
}

// A fresh shard + index per test, for tests that damage the shard.
class ShardDamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    // Three members, the middle one far from both ends of the shard.
    testing::WriteFile(src_ + "/a-head.bin", testing::PseudoRandomBytes(100 * 1024, 31));
    testing::WriteFile(src_ + "/b-middle.bin", testing::PseudoRandomBytes(200 * 1024 + 5, 32));
    testing::WriteFile(src_ + "/c-tail.bin", testing::PseudoRandomBytes(100 * 1024, 33));
    shard_ = dir_ / "shard.tar";
    idx_ = dir_ / "idx";
  }

  std::string Want(const std::string& name) { return testing::ReadFile(src_ + "/" + name); }

  TempDir dir_;
  std::string src_, shard_, idx_;
};

TEST_F(ShardDamageTest, ReplacedWithOtherBytesOfTheSameSize) {
  MakeIndexedShard(src_, shard_, idx_);
  const uint64_t size = testing::Lstat(shard_).st_size;
  // Replace by rename, as a re-created shard would be.
  testing::WriteFile(shard_ + ".new", testing::PseudoRandomBytes(size, 34));
  ASSERT_EQ(::rename((shard_ + ".new").c_str(), shard_.c_str()), 0);
  auto fs = Open(idx_);
  ASSERT_TRUE(fs);
  std::string got;
  for (const char* name : {"a-head.bin", "b-middle.bin", "c-tail.bin"}) {
    Status s = ReadAt(*fs, reader_testing::InodeOf(*fs, name), 0, 4096, &got);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << name << ": " << s.message();
    EXPECT_THAT(s.message(), HasSubstr(shard_));
    EXPECT_TRUE(got.empty());
  }
}

TEST_F(ShardDamageTest, TruncatedShard) {
  MakeIndexedShard(src_, shard_, idx_);
  const uint64_t size = testing::Lstat(shard_).st_size;
  auto fs = Open(idx_);
  ASSERT_TRUE(fs);
  InodeId head = reader_testing::InodeOf(*fs, "a-head.bin");
  std::string got;
  ASSERT_TRUE(ReadAt(*fs, head, 0, 100, &got).ok());
  EXPECT_EQ(got, Want("a-head.bin").substr(0, 100));
  // Truncated while open: the shard is already checked and cached.
  ASSERT_EQ(::truncate(shard_.c_str(), static_cast<off_t>(size / 2)), 0);
  Status s = ReadAt(*fs, head, 0, 100, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(got.empty());
  s = ReadAt(*fs, reader_testing::InodeOf(*fs, "c-tail.bin"), 0, 100, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(got.empty());
  // And a fresh open of the truncated shard.
  auto fresh = Open(idx_);
  ASSERT_TRUE(fresh);
  s = ReadAt(*fresh, reader_testing::InodeOf(*fresh, "a-head.bin"), 0, 100, &got);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  EXPECT_THAT(s.message(), HasSubstr(shard_));
  EXPECT_TRUE(got.empty());
}

TEST_F(ShardDamageTest, VerifyFirstCatchesBytesAlteredInTheMiddle) {
  MakeIndexedShard(src_, shard_, idx_);
  std::string bytes = testing::ReadFile(shard_);
  ASSERT_GT(bytes.size(), 200u * 1024);
  const std::string middle = Want("b-middle.bin");
  const size_t data_at = bytes.find(middle.substr(0, 256));
  ASSERT_NE(data_at, std::string::npos);
  const size_t alter_at = data_at + 100000;
  ASSERT_GT(alter_at, index::kFingerprintSpan);
  ASSERT_LT(alter_at + 16, bytes.size() - index::kFingerprintSpan);
  {
    int fd = ::open(shard_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    std::string junk(16, '\x5a');
    ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(alter_at)), 16);
    ::close(fd);
  }

  // Precondition: the head/tail fingerprint does not notice, so verify=off
  // opens the shard and serves whatever bytes it has.
  {
    auto off = Open(idx_);
    ASSERT_TRUE(off);
    std::string got;
    ASSERT_TRUE(ReadAt(*off, reader_testing::InodeOf(*off, "a-head.bin"), 0, 100, &got).ok());
    EXPECT_EQ(got, Want("a-head.bin").substr(0, 100));
    ASSERT_TRUE(ReadAt(*off, reader_testing::InodeOf(*off, "b-middle.bin"), 100000, 16, &got).ok());
    EXPECT_NE(got, middle.substr(100000, 16)) << "the shard was not altered";
  }
  for (VerifyMode mode : {VerifyMode::kFirst, VerifyMode::kAlways}) {
    FilesystemOptions o;
    o.verify = mode;
    auto fs = Open(idx_, o);
    ASSERT_TRUE(fs);
    InodeId b = reader_testing::InodeOf(*fs, "b-middle.bin");
    // Any read of the altered file fails, even of bytes far from the change,
    // naming that file and its shard; the shard's other files are served.
    for (uint64_t off : {uint64_t{0}, uint64_t{100000}, uint64_t{middle.size() - 10}}) {
      std::string got;
      Status s = ReadAt(*fs, b, off, 16, &got);
      EXPECT_EQ(s.code(), Status::Code::kCorruption) << off << ": " << s.message();
      EXPECT_THAT(s.message(), HasSubstr("b-middle.bin"));
      EXPECT_THAT(s.message(), HasSubstr(shard_));
      EXPECT_TRUE(got.empty());
      for (const char* name : {"a-head.bin", "c-tail.bin"}) {
        ASSERT_TRUE(ReadAll(*fs, reader_testing::InodeOf(*fs, name), 40000, &got).ok()) << name;
        EXPECT_TRUE(got == Want(name)) << name;
      }
    }
  }
}

// verify=first: a file verified on its first read, then its shard rewritten
// in place with the mtime set back (same size, same fingerprint, same
// mtime): the ctime moved, so the shard is checked again and the file,
// verified before the change, is verified again: EIO, never "EVIL". The
// shard's other files, verified again too, serve. Written without setting
// the mtime back, the shard serves nothing until it is checked again.
TEST_F(ShardDamageTest, VerifyFirstRefusesAShardRewrittenAfterTheCheck) {
  MakeIndexedShard(src_, shard_, idx_);
  const std::string bytes = testing::ReadFile(shard_);
  const std::string middle = Want("b-middle.bin");
  const size_t data_at = bytes.find(middle.substr(0, 256));
  ASSERT_NE(data_at, std::string::npos);
  FilesystemOptions o;
  o.verify = VerifyMode::kFirst;
  auto fs = Open(idx_, o);
  ASSERT_TRUE(fs);
  InodeId a = reader_testing::InodeOf(*fs, "a-head.bin");
  InodeId b = reader_testing::InodeOf(*fs, "b-middle.bin");
  std::string got;
  ASSERT_TRUE(ReadAll(*fs, b, 40000, &got).ok());
  ASSERT_TRUE(got == middle);
  ASSERT_TRUE(ReadAll(*fs, a, 40000, &got).ok());
  auto write = [&](const char* what, bool keep_mtime) {
    struct stat before = testing::Lstat(shard_);
    int fd = ::open(shard_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, what, 4, static_cast<off_t>(data_at + 100000)), 4);
    if (keep_mtime) {
      const struct timespec times[2] = {before.st_atim, before.st_mtim};
      ASSERT_EQ(::futimens(fd, times), 0);
    }
    ::close(fd);
  };
  write("EVIL", /*keep_mtime=*/true);
  for (int pass = 0; pass < 2; ++pass) {
    Status s = ReadAt(*fs, b, 100000, 16, &got);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
    EXPECT_THAT(s.message(), HasSubstr("b-middle.bin"));
    EXPECT_THAT(s.message(), HasSubstr(shard_));
    EXPECT_TRUE(got.empty());
    ASSERT_TRUE(ReadAll(*fs, a, 40000, &got).ok());
    EXPECT_TRUE(got == Want("a-head.bin"));
  }
  // Written again, the mtime left as the write set it: EIO for every file.
  write(middle.data() + 100000, /*keep_mtime=*/false);
  for (InodeId inode : {a, b}) {
    Status s = ReadAt(*fs, inode, 0, 16, &got);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
    EXPECT_THAT(s.message(), HasSubstr("changed since it was checked"));
    EXPECT_THAT(s.message(), HasSubstr(shard_));
    EXPECT_TRUE(got.empty());
  }
  // After the back-off the shard, as indexed again, is opened, checked and
  // its files verified: all serve.
  ::usleep(static_cast<useconds_t>(std::chrono::microseconds(ShardFiles::kFirstRecheck).count() +
                                   100000));
  ASSERT_TRUE(ReadAll(*fs, b, 40000, &got).ok());
  EXPECT_TRUE(got == middle);
}

// A shard deleted while open (its ctime moves, its bytes stay on the open
// descriptor) goes on serving the indexed bytes, checked again.
TEST_F(ShardDamageTest, AShardDeletedWhileOpenServesItsCheckedBytes) {
  for (VerifyMode mode : {VerifyMode::kOff, VerifyMode::kFirst}) {
    const std::string idx = fmt::format("{}-{}", idx_, static_cast<int>(mode));
    MakeIndexedShard(src_, shard_, idx);
    FilesystemOptions o;
    o.verify = mode;
    auto fs = Open(idx, o);
    ASSERT_TRUE(fs);
    std::string got;
    ASSERT_TRUE(ReadAll(*fs, reader_testing::InodeOf(*fs, "a-head.bin"), 40000, &got).ok());
    ASSERT_EQ(::unlink(shard_.c_str()), 0);
    for (const char* name : {"a-head.bin", "b-middle.bin", "c-tail.bin"}) {
      ASSERT_TRUE(ReadAll(*fs, reader_testing::InodeOf(*fs, name), 40000, &got).ok()) << name;
      EXPECT_TRUE(got == Want(name)) << name;
    }
  }
}

TEST_F(ShardDamageTest, VerifyFirstPassesAnIntactShard) {
  MakeIndexedShard(src_, shard_, idx_);
  for (VerifyMode mode : {VerifyMode::kFirst, VerifyMode::kAlways}) {
    FilesystemOptions o;
    o.verify = mode;
    auto fs = Open(idx_, o);
    ASSERT_TRUE(fs);
    for (const char* name : {"a-head.bin", "b-middle.bin", "c-tail.bin"}) {
      for (int pass = 0; pass < 2; ++pass) {
        std::string got;
        ASSERT_TRUE(ReadAll(*fs, reader_testing::InodeOf(*fs, name), 40000, &got).ok()) << name;
        EXPECT_TRUE(got == Want(name)) << name;
      }
    }
  }
}

TEST_F(ShardDamageTest, VerifyNeedsChecksumsInTheIndex) {
  MakeIndexedShard(src_, shard_, idx_, /*checksum=*/false);
  FilesystemOptions o;
  o.verify = VerifyMode::kFirst;
  auto fs = Open(idx_, o);
  ASSERT_TRUE(fs);
  std::string got;
  Status s = ReadAt(*fs, reader_testing::InodeOf(*fs, "a-head.bin"), 0, 10, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(got.empty());
}

// readdir by offsets over a streamed directory: what `ls` (one pass in
// small buffers), telldir/seekdir and rewinddir see.
class DirCursorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string src = dir_ / "src";
    fs::create_directories(src + "/d/sub");
    for (int i = 0; i < 300; ++i) {
      std::string n = fmt::format("e{:03}", (i * 7) % 300);  // Created out of order.
      testing::WriteFile(src + "/d/" + n, n);
      names_.push_back(fmt::format("e{:03}", i));
    }
    names_.push_back("sub");
    MakeIndexedShard(src, dir_ / "s.tar", dir_ / "idx");
    fs_ = Open(dir_ / "idx");
    ASSERT_TRUE(fs_);
  }

  struct Got {
    uint64_t next_off;
    std::string name;
    uint64_t inode;
  };

  // Reads from `off` taking at most `max` entries, as a readdir with a
  // small buffer does.
  std::vector<Got> ReadSome(DirCursor& c, uint64_t off, size_t max) {
    std::vector<Got> out;
    Status s = c.Read(*fs_, off, [&](uint64_t next, std::string_view name, const EntryRecord& r) {
      if (out.size() == max) return false;
      out.push_back({next, std::string(name), r.inode.value});
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }

  TempDir dir_;
  std::vector<std::string> names_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(DirCursorTest, ReadInSmallStepsGivesEveryEntryOnceInOrder) {
  Result<DirCursor> c = DirCursor::Open(*fs_, reader_testing::InodeOf(*fs_, "d"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::vector<std::string> seen;
  uint64_t off = 0;
  for (;;) {
    std::vector<Got> got = ReadSome(*c, off, 7);
    if (got.empty()) break;
    for (const Got& g : got) {
      EXPECT_EQ(g.next_off, off + 1);
      off = g.next_off;
      seen.push_back(g.name);
    }
  }
  ASSERT_EQ(seen.size(), names_.size() + 2);
  EXPECT_EQ(seen[0], ".");
  EXPECT_EQ(seen[1], "..");
  EXPECT_EQ(std::vector<std::string>(seen.begin() + 2, seen.end()), names_);
}

TEST_F(DirCursorTest, AnyOffsetCanBeSoughtAndRereadAndDotsCarryInodes) {
  Result<DirCursor> c = DirCursor::Open(*fs_, reader_testing::InodeOf(*fs_, "d"));
  ASSERT_TRUE(c.ok());
  std::vector<Got> dots = ReadSome(*c, 0, 2);
  ASSERT_EQ(dots.size(), 2u);
  EXPECT_EQ(dots[0].inode, reader_testing::InodeOf(*fs_, "d").value);
  EXPECT_EQ(dots[1].inode, index::kRootInode.value);
  for (uint64_t off : {uint64_t{250}, uint64_t{3}, uint64_t{301}, uint64_t{2}, uint64_t{1}}) {
    std::vector<Got> got = ReadSome(*c, off, 3);  // seekdir(off), then readdir.
    ASSERT_FALSE(got.empty()) << off;
    std::string want = off == 1 ? ".." : names_[off - 2];
    EXPECT_EQ(got[0].name, want) << off;
    EXPECT_EQ(got[0].next_off, off + 1);
  }
  EXPECT_TRUE(ReadSome(*c, names_.size() + 2, 5).empty());   // At the end.
  EXPECT_TRUE(ReadSome(*c, names_.size() + 40, 5).empty());  // Past it.
  // Where the last call ended, reading on resumes after its name.
  std::vector<Got> a = ReadSome(*c, 100, 4);
  std::vector<Got> b = ReadSome(*c, a.back().next_off, 4);
  EXPECT_EQ(b[0].name, names_[a.back().next_off - 2]);
}

TEST_F(DirCursorTest, OnlyDirectoriesOpen) {
  EXPECT_EQ(DirCursor::Open(*fs_, reader_testing::InodeOf(*fs_, "d/e001")).status().code(),
            Status::Code::kNotADirectory);
  EXPECT_EQ(DirCursor::Open(*fs_, InodeId{99999}).status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace shardfs::reader
