#include "tests/unit/index/index_test_util.h"

#include <gtest/gtest.h>

#include <utility>

#include "index/schema.h"
#include "tests/unit/index/index_surgery.h"

namespace shardfs::testing {

index::MemberEntry FileMember(std::string path, uint64_t size, int64_t mtime_ns, uint64_t offset,
                              uint32_t mode) {
  index::MemberEntry m;
  m.path = std::move(path);
  m.type = index::EntryType::kFile;
  m.size = size;
  m.mtime_ns = mtime_ns;
  m.offset = offset;
  m.mode = mode;
  m.uid = 1000;
  m.gid = 100;
  m.has_checksum = true;
  m.xxh3 = 0x1234 + size;
  return m;
}

index::MemberEntry DirMember(std::string path, int64_t mtime_ns, uint32_t mode, uint32_t uid) {
  index::MemberEntry m;
  m.path = std::move(path);
  m.type = index::EntryType::kDir;
  m.mtime_ns = mtime_ns;
  m.mode = mode;
  m.uid = uid;
  return m;
}

index::MemberEntry SymlinkMember(std::string path, std::string target, int64_t mtime_ns) {
  index::MemberEntry m;
  m.path = std::move(path);
  m.type = index::EntryType::kSymlink;
  m.link_target = std::move(target);
  m.mtime_ns = mtime_ns;
  m.mode = 0777;
  return m;
}

index::MemberEntry HardLinkMember(std::string path, std::string target, uint64_t header_offset) {
  index::MemberEntry m;
  m.path = std::move(path);
  m.type = index::EntryType::kFile;
  m.is_hardlink = true;
  m.link_target = std::move(target);
  m.size = 999999;
  m.mtime_ns = 1;
  m.header_offset = header_offset;
  return m;
}

std::unique_ptr<index::IndexReader> BuildAndOpen(const std::string& dir,
                                                 const std::vector<index::MemberEntry>& members,
                                                 index::WriteStats* stats) {
  index::IndexWriter w;
  index::ShardMeta meta;
  meta.path = dir + "/s.tar";
  meta.size = 1 << 20;
  w.AddShard(meta);
  for (const index::MemberEntry& m : members) w.AddMember(m);
  Result<index::WriteStats> r = w.Finish(dir + "/idx", index::WriteOptions{});
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return nullptr;
  if (stats) *stats = r.value();
  Result<std::unique_ptr<index::IndexReader>> reader = index::IndexReader::Open(dir + "/idx");
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

index::EntryRecord EntryAt(const index::IndexReader& r, std::string_view path) {
  index::EntryRecord rec;
  index::RecordHolder holder;
  Status s = r.LookupPath(path, &rec, &holder);
  EXPECT_TRUE(s.ok()) << "'" << path << "': " << s.message();
  rec.target = {};  // Points into holder, which dies here.
  return rec;
}

bool PathExists(const index::IndexReader& r, std::string_view path) {
  index::EntryRecord rec;
  index::RecordHolder holder;
  return r.LookupPath(path, &rec, &holder).ok();
}

std::vector<std::string> ChildNames(const index::IndexReader& r, index::InodeId dir,
                                    std::string_view start_after) {
  std::vector<std::string> names;
  Status s =
      r.ForEachChild(dir, start_after, [&](std::string_view name, const index::EntryRecord&) {
        names.emplace_back(name);
        return true;
      });
  EXPECT_TRUE(s.ok()) << s.message();
  return names;
}

void WriteIndexWithALoop(const std::string& dir, const std::string& idx) {
  index::IndexWriter w;
  index::ShardMeta meta;
  meta.path = dir + "/s.tar";
  meta.size = 4096;
  w.AddShard(meta);
  w.AddMember(DirMember("a"));
  w.AddMember(FileMember("a/f", 10, 1, 512));
  w.AddMember(FileMember("b", 20, 1, 1536));
  w.AddMember(SymlinkMember("l", "a/f"));
  Result<index::WriteStats> stats = w.Finish(idx, index::WriteOptions{});
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  std::string root_value;
  index::InodeId a;
  {
    Result<std::unique_ptr<index::IndexReader>> r = index::IndexReader::Open(idx);
    ASSERT_TRUE(r.ok()) << r.status().message();
    index::EntryRecord root;
    index::RecordHolder holder;
    ASSERT_TRUE((*r)->GetInode(index::kRootInode, &root, &holder).ok());
    index::EncodeEntry(root, &root_value);
    a = EntryAt(**r, "a").inode;
  }
  index::DirentKeyBuffer dkey;
  ASSERT_EQ(
      EditIndex(idx, {{std::string(index::EncodeDirentKey(index::kDefaultView, a, "up", dkey)),
                       root_value}}),
      "");
}

}  // namespace shardfs::testing
