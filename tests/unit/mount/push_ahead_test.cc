// src/mount/push_ahead.h without a mount: which files a push plans and skips, its
// budgets, what a job stores (through a recording Store), and that the
// request path never waits for a pusher, even one stuck in a store.
#include "src/mount/push_ahead.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/io.h"
#include "tests/unit/codec/codec_test_util.h"
#include "tests/unit/reader/reader_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::mount {

using reader::EntryRecord;
using reader::Filesystem;
using reader::FilesystemOptions;
using reader::InodeId;
using reader::PushHint;
using reader::ReadReply;
using reader::ShardHandle;
using reader::VerifyMode;
namespace {

using reader_testing::ResidentPages;

namespace fs = std::filesystem;

// `o` with a job age no loaded machine reaches: a job these tests watch is
// never dropped as stale because the test was scheduled late. Only
// AJobThatWaitedTooLongIsDropped keeps the real age.
PushOptions Patient(PushOptions o) {
  o.max_job_age = std::chrono::minutes(10);
  return o;
}

// Patient options with drop_behind alone (or nothing at all): no pushes, no
// shard readahead.
PushOptions DropBehindOnly(bool drop) {
  return Patient(
      {.sequential_bytes = 0, .random_bytes = 0, .shard_readahead = 0, .drop_behind = drop});
}
using reader_testing::InodeOf;
using reader_testing::OpenFs;
using shardfs::testing::TempDir;

// What a Store was asked to store, by inode.
class RecordingStore {
 public:
  PushAhead::Store fn() {
    return [this](InodeId inode, const PushBytes& bytes, const std::function<bool()>&) {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_at_ == inode) return -ENOENT;
      std::string& got = stored_[inode.value];
      got.assign(bytes.size, '\0');
      if (bytes.data != nullptr) {
        got.assign(bytes.data, bytes.size);
      } else if (::pread(bytes.fd, got.data(), bytes.size, static_cast<off_t>(bytes.pos)) !=
                 static_cast<ssize_t>(bytes.size)) {
        return -EIO;
      }
      ++(bytes.data != nullptr ? from_memory_ : from_fd_);
      order_.push_back(inode.value);
      return 0;
    };
  }
  void FailAt(InodeId inode) { fail_at_ = inode; }
  // Stores given bytes in memory, and a descriptor range.
  int from_memory() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_memory_;
  }
  int from_fd() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_fd_;
  }
  std::map<uint64_t, std::string> stored() {
    std::lock_guard<std::mutex> lock(mu_);
    return stored_;
  }

 private:
  std::mutex mu_;
  InodeId fail_at_{0};
  std::map<uint64_t, std::string> stored_;
  std::vector<uint64_t> order_;
  int from_memory_ = 0;
  int from_fd_ = 0;
};

// Shards whose members are in tree order (tar --sort=name), as `shardfs
// pack` writes them.
class PushAheadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    for (const char* d : {"a", "b", "c"}) fs::create_directories(src_ + "/" + d);
    // a/ holds 5 small files, b/ 3 more and a file bigger than
    // PushAhead::kMaxFile, c/ one small file after it.
    for (int i = 0; i < 5; ++i) {
      shardfs::testing::WriteFile(fmt::format("{}/a/f{}", src_, i),
                                  shardfs::testing::PseudoRandomBytes(1000 + 700 * i, 40 + i));
    }
    shardfs::testing::WriteFile(src_ + "/a/g-empty", "");
    for (int i = 0; i < 3; ++i) {
      shardfs::testing::WriteFile(fmt::format("{}/b/f{}", src_, i),
                                  shardfs::testing::PseudoRandomBytes(3000 + i, 50 + i));
    }
    shardfs::testing::WriteFile(src_ + "/b/z-big",
                                shardfs::testing::PseudoRandomBytes(PushAhead::kMaxFile + 1, 60));
    shardfs::testing::WriteFile(src_ + "/c/f0", shardfs::testing::PseudoRandomBytes(500, 61));
  }

  reader_testing::TestShard WriteShard(const std::string& shard,
                                       const std::vector<std::string>& names) {
    return reader_testing::WriteShard(src_, shard, names);
  }

  std::string WrittenShard(const std::string& dir, int count, size_t size, uint64_t seed);

  static std::vector<std::string> TreeOrder() {
    return {"a", "a/f0", "a/f1", "a/f2", "a/f3",    "a/f4", "a/g-empty",
            "b", "b/f0", "b/f1", "b/f2", "b/z-big", "c",    "c/f0"};
  }

  // Indexes one shard of the tree in tree order and opens it.
  std::unique_ptr<Filesystem> OpenTree(FilesystemOptions o = {}) {
    reader_testing::IndexShards({WriteShard(dir_ / "s.tar", TreeOrder())}, idx_);
    return reader_testing::OpenFs(idx_, o);
  }

  // Indexes the tree as OpenTree does, after a file of 80 KB that keeps a/
  // out of the shard's fingerprinted head (index/fingerprint.h), and returns
  // the files a push after a/f0 plans with a 1 MiB window. The index stays
  // for OpenFs(idx_).
  std::vector<PlannedFile> PlanFromF0() {
    shardfs::testing::WriteFile(src_ + "/0-pad", shardfs::testing::PseudoRandomBytes(80000, 62));
    std::vector<std::string> names = TreeOrder();
    names.insert(names.begin(), "0-pad");
    reader_testing::IndexShards({WriteShard(dir_ / "s.tar", names)}, idx_);
    auto fs = reader_testing::OpenFs(idx_);
    EXPECT_TRUE(fs);
    std::vector<PlannedFile> files;
    if (!fs) return files;
    RecordingStore unused;
    PushAhead push(fs.get(), {}, unused.fn());
    Status s = push.Plan(reader_testing::InodeOf(*fs, "a/f0"), 1 << 20, false, &files);
    EXPECT_TRUE(s.ok()) << s.message();
    return files;
  }

  // Writes one byte in place at `pos` of the shard: same size, same
  // fingerprint where `pos` is in the middle.
  void AlterByte(uint64_t pos) {
    int fd = ::open((dir_ / "s.tar").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    char x = 'X';
    ASSERT_EQ(::pwrite(fd, &x, 1, static_cast<off_t>(pos)), 1);
    ::close(fd);
  }

  std::vector<std::string> Names(const Filesystem& fs, const std::vector<PlannedFile>& files) {
    std::vector<std::string> names;
    for (const PlannedFile& f : files) {
      std::string p;
      EXPECT_TRUE(fs.reader().PathOf(f.inode, &p).ok());
      names.push_back(p);
    }
    return names;
  }

  // The names PushAhead::Plan gives after `path`, `max_bytes` at most.
  std::vector<std::string> Plan(const Filesystem& fs, const PushAhead& push, std::string_view path,
                                uint64_t max_bytes, bool stop_at_pushed = false) {
    std::vector<PlannedFile> files;
    Status s = push.Plan(reader_testing::InodeOf(fs, path), max_bytes, stop_at_pushed, &files);
    EXPECT_TRUE(s.ok()) << s.message();
    return Names(fs, files);
  }

  // What Filesystem::Read told push-ahead of a READ, and what it noted.
  struct Noted {
    PushHint range;
    ReadNote note;
  };

  // What Filesystem::Read tells push-ahead of a read of `size` bytes at
  // `off` of `path` that may splice (a local shard's range: nothing read).
  static PushHint Hint(Filesystem& fs, std::string_view path, uint64_t off = 0,
                       size_t size = 1 << 20) {
    thread_local std::string buf;
    buf.resize(size);
    Result<ReadReply> r = fs.Read(reader_testing::InodeOf(fs, path), off, size, buf.data(), true);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->push : PushHint{};
  }

  // A read of the whole file `path`, noted as the FUSE edge does before its
  // reply.
  Noted ReadWhole(Filesystem& fs, PushAhead& push, std::string_view path) {
    Noted r;
    r.range = Hint(fs, path);
    r.note = push.NoteRead(reader_testing::InodeOf(fs, path), r.range);
    return r;
  }

  // Reads the whole file `path` into `buf`, as the FUSE edge does for a
  // reply from a buffer; what Read told push-ahead of it.
  PushHint ReadInto(Filesystem& fs, std::string_view path, char* buf) {
    Result<ReadReply> r = fs.Read(reader_testing::InodeOf(fs, path), 0, 1 << 20, buf, false);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->push : PushHint{};
  }

  std::string Content(std::string_view path) {
    return shardfs::testing::ReadFile(src_ + "/" + std::string(path));
  }

  TempDir dir_;
  std::string src_;
  std::string idx_ = dir_ / "idx";
};

TEST_F(PushAheadTest, InodeScanAndPathOfCoverTheTree) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  std::vector<std::string> paths;
  uint64_t next = 1;
  Status s = fs->reader().ForEachInode(index::kRootInode, [&](const EntryRecord& rec) {
    EXPECT_EQ(rec.inode.value, next++);
    std::string p;
    Status ps = fs->reader().PathOf(rec.inode, &p);
    EXPECT_TRUE(ps.ok()) << ps.message();
    paths.push_back(p);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<std::string> want = {""};
  for (const std::string& n : TreeOrder()) want.push_back(n);
  EXPECT_EQ(paths, want);
  std::vector<uint64_t> seen;
  ASSERT_TRUE(fs->reader()
                  .ForEachInode(InodeId{4},
                                [&](const EntryRecord& rec) {
                                  seen.push_back(rec.inode.value);
                                  return seen.size() < 3;
                                })
                  .ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{4, 5, 6}));
  std::string p;
  EXPECT_EQ(fs->reader().PathOf(InodeId{999}, &p).code(), Status::Code::kNotFound);
}

TEST_F(PushAheadTest, PlansTheFilesThatFollowInTheShard) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({}), store.fn());
  // Steps over the empty file and directory b, stops before the file too
  // big to push.
  EXPECT_EQ(Plan(*fs, push, "a/f2", 1 << 20),
            (std::vector<std::string>{"a/f3", "a/f4", "b/f0", "b/f1", "b/f2"}));
  // The byte budget: f3 (3100) + f4 (3800) fit in 7000, b/f0 does not.
  EXPECT_EQ(Plan(*fs, push, "a/f2", 7000), (std::vector<std::string>{"a/f3", "a/f4"}));
  EXPECT_EQ(Plan(*fs, push, "b/z-big", 1 << 20), (std::vector<std::string>{"c/f0"}));
  EXPECT_TRUE(Plan(*fs, push, "c/f0", 1 << 20).empty());
  EXPECT_TRUE(Plan(*fs, push, "a", 1 << 20).empty());  // Not a file.

  // The planned ranges are the files' bytes.
  std::vector<PlannedFile> files;
  ASSERT_TRUE(push.Plan(reader_testing::InodeOf(*fs, "a/f0"), 1 << 20, false, &files).ok());
  ASSERT_EQ(files.size(), 7u);
  Result<ShardHandle> shard = fs->shard_files().Get(index::ShardId{0});
  ASSERT_TRUE(shard.ok());
  std::string got;
  for (const PlannedFile& f : files) {
    std::string p;
    ASSERT_TRUE(fs->reader().PathOf(f.inode, &p).ok());
    got.assign(f.size, '\0');
    Status s = push.ReadPlannedFile(f, *shard, got.data());
    ASSERT_TRUE(s.ok()) << p << ": " << s.message();
    EXPECT_EQ(got, Content(p)) << p;
  }
}

TEST_F(PushAheadTest, NothingWhenTheShardIsNotInInodeOrder) {
  std::vector<std::string> names = TreeOrder();
  std::reverse(names.begin(), names.end());
  reader_testing::IndexShards({WriteShard(dir_ / "s.tar", names)}, idx_);
  auto fs = reader_testing::OpenFs(idx_);
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({}), store.fn());
  EXPECT_TRUE(Plan(*fs, push, "a/f0", 1 << 20).empty());
}

TEST_F(PushAheadTest, StopsAtTheShardBoundary) {
  reader_testing::IndexShards({WriteShard(dir_ / "s1.tar", {"a", "a/f0", "a/f1", "a/f2"}),
                               WriteShard(dir_ / "s2.tar", {"a/f3", "a/f4"})},
                              idx_);
  auto fs = reader_testing::OpenFs(idx_);
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({}), store.fn());
  EXPECT_EQ(Plan(*fs, push, "a/f0", 1 << 20), (std::vector<std::string>{"a/f1", "a/f2"}));
  EXPECT_TRUE(Plan(*fs, push, "a/f2", 1 << 20).empty());
  EXPECT_EQ(Plan(*fs, push, "a/f3", 1 << 20), (std::vector<std::string>{"a/f4"}));
}

TEST_F(PushAheadTest, AJobStoresTheFilesThatFollowWithTheirBytes) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({}), store.fn());
  Noted r = ReadWhole(*fs, push, "a/f1");
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, true, {}},
              buf.data());
  std::map<uint64_t, std::string> stored = store.stored();
  std::vector<std::string> want = {"a/f2", "a/f3", "a/f4", "b/f0", "b/f1", "b/f2"};
  ASSERT_EQ(stored.size(), want.size());
  for (const std::string& p : want) {
    InodeId ino = reader_testing::InodeOf(*fs, p);
    EXPECT_EQ(stored[ino.value], Content(p)) << p;
    EXPECT_TRUE(push.WasPushed(ino)) << p;
  }
  EXPECT_FALSE(push.WasPushed(reader_testing::InodeOf(*fs, "a/f1")));  // It was read, not pushed.
  EXPECT_EQ(push.stats().files_pushed, want.size());
}

// With store_from_fd a local shard's files go to the Store as ranges of
// its descriptor (libfuse splices them): the same bytes, no copy here; the
// job's first file alone goes from memory.
TEST_F(PushAheadTest, AJobStoresFromTheShardDescriptor) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({.store_from_fd = true}), store.fn());
  Noted r = ReadWhole(*fs, push, "a/f1");
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, true, {}},
              buf.data());
  std::map<uint64_t, std::string> stored = store.stored();
  std::vector<std::string> want = {"a/f2", "a/f3", "a/f4", "b/f0", "b/f1", "b/f2"};
  ASSERT_EQ(stored.size(), want.size());
  for (const std::string& p : want)
    EXPECT_EQ(stored[reader_testing::InodeOf(*fs, p).value], Content(p)) << p;
  // All but the job's first: that one goes from memory (it is the store
  // likely to find the inode unknown to the kernel).
  EXPECT_EQ(store.from_fd(), static_cast<int>(want.size()) - 1);
  EXPECT_EQ(store.from_memory(), 1);
  EXPECT_EQ(push.stats().files_pushed_fd, want.size() - 1);
  EXPECT_EQ(push.stats().files_pushed, want.size());
}

// verify=first: a file not yet checked is read, checked and stored from the
// checked bytes; once checked (here by a READ), it goes from the descriptor.
// An altered file is never stored, whichever way.
TEST_F(PushAheadTest, StoreFromFdOnlyForFilesNoCheckNeedsToSee) {
  auto fs = OpenTree(FilesystemOptions{.verify = VerifyMode::kFirst});
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20, .store_from_fd = true}), store.fn());
  std::string buf(PushAhead::kMaxFile, '\0');
  // a/f3 checked by a READ that another PushAhead saw (its read bit is not
  // set in `push`).
  RecordingStore unused;
  PushAhead other(fs.get(), {}, unused.fn());
  ReadWhole(*fs, other, "a/f3");
  EXPECT_FALSE(reader_testing::WouldVerify(*fs, "a/f3"));
  EXPECT_TRUE(reader_testing::WouldVerify(*fs, "a/f2"));
  Noted r = ReadWhole(*fs, push, "a/f1");
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, false, {}},
              buf.data());
  std::map<uint64_t, std::string> stored = store.stored();
  for (const char* p : {"a/f2", "a/f3", "a/f4"}) {
    EXPECT_EQ(stored[reader_testing::InodeOf(*fs, p).value], Content(p)) << p;
  }
  EXPECT_EQ(push.stats().files_pushed_fd, 1u);  // a/f3 alone.
  EXPECT_GE(store.from_memory(), 2);
}

// A shard read in chunks (a network filesystem's behind the node's cache,
// a remote one) whose chunks this process holds or not, as the test says;
// reads go to the file and are counted.
class HeldChunks : public reader::ChunkedReader {
 public:
  std::atomic<bool> held{false};
  std::atomic<int> reads{0};
  Status ReadShard(const ShardHandle& shard, uint64_t pos, size_t len, char* buf) override {
    reads.fetch_add(1);
    return PreadExact(shard->fd(), buf, len, pos);
  }
  bool Holds(const ShardHandle&, uint64_t, size_t) override { return held.load(); }
  void NoteDelivered(index::ShardId, uint64_t, bool) override {}
  Status Recheck(index::ShardId) override { return Status::Ok(); }
};

// A shuffled reader's neighbours are pushed from chunks already here, never
// fetched for; a sequential reader's are read whatever it takes.
TEST_F(PushAheadTest, ARandomPushFetchesNothingForAShardReadInChunks) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  std::string buf(PushAhead::kMaxFile, '\0');
  RecordingStore unused;
  PushAhead other(fs.get(), {}, unused.fn());
  Noted r = ReadWhole(*fs, other, "a/f1");
  HeldChunks chunks;
  auto shard =
      std::make_shared<reader::OpenShard>(r.range.shard_id, ::dup(r.range.shard->fd()), &chunks);
  ASSERT_FALSE(shard->direct());
  const InodeId f1 = InodeOf(*fs, "a/f1");
  {
    RecordingStore store;
    PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20}), store.fn());
    push.RunJob({f1, shard, r.range.shard_id, false, {}}, buf.data());
    EXPECT_TRUE(store.stored().empty());
    EXPECT_EQ(chunks.reads.load(), 0);
    EXPECT_GE(push.stats().files_skipped_cold, 3u);
    chunks.held = true;
    push.RunJob({f1, shard, r.range.shard_id, false, {}}, buf.data());
    std::map<uint64_t, std::string> stored = store.stored();
    for (const char* p : {"a/f2", "a/f3", "a/f4"}) {
      EXPECT_EQ(stored[InodeOf(*fs, p).value], Content(p)) << p;
    }
    EXPECT_GE(chunks.reads.load(), 3);
  }
  chunks.held = false;
  chunks.reads = 0;
  RecordingStore store;
  PushAhead push(fs.get(), Patient({}), store.fn());
  push.RunJob({f1, shard, r.range.shard_id, true, {}}, buf.data());
  EXPECT_EQ(store.stored()[InodeOf(*fs, "a/f2").value], Content("a/f2"));
  EXPECT_GE(chunks.reads.load(), 1);
  EXPECT_EQ(push.stats().files_skipped_cold, 0u);
}

// verify=always: every file is read and checked, none goes from the
// descriptor; a file altered in the shard (before the shard was opened:
// same size, same fingerprint, same stamp since) stops the job before its
// store.
TEST_F(PushAheadTest, VerifyAlwaysNeverStoresFromFd) {
  const std::vector<PlannedFile> files = PlanFromF0();
  ASSERT_GE(files.size(), 2u);
  AlterByte(files[1].position + 10);
  auto always = reader_testing::OpenFs(idx_, FilesystemOptions{.verify = VerifyMode::kAlways});
  ASSERT_TRUE(always);
  RecordingStore store2;
  PushAhead push2(always.get(), Patient({.random_bytes = 1 << 20, .store_from_fd = true}),
                  store2.fn());
  Noted r2 = ReadWhole(*always, push2, "a/f0");
  std::string buf(PushAhead::kMaxFile, '\0');
  push2.RunJob(
      {reader_testing::InodeOf(*always, "a/f0"), r2.range.shard, r2.range.shard_id, false, {}},
      buf.data());
  EXPECT_EQ(store2.stored().size(), 1u);
  EXPECT_EQ(store2.stored().count(files[1].inode.value), 0u);
  EXPECT_EQ(push2.stats().files_pushed_fd, 0u);
}

// A shard written after it was opened and checked pushes nothing, whatever
// the verify mode: its stamp (base/open_file.h) differs.
TEST_F(PushAheadTest, AShardWrittenSinceItsCheckPushesNothing) {
  const std::vector<PlannedFile> files = PlanFromF0();
  ASSERT_GE(files.size(), 2u);
  auto fs = reader_testing::OpenFs(idx_);
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20, .store_from_fd = true}), store.fn());
  Noted r = ReadWhole(*fs, push, "a/f0");
  AlterByte(files[1].position + 10);
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f0"), r.range.shard, r.range.shard_id, false, {}},
              buf.data());
  EXPECT_EQ(store.stored().size(), 0u);
  // And the next read of any of its files fails (EIO), naming the change.
  std::string out(64, '\0');
  Result<ReadReply> again =
      fs->Read(reader_testing::InodeOf(*fs, "a/f0"), 0, out.size(), out.data(), false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Status::Code::kCorruption);
  EXPECT_NE(again.status().message().find("changed since it was checked"), std::string::npos)
      << again.status().message();
}

TEST_F(PushAheadTest, FilesReadOrPushedAreNeverStoredAgain) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  // The random window holds a/f4 (3800 bytes) alone.
  PushAhead push(fs.get(), Patient({.random_bytes = 3800}), store.fn());
  std::string buf(PushAhead::kMaxFile, '\0');
  // a/f3 was read (its pages are the kernel's), a/f4 pushed by an earlier job.
  Noted r3 = ReadWhole(*fs, push, "a/f3");
  EXPECT_TRUE(push.WasRead(reader_testing::InodeOf(*fs, "a/f3")));
  push.RunJob({reader_testing::InodeOf(*fs, "a/f3"), r3.range.shard, r3.range.shard_id, false, {}},
              buf.data());
  ASSERT_TRUE(push.WasPushed(reader_testing::InodeOf(*fs, "a/f4")));

  EXPECT_EQ(Plan(*fs, push, "a/f0", 1 << 20),
            (std::vector<std::string>{"a/f1", "a/f2", "b/f0", "b/f1", "b/f2"}));
  // After a random read the plan ends at the first file already pushed.
  EXPECT_EQ(Plan(*fs, push, "a/f0", 1 << 20, true), (std::vector<std::string>{"a/f1", "a/f2"}));
  // Files left out still count against the byte budget.
  EXPECT_TRUE(Plan(*fs, push, "a/f2", 7000).empty());
}

// A pushed file that still gets a READ lost its pages before its reader
// came: counted once as wasted, and with push_random=auto told to the
// budget, whose window it shrinks (src/mount/push_budget.h).
TEST_F(PushAheadTest, APushedFileReadAfterAllCountsAsWasted) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushOptions o =
      Patient({.random_bytes = 3800, .random_follows_memory = true, .mem_available = [] {
                 return uint64_t{8} << 30;
               }});
  PushAhead push(fs.get(), o, store.fn());
  ASSERT_NE(push.budget(), nullptr);
  std::string buf(PushAhead::kMaxFile, '\0');
  Noted r3 = ReadWhole(*fs, push, "a/f3");
  push.RunJob({reader_testing::InodeOf(*fs, "a/f3"), r3.range.shard, r3.range.shard_id, false, {}},
              buf.data());
  const InodeId f4 = reader_testing::InodeOf(*fs, "a/f4");
  ASSERT_TRUE(push.WasPushed(f4));
  EXPECT_EQ(push.stats().files_wasted, 0u);
  // The kernel forgot it before any READ: its pages went with the inode.
  push.Forgotten(f4);
  EXPECT_EQ(push.stats().files_wasted, 1u);
  EXPECT_FALSE(push.WasPushed(f4));
  // Pushed again, then read after all.
  push.RunJob({reader_testing::InodeOf(*fs, "a/f3"), r3.range.shard, r3.range.shard_id, false, {}},
              buf.data());
  ASSERT_TRUE(push.WasPushed(f4));
  ReadWhole(*fs, push, "a/f4");
  ReadWhole(*fs, push, "a/f4");  // A second READ is no second waste.
  EXPECT_EQ(push.stats().files_wasted, 2u);
  EXPECT_FALSE(push.WasPushed(f4));
  EXPECT_TRUE(push.WasRead(f4));
  // Files read and then forgotten, or read and never pushed, are no waste.
  push.Forgotten(f4);
  push.Forgotten(reader_testing::InodeOf(*fs, "a/f3"));
  ReadWhole(*fs, push, "b/f0");
  EXPECT_EQ(push.stats().files_wasted, 2u);
  EXPECT_EQ(push.budget()->halvings(), 0);  // Too few outcomes to decide.
}

TEST_F(PushAheadTest, AFileReadWhileTheJobRunsIsSkipped) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  PushAhead* self = nullptr;
  std::vector<uint64_t> stored;
  InodeId f3 = reader_testing::InodeOf(*fs, "a/f3");
  PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20}),
                 [&](InodeId inode, const PushBytes&, const std::function<bool()>&) {
                   stored.push_back(inode.value);
                   // While a/f2 is being stored, a READ of a/f3 reaches a worker.
                   if (stored.size() == 1) ReadWhole(*fs, *self, "a/f3");
                   return 0;
                 });
  self = &push;
  ASSERT_EQ(push.options().random_bytes, uint64_t{1} << 20);
  Noted r = ReadWhole(*fs, push, "a/f1");
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, false, {}},
              buf.data());
  EXPECT_EQ(std::count(stored.begin(), stored.end(), f3.value), 0);
  EXPECT_EQ(push.stats().files_skipped_read, 1u);
  EXPECT_GE(stored.size(), 3u);  // a/f2, a/f4, b/...
}

// A store that waited (the kernel had not learnt the inode yet) asks
// whether the file is still wanted before it tries again: a reader that
// reached the file meanwhile has its pages, and a second store would only
// cache shard pages again that a drop behind let go.
TEST_F(PushAheadTest, AStoreThatWaitedSkipsAFileReadMeanwhile) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  PushAhead* self = nullptr;
  std::vector<uint64_t> stored;
  std::vector<bool> wanted;
  InodeId f2 = reader_testing::InodeOf(*fs, "a/f2");
  PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20}),
                 [&](InodeId inode, const PushBytes&, const std::function<bool()>& still_wanted) {
                   if (inode == f2) {
                     // Waiting for a listing; meanwhile a READ of a/f2 arrives.
                     ReadWhole(*fs, *self, "a/f2");
                     wanted.push_back(still_wanted());
                     return wanted.back() ? 0 : -ECANCELED;
                   }
                   wanted.push_back(still_wanted());
                   stored.push_back(inode.value);
                   return 0;
                 });
  self = &push;
  Noted r = ReadWhole(*fs, push, "a/f1");
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, false, {}},
              buf.data());
  ASSERT_FALSE(wanted.empty());
  EXPECT_FALSE(wanted.front());  // a/f2, read meanwhile.
  EXPECT_EQ(std::count(stored.begin(), stored.end(), f2.value), 0);
  EXPECT_FALSE(push.WasPushed(f2));
  EXPECT_EQ(push.stats().files_skipped_read, 1u);
  EXPECT_EQ(push.stats().store_errors, 0u);
  EXPECT_GE(stored.size(), 2u);  // The job went on: a/f3, a/f4, ...
  EXPECT_TRUE(std::all_of(wanted.begin() + 1, wanted.end(), [](bool w) { return w; }));
}

TEST_F(PushAheadTest, AStoreErrorEndsTheJob) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  store.FailAt(reader_testing::InodeOf(*fs, "a/f4"));  // The kernel does not know it.
  PushAhead push(fs.get(), Patient({}), store.fn());
  Noted r = ReadWhole(*fs, push, "a/f1");
  std::string buf(PushAhead::kMaxFile, '\0');
  push.RunJob({reader_testing::InodeOf(*fs, "a/f1"), r.range.shard, r.range.shard_id, true, {}},
              buf.data());
  EXPECT_EQ(store.stored().size(), 2u);  // a/f2, a/f3.
  EXPECT_EQ(push.stats().store_errors, 1u);
  EXPECT_FALSE(push.WasPushed(reader_testing::InodeOf(*fs, "a/f4")));
}

TEST_F(PushAheadTest, VerifiedBeforeItIsPushed) {
  // One byte of the second planned file altered before the shard is
  // opened: same size, same fingerprint (it is in the middle), different
  // content.
  const std::vector<PlannedFile> files = PlanFromF0();
  ASSERT_GE(files.size(), 2u);
  const PlannedFile victim = files[1];
  AlterByte(victim.position + 10);
  auto fs = reader_testing::OpenFs(idx_, FilesystemOptions{.verify = VerifyMode::kFirst});
  ASSERT_TRUE(fs);
  RecordingStore store;
  PushAhead push(fs.get(), Patient({.random_bytes = 1 << 20}), store.fn());
  Result<ShardHandle> shard = fs->shard_files().Get(index::ShardId{0});
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  std::string buf(PushAhead::kMaxFile, '\0');
  EXPECT_TRUE(push.ReadPlannedFile(files[0], *shard, buf.data()).ok());
  Status s = push.ReadPlannedFile(victim, *shard, buf.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
  // A job stops before the altered file: it is never stored.
  Noted r = ReadWhole(*fs, push, "a/f0");
  push.RunJob({reader_testing::InodeOf(*fs, "a/f0"), r.range.shard, r.range.shard_id, false, {}},
              buf.data());
  EXPECT_EQ(store.stored().count(victim.inode.value), 0u);
  EXPECT_EQ(store.stored().size(), 1u);
  // With verify=off the same bytes are read without a check: the mode is
  // what protects pushed pages, not luck.
  auto unverified = reader_testing::OpenFs(idx_);
  PushAhead unverified_push(unverified.get(), {.random_bytes = 1 << 20}, store.fn());
  EXPECT_TRUE(unverified_push.ReadPlannedFile(victim, *shard, buf.data()).ok());
}

TEST_F(PushAheadTest, SequentialToEofOnlyForAReaderWalkingTheShardInOrder) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  auto seq = [&](PushAhead& push, std::string_view path, uint64_t off, size_t size) {
    return push.NoteRead(reader_testing::InodeOf(*fs, path), Hint(*fs, path, off, size))
        .sequential_to_eof;
  };
  {
    RecordingStore store;
    PushAhead push(fs.get(), Patient({}), store.fn());
    EXPECT_TRUE(seq(push, "a/f0", 0, 1 << 16));
    EXPECT_TRUE(seq(push, "a/f1", 0, 1 << 16));
    EXPECT_FALSE(seq(push, "a/f2", 0, 100));  // Not to the end of the file.
    EXPECT_TRUE(seq(push, "a/f2", 100, 1 << 16));
    EXPECT_FALSE(seq(push, "a/f1", 0, 1 << 16));  // Backwards.
  }
  {
    RecordingStore store;
    PushAhead push(fs.get(), Patient({}), store.fn());
    EXPECT_FALSE(seq(push, "c/f0", 0, 1 << 16));  // A jump past a 1 MiB file.
  }
}

TEST_F(PushAheadTest, OnlyWholeOrSequentialReadsOfferJobsAndOnlyWithAWindow) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  {
    PushAhead off(fs.get(), {.sequential_bytes = 0, .random_bytes = 0}, store.fn());
    off.Start();  // No pushers: nothing to offer to.
    Noted r = ReadWhole(*fs, off, "a/f0");
    off.AfterReply(reader_testing::InodeOf(*fs, "a/f0"), r.range, r.note, true);
    EXPECT_EQ(off.stats().jobs_queued, 0u);
    EXPECT_FALSE(off.WasRead(reader_testing::InodeOf(*fs, "a/f0")));  // No bits kept when off.
  }
  PushAhead push(fs.get(), Patient({.sequential_bytes = 0, .random_bytes = 1 << 20}), store.fn());
  push.Start();
  // A partial read in the middle of a file: no job.
  PushHint part = Hint(*fs, "b/f1", 10, 100);
  ReadNote part_note = push.NoteRead(reader_testing::InodeOf(*fs, "b/f1"), part);
  push.AfterReply(reader_testing::InodeOf(*fs, "b/f1"), part, part_note, true);
  // A reply that did not reach the kernel: no job.
  Noted lost = ReadWhole(*fs, push, "c/f0");
  push.AfterReply(reader_testing::InodeOf(*fs, "c/f0"), lost.range, lost.note, false);
  EXPECT_EQ(push.stats().jobs_queued, 0u);
  // A whole-file read, not part of a walk (it goes backwards): one job.
  Noted whole = ReadWhole(*fs, push, "a/f3");
  push.AfterReply(reader_testing::InodeOf(*fs, "a/f3"), whole.range, whole.note, true);
  EXPECT_EQ(push.stats().jobs_queued, 1u);
  for (int i = 0; i < 1000 && store.stored().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  push.Stop();
  EXPECT_EQ(push.stats().jobs_run, 1u);
  EXPECT_EQ(store.stored().count(reader_testing::InodeOf(*fs, "a/f4").value), 1u);
}

// push_random=auto: the random window is what the available memory allows
// (src/mount/push_budget.h): none when memory is short, the whole window
// when the shards fit in half of what is available.
TEST_F(PushAheadTest, TheRandomWindowFollowsTheAvailableMemory) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  RecordingStore store;
  // A whole-file read that is no walk: after a read further on in the shard.
  auto random_read = [&](PushAhead& push) {
    Noted later = ReadWhole(*fs, push, "c/f0");
    push.AfterReply(reader_testing::InodeOf(*fs, "c/f0"), later.range, later.note, false);
    Noted whole = ReadWhole(*fs, push, "a/f3");
    EXPECT_FALSE(whole.note.sequential_to_eof);
    push.AfterReply(reader_testing::InodeOf(*fs, "a/f3"), whole.range, whole.note, true);
  };
  PushOptions short_of_memory{.sequential_bytes = 0,
                              .random_bytes = 1 << 20,
                              .random_follows_memory = true,
                              .mem_available = [] { return uint64_t{100} << 20; }};
  {
    PushAhead push(fs.get(), Patient(short_of_memory), store.fn());
    push.Start();
    EXPECT_EQ(push.RandomWindow(), 0u);
    random_read(push);
    EXPECT_EQ(push.stats().jobs_queued, 0u);
  }
  PushOptions plenty = short_of_memory;
  plenty.mem_available = [] { return uint64_t{8} << 30; };
  PushAhead push(fs.get(), Patient(plenty), store.fn());
  push.Start();
  EXPECT_EQ(push.RandomWindow(), uint64_t{1} << 20);
  random_read(push);
  EXPECT_EQ(push.stats().jobs_queued, 1u);
  for (int i = 0; i < 1000 && store.stored().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  push.Stop();
  EXPECT_EQ(store.stored().count(reader_testing::InodeOf(*fs, "a/f4").value), 1u);
}

// The request path must never wait for a pusher: with every
// pusher stuck in a store, as one waiting for a page lock would be,
// AfterReply still returns at once and the surplus is dropped.
TEST_F(PushAheadTest, RequestPathNeverWaitsForAStuckPusher) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int stores = 0;
  PushOptions o = Patient(
      {.sequential_bytes = 1 << 20, .random_bytes = 1 << 20, .threads = 1, .queue_capacity = 4});
  PushAhead push(fs.get(), o, [&](InodeId, const PushBytes&, const std::function<bool()>&) {
    std::unique_lock<std::mutex> lock(mu);
    ++stores;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return 0;
  });
  push.Start();
  Noted first = ReadWhole(*fs, push, "a/f0");
  push.AfterReply(reader_testing::InodeOf(*fs, "a/f0"), first.range, first.note, true);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return stores > 0; }));
  }
  // The pusher is stuck. 100 more replies must each return at once.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    for (const char* p : {"b/f0", "b/f1", "c/f0", "a/f4"}) {
      Noted r = ReadWhole(*fs, push, p);
      push.AfterReply(reader_testing::InodeOf(*fs, p), r.range, r.note, true);
    }
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(5));  // Not a timing check: a wait would be forever.
  PushStats st = push.stats();
  // Every job past the queue's capacity was dropped: a new one displaces
  // the oldest waiting, so at most queue_capacity wait.
  EXPECT_LE(st.jobs_run, 1u);
  EXPECT_GE(st.jobs_queued - st.jobs_dropped_full, 1u);
  EXPECT_LE(st.jobs_queued - st.jobs_dropped_full, 1u + o.queue_capacity);
  EXPECT_GT(st.jobs_dropped_full + st.jobs_dropped_busy, 300u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  push.Stop();  // Returns once the stuck store does.
}

// A full queue keeps the newest jobs: a new job displaces the
// oldest waiting one, and a pusher takes the newest first, so pushes go
// where readers are now instead of a new read's neighbours going unpushed.
TEST_F(PushAheadTest, AFullQueueDropsItsOldestJob) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  std::mutex mu;
  std::condition_variable cv;
  bool stuck = false, release = false;
  std::vector<uint64_t> stored;
  PushOptions o =
      Patient({.sequential_bytes = 0, .random_bytes = 1 << 20, .threads = 1, .queue_capacity = 1});
  PushAhead push(fs.get(), o, [&](InodeId inode, const PushBytes&, const std::function<bool()>&) {
    std::unique_lock<std::mutex> lock(mu);
    if (!stuck) {
      stuck = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      return -ENOENT;  // Ends the first job.
    }
    stored.push_back(inode.value);
    return 0;
  });
  push.Start();
  // A whole-file read that is no walk: after a read further on in the shard.
  auto random_read = [&](const char* path) {
    Noted far = ReadWhole(*fs, push, "c/f0");
    push.AfterReply(reader_testing::InodeOf(*fs, "c/f0"), far.range, far.note, false);
    Noted r = ReadWhole(*fs, push, path);
    push.AfterReply(reader_testing::InodeOf(*fs, path), r.range, r.note, true);
  };
  random_read("a/f0");  // Its job holds the only pusher.
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return stuck; }));
  }
  random_read("a/f3");  // Would push a/f4, b/f0, b/f2: displaced by the next.
  random_read("b/f1");  // Pushes b/f2.
  EXPECT_EQ(push.stats().jobs_dropped_full, 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  // jobs_run counts a job as it starts: wait for the second job's store
  // (10 s at most), not only its start, before stopping the pushers.
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!stored.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  push.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(stored, std::vector<uint64_t>{reader_testing::InodeOf(*fs, "b/f2").value});
  EXPECT_EQ(push.stats().jobs_run, 2u);
}

TEST_F(PushAheadTest, AJobThatWaitedTooLongIsDropped) {
  auto fs = OpenTree();
  ASSERT_TRUE(fs);
  std::mutex mu;
  std::condition_variable cv;
  bool stuck = false;
  PushOptions o{.sequential_bytes = 1 << 20, .random_bytes = 1 << 20, .threads = 1};
  PushAhead push(fs.get(), o, [&](InodeId, const PushBytes&, const std::function<bool()>&) {
    std::unique_lock<std::mutex> lock(mu);
    if (!stuck) {
      stuck = true;
      cv.notify_all();
      // Holds the only pusher for longer than a job may wait.
      cv.wait_for(lock, o.max_job_age * 3);
    }
    return 0;
  });
  push.Start();
  Noted r0 = ReadWhole(*fs, push, "a/f0");
  push.AfterReply(reader_testing::InodeOf(*fs, "a/f0"), r0.range, r0.note, true);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return stuck; }));
  }
  // Not part of the walk (past the 1 MiB file): a random job, queued.
  Noted r1 = ReadWhole(*fs, push, "c/f0");
  push.AfterReply(reader_testing::InodeOf(*fs, "c/f0"), r1.range, r1.note, true);
  for (int i = 0; i < 200 && push.stats().jobs_dropped_stale == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(push.stats().jobs_dropped_stale, 1u);
  push.Stop();
}

// One indexed shard DIR.tar of `count` files DIR/fNN of `size` bytes each,
// written out to disk (dirty pages cannot be dropped).
std::string PushAheadTest::WrittenShard(const std::string& dir, int count, size_t size,
                                        uint64_t seed) {
  // tmpfs pages are the file itself: no drop frees them, and the checks
  // below would fail for a reason that is not the mount's.
  struct statfs st {};
  EXPECT_EQ(::statfs(dir_.path().c_str(), &st), 0);
  EXPECT_NE(st.f_type, TMPFS_MAGIC) << dir_.path()
                                    << " is on tmpfs: these tests measure the page cache of a "
                                       "disk file; point TMPDIR at a disk-backed directory";
  fs::create_directories(src_ + "/" + dir);
  std::vector<std::string> names = {dir};
  for (int i = 0; i < count; ++i) {
    std::string n = fmt::format("{}/f{:02}", dir, i);
    shardfs::testing::WriteFile(src_ + "/" + n,
                                shardfs::testing::PseudoRandomBytes(size, seed + i));
    names.push_back(n);
  }
  std::string shard = dir_ / (dir + ".tar");
  reader_testing::IndexShards({WriteShard(shard, names)}, idx_);
  int fd = ::open(shard.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::fsync(fd), 0);
  ::close(fd);
  return shard;
}

TEST_F(PushAheadTest, DropBehindASequentialReaderFreesTheShardPagesBehindIt) {
  // One shard of 40 files of 256 KiB: 10 MiB.
  std::string shard = WrittenShard("big", 40, 256 << 10, 100);
  for (bool drop : {false, true}) {
    // Again if another process dropped the page cache meanwhile.
    for (int attempt = 0;; ++attempt) {
      const uint64_t drops = reader_testing::CacheDrops();
      auto fs = reader_testing::OpenFs(idx_);
      ASSERT_TRUE(fs);
      RecordingStore store;
      PushAhead push(fs.get(), DropBehindOnly(drop), store.fn());
      std::string buf(1 << 20, '\0');
      uint64_t end = 0;
      for (int i = 0; i < 40; ++i) {
        std::string p = fmt::format("big/f{:02}", i);
        PushHint r = ReadInto(*fs, p, buf.data());
        ReadNote note = push.NoteRead(reader_testing::InodeOf(*fs, p), r);
        push.AfterReply(reader_testing::InodeOf(*fs, p), r, note, true);
        end = r.position + r.length;
      }
      ASSERT_GT(end, 8u << 20);
      // The first 6 MiB lie more than 2 MiB behind the reader.
      auto [in, total] = ResidentPages(shard, 0, 6 << 20);
      if (reader_testing::CacheDrops() != drops) {
        ASSERT_LT(attempt, 4) << "the page cache was dropped by others during every attempt";
        continue;
      }
      if (drop) {
        EXPECT_EQ(in, 0u) << "of " << total;
      } else {
        EXPECT_GT(in, total * 9 / 10) << "of " << total;  // The control: they were cached.
      }
      break;
    }
  }
}

TEST_F(PushAheadTest, DropBehindAShuffledReaderFreesOnlyThePagesOfTheFilesItRead) {
  // One shard of 16 files of 64 KiB; read every other one, out of order.
  std::string shard = WrittenShard("mid", 16, 64 << 10, 300);
  const long page = ::sysconf(_SC_PAGESIZE);
  for (bool drop : {false, true}) {
    // Again if another process dropped the page cache meanwhile: the counts
    // are checked only for an attempt that nobody else disturbed.
    for (int attempt = 0;; ++attempt) {
      const uint64_t drops = reader_testing::CacheDrops();
      auto fs = reader_testing::OpenFs(idx_);
      ASSERT_TRUE(fs);
      RecordingStore store;
      PushAhead push(fs.get(), DropBehindOnly(drop), store.fn());
      std::string buf(1 << 20, '\0');
      auto interior = [&](const PushHint& r) {
        uint64_t from = (r.position + page - 1) / page * page;
        uint64_t to = (r.position + r.length) / page * page;
        return ResidentPages(shard, from, to);
      };
      // The odd files are read first, without the push policy: they stand
      // for neighbours that are cached (read ahead) but not yet read.
      std::vector<PushHint> neighbours;
      for (int i = 1; i < 16; i += 2) {
        neighbours.push_back(ReadInto(*fs, fmt::format("mid/f{:02}", i), buf.data()));
      }
      struct Seen {
        std::string path;
        size_t in, total;
      };
      std::vector<Seen> read;
      for (int i : {14, 2, 8, 0, 12, 6, 10, 4}) {
        std::string p = fmt::format("mid/f{:02}", i);
        PushHint r = ReadInto(*fs, p, buf.data());
        ASSERT_TRUE(r.whole_file);
        ReadNote note = push.NoteRead(reader_testing::InodeOf(*fs, p), r);
        ASSERT_FALSE(note.sequential_to_eof) << p;
        push.AfterReply(reader_testing::InodeOf(*fs, p), r, note, true);
        auto [in, total] = interior(r);
        read.push_back({p, in, total});
      }
      std::vector<std::pair<size_t, size_t>> kept;
      for (const PushHint& n : neighbours) kept.push_back(interior(n));
      if (reader_testing::CacheDrops() != drops) {
        ASSERT_LT(attempt, 4) << "the page cache was dropped by others during every attempt";
        continue;
      }
      for (const Seen& r : read) {
        ASSERT_GT(r.total, 10u);
        if (drop) {
          // A page the kernel has locked for I/O at that moment (readahead
          // in flight) is skipped by the drop: most, not always every one.
          EXPECT_LE(r.in, r.total / 8) << r.path << ": of " << r.total;
        } else {
          EXPECT_EQ(r.in, r.total) << r.path;  // The control: they were cached.
        }
      }
      for (size_t k = 0; k < kept.size(); ++k) {
        EXPECT_EQ(kept[k].first, kept[k].second)
            << "a neighbour lost its pages, at " << neighbours[k].position;
      }
      break;
    }
  }
}

// Decoded bytes (a deflated zip member, a file of a compressed tar) are no
// range of a shard: Read gives them in the buffer, never to splice, and its
// hint keeps push-ahead off them (no read noted, no job).
TEST(PushHintTest, DecodedReadsAreBytesAndPushAheadLeavesThemAlone) {
  TempDir dir;
  const std::string src = dir / "src";
  fs::create_directories(src);
  const std::string text = std::string(50000, 'z') + "the end\n";
  shardfs::testing::WriteFile(src + "/b.txt", text);
  index::IndexWriter w;
  // a.txt deflated in a zip, its compressed bytes after a local header's
  // worth of bytes nothing reads.
  const std::string zip = dir / "z.zip";
  const std::string deflated = shardfs::testing::RawDeflate(text);
  shardfs::testing::WriteFile(zip, std::string(64, 'L') + deflated);
  index::ShardMeta zip_meta = reader_testing::ShardMetaOf(zip);
  zip_meta.flags |= index::kShardZip;
  index::MemberEntry a;
  a.path = "a.txt";
  a.mode = 0644;
  a.size = text.size();
  a.offset = 64;
  a.shard = w.AddShard(zip_meta);
  a.has_checksum = true;
  a.xxh3 = XXH3_64bits(text.data(), text.size());
  w.AddMember(a);
  w.SetEncoded(0, {.method = index::kMethodDeflate,
                   .comp_offset = 64,
                   .comp_size = deflated.size(),
                   .crc32 = static_cast<uint32_t>(
                       ::crc32(0, reinterpret_cast<const Bytef*>(text.data()), text.size()))});
  // b.txt in a gzip-compressed tar.
  const std::string tar = dir / "t.tar";
  reader_testing::TestShard t = reader_testing::WriteShard(src, tar, {"b.txt"});
  const std::string tar_bytes = shardfs::testing::ReadFile(tar);
  shardfs::testing::WriteFile(tar + ".gz", shardfs::testing::Gzip(tar_bytes));
  const index::ShardId gz =
      reader_testing::AddGzipShard(&w, tar + ".gz", tar_bytes.size(), {index::SeekPoint{}});
  for (index::MemberEntry m : t.members) {
    m.shard = gz;
    w.AddMember(std::move(m));
  }
  Result<index::WriteStats> written = w.Finish(dir / "idx", index::WriteOptions{});
  ASSERT_TRUE(written.ok()) << written.status().message();
  auto fsys = reader_testing::OpenFs(dir / "idx");
  ASSERT_TRUE(fsys);
  RecordingStore store;
  PushAhead push(fsys.get(), Patient({.sequential_bytes = 1 << 20, .random_bytes = 1 << 20}),
                 store.fn());
  push.Start();
  for (const char* path : {"a.txt", "b.txt"}) {
    const InodeId inode = InodeOf(*fsys, path);
    std::string buf(1 << 20, '\0');
    Result<ReadReply> r = fsys->Read(inode, 0, buf.size(), buf.data(), /*may_splice=*/true);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status().message();
    EXPECT_FALSE(r->spliced()) << path;
    EXPECT_EQ(buf.substr(0, r->length), text) << path;
    EXPECT_FALSE(r->push.active) << path;
    ReadNote note = push.NoteRead(inode, r->push);
    push.AfterReply(inode, r->push, note, true);
    EXPECT_FALSE(push.WasRead(inode)) << path;
  }
  EXPECT_EQ(push.stats().jobs_queued, 0u);
}

}  // namespace
}  // namespace shardfs::mount
