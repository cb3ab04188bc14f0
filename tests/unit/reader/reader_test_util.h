// Helpers for the unit tests of src/reader/ and the libraries above it
// (Filesystem, ShardFiles, Volume, the mount's PushAhead): shards written
// here from a source tree, indexed with index/index_writer.h, and opened as a
// Filesystem, no FUSE. Nothing of the builder: how a real archive is scanned
// is the builder's and the scanners' tests' business; these tests start from
// an index that says where each file's bytes are.
#ifndef SHARDFS_TESTS_UNIT_READER_READER_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_READER_READER_TEST_UTIL_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/fd.h"
#include "base/io.h"
#include "index/fingerprint.h"
#include "index/index_reader.h"
#include "index/index_writer.h"
#include "src/reader/filesystem.h"
#include "tests/unit/test_util.h"

namespace shardfs::reader_testing {
using reader::EntryRecord;
using reader::Filesystem;
using reader::FilesystemOptions;
using reader::InodeId;

// GNU tar's record: what it writes at a time.
inline constexpr size_t kTarRecord = 10240;

// A shard written by WriteShard and the members its index gets.
struct TestShard {
  std::string path;
  std::vector<index::MemberEntry> members;
};

// Writes `names` (relative to `src`, in the order given, no recursion) into
// `shard`, laid out as GNU tar lays out a tar: a 512-byte ustar header before
// each member (its name cut at 100 bytes: nothing here reads a header back),
// a file's bytes padded to 512, two zero blocks, zeros up to a whole record;
// written a record at a time. Directories, symbolic links, regular files and,
// for a file met again by inode, a hard link to its first name; owner, mode
// and mtime (to the nanosecond) from lstat. Each file's member carries its
// XXH3 checksum.
inline TestShard WriteShard(const std::string& src, const std::string& shard,
                            const std::vector<std::string>& names) {
  TestShard out{shard, {}};
  std::string bytes;
  std::map<std::pair<dev_t, ino_t>, std::string> first_names;
  for (const std::string& name : names) {
    const std::string path = src + "/" + name;
    const struct stat st = testing::Lstat(path);
    index::MemberEntry m;
    m.path = name;
    m.mode = st.st_mode & 07777;
    m.uid = st.st_uid;
    m.gid = st.st_gid;
    m.mtime_ns = testing::MtimeNs(st);
    m.header_offset = bytes.size();
    std::string data;
    char type = '0';
    if (S_ISDIR(st.st_mode)) {
      m.type = index::EntryType::kDir;
      type = '5';
    } else if (S_ISLNK(st.st_mode)) {
      m.type = index::EntryType::kSymlink;
      m.link_target.resize(static_cast<size_t>(st.st_size));
      EXPECT_EQ(::readlink(path.c_str(), m.link_target.data(), m.link_target.size()), st.st_size)
          << path;
      type = '2';
    } else if (S_ISREG(st.st_mode)) {
      auto [first, fresh] = first_names.emplace(std::pair(st.st_dev, st.st_ino), name);
      if (!fresh) {
        m.is_hardlink = true;
        m.link_target = first->second;
        type = '1';
      } else {
        data = testing::ReadFile(path);
        m.size = data.size();
        m.has_checksum = true;
        m.xxh3 = XXH3_64bits(data.data(), data.size());
      }
    } else {
      ADD_FAILURE() << path << ": neither a directory, a symbolic link nor a regular file";
      continue;
    }
    bytes += testing::UstarHeader(name, type, data.size(), st.st_mtim.tv_sec);
    m.offset = bytes.size();
    bytes += data;
    bytes.resize((bytes.size() + 511) / 512 * 512, '\0');
    out.members.push_back(std::move(m));
  }
  bytes.append(1024, '\0');
  bytes.resize((bytes.size() + kTarRecord - 1) / kTarRecord * kTarRecord, '\0');
  // In records of 10240 bytes, as tar writes: the page cache then holds the
  // shard in small folios, as it would a real tar's, which a test of what
  // drop-behind frees relies on (a large folio is only dropped whole).
  UniqueFd fd(::open(shard.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.valid()) << shard;
  for (size_t at = 0; at < bytes.size(); at += kTarRecord) {
    const size_t n = std::min(kTarRecord, bytes.size() - at);
    EXPECT_TRUE(WriteFully(fd.get(), bytes.data() + at, n)) << shard;
  }
  return out;
}

// The meta of shard file `path` as an index records it: size, mtime and
// fingerprint (index/fingerprint.h).
inline index::ShardMeta ShardMetaOf(const std::string& path) {
  index::ShardMeta meta;
  meta.path = path;
  const struct stat st = testing::Lstat(path);
  meta.size = static_cast<uint64_t>(st.st_size);
  meta.mtime_ns = testing::MtimeNs(st);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.valid()) << path;
  Result<uint64_t> fp = index::ShardFingerprint(fd.get(), meta.size);
  EXPECT_TRUE(fp.ok()) << fp.status().message();
  meta.fingerprint = fp.ok() ? *fp : 0;
  return meta;
}

// Indexes `shards` at `idx` with index::IndexWriter, a later shard's member
// replacing an earlier one's; without `checksum` no member has one.
inline void IndexShards(const std::vector<TestShard>& shards, const std::string& idx,
                        bool checksum = true) {
  index::IndexWriter w;
  for (const TestShard& shard : shards) {
    const index::ShardId id = w.AddShard(ShardMetaOf(shard.path));
    for (index::MemberEntry m : shard.members) {
      m.shard = id;
      if (!checksum) {
        m.has_checksum = false;
        m.xxh3 = 0;
      }
      w.AddMember(std::move(m));
    }
  }
  Result<index::WriteStats> written = w.Finish(idx, index::WriteOptions{});
  ASSERT_TRUE(written.ok()) << written.status().message();
}

// Registers gzip-compressed tar `path` with `w`, as the builder would after
// scanning it: its codec, and a seek table of `points` over the
// `decoded_size` bytes of its decoded stream (members' offsets are in that
// stream).
inline index::ShardId AddGzipShard(index::IndexWriter* w, const std::string& path,
                                   uint64_t decoded_size, std::vector<index::SeekPoint> points) {
  index::ShardMeta meta = ShardMetaOf(path);
  meta.set_codec(index::Codec::kGzip);
  const index::ShardId id = w->AddShard(meta);
  index::SeekTable table;
  table.decoded_size = decoded_size;
  table.points = std::move(points);
  std::string value;
  index::EncodeSeekTable(table, &value);
  w->AddSeekKeys({{index::EncodeSeekTableKey(id), value}});
  return id;
}

// Pages of [from, to) of `path` in the page cache with their bytes read, out
// of its pages. `from` must be a multiple of the page size.
inline std::pair<size_t, size_t> ResidentPages(const std::string& path, uint64_t from,
                                               uint64_t to) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  long page = ::sysconf(_SC_PAGESIZE);
  size_t len = static_cast<size_t>(to - from);
  void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(from));
  EXPECT_NE(m, MAP_FAILED);
  std::vector<unsigned char> vec((len + page - 1) / page);
  EXPECT_EQ(::mincore(m, len, vec.data()), 0);
  ::munmap(m, len);
  ::close(fd);
  size_t in = 0;
  for (unsigned char v : vec) in += v & 1;
  return {in, vec.size()};
}

// How many times any process dropped the page cache since boot
// (/proc/vmstat): a test that counts cached pages repeats a case during
// which another process (a test running beside it) dropped them.
inline uint64_t CacheDrops() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  uint64_t value = 0, n = 0;
  while (in >> key >> value) {
    if (key == "drop_pagecache") n += value;
  }
  return n;
}

inline std::unique_ptr<Filesystem> OpenFs(const std::string& idx, FilesystemOptions options = {}) {
  auto r = index::IndexReader::Open(idx);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return nullptr;
  return std::make_unique<Filesystem>(std::move(r).value(), options);
}

inline InodeId InodeOf(const Filesystem& fs, std::string_view path) {
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = fs.reader().LookupPath(path, &rec, &holder);
  EXPECT_TRUE(s.ok()) << path << ": " << s.message();
  return rec.inode;
}

// Whether file `path` of `fs` would be checked before its bytes are served.
inline bool WouldVerify(const Filesystem& fs, std::string_view path) {
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = fs.reader().LookupPath(path, &rec, &holder);
  EXPECT_TRUE(s.ok()) << path << ": " << s.message();
  return fs.WouldVerify(rec.inode, rec.shard);
}

}  // namespace shardfs::reader_testing

#endif  // SHARDFS_TESTS_UNIT_READER_READER_TEST_UTIL_H_
