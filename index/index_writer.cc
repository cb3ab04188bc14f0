#include "index/index_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>

#include "index/db_options.h"
#include "index/log.h"
#include "index/member_path.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

constexpr size_t kExamples = 5;
constexpr int64_t kSynthesized = -1;
constexpr size_t kParallelSortMin = 1 << 14;

struct Node {
  std::string_view path;
  int64_t member = kSynthesized;
  EntryType type = EntryType::kDir;
  bool hardlink = false;
  bool dropped = false;
  uint64_t inode = 0;
  int64_t mtime_ns = INT64_MIN;
  uint32_t nlink = 0;
  size_t link_node = 0;  // Hard links: the node of the file they name.
  size_t parent_node = 0;
};

void AddExample(std::vector<std::string>* examples, std::string text) {
  if (examples->size() < kExamples) examples->push_back(std::move(text));
}

uint32_t TypeBits(EntryType type) {
  switch (type) {
    case EntryType::kDir: return S_IFDIR;
    case EntryType::kSymlink: return S_IFLNK;
    default: return S_IFREG;
  }
}

Status SyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, path);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno(err, fmt::format("fsync {}", path));
  return Status::Ok();
}

// One table file of the bulk load. `emit` calls its argument with every
// key/value of the file in ascending order; the key ranges of the parts of
// one database do not overlap.
using KvSink = std::function<Status(std::string_view, std::string_view)>;
struct TablePart {
  std::string file;    // Path of the table file to write.
  bool filter = true;  // See WriterDbOptions.
  std::function<Status(const KvSink&)> emit;
  Status status;
  bool empty = true;  // Nothing was emitted; no file is left.
};

void WriteTable(TablePart* part) {
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), WriterDbOptions(part->filter));
  rocksdb::Status s = writer.Open(part->file);
  if (!s.ok()) {
    part->status = Status::IoError(fmt::format("{}: {}", part->file, s.ToString()));
    return;
  }
  part->status = part->emit([&](std::string_view key, std::string_view value) {
    part->empty = false;
    rocksdb::Status ps = writer.Put(rocksdb::Slice(key.data(), key.size()),
                                    rocksdb::Slice(value.data(), value.size()));
    if (!ps.ok()) return Status::IoError(fmt::format("{}: {}", part->file, ps.ToString()));
    return Status::Ok();
  });
  if (!part->status.ok()) return;
  if (part->empty) {
    // RocksDB refuses to finish a table without entries; drop the file.
    writer.Finish().PermitUncheckedError();
    std::error_code ec;
    fs::remove(part->file, ec);
    return;
  }
  s = writer.Finish();
  if (!s.ok()) part->status = Status::IoError(fmt::format("{}: {}", part->file, s.ToString()));
}

// Writes a fresh database at `dir` holding the keys of `parts`. The table
// files are independent, so each part is written on its own thread; one
// ingest then adds them all.
Status WriteDatabase(const std::string& dir, std::vector<TablePart>& parts) {
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("index write: {} after {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < parts.size(); ++i) threads.emplace_back(WriteTable, &parts[i]);
    WriteTable(&parts[0]);
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::string> files;
  for (const TablePart& part : parts) {
    SHARDFS_RETURN_IF_ERROR(part.status);
    if (!part.empty) files.push_back(part.file);
  }
  phase("table files");
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(WriterDbOptions(), dir, &raw);
  if (!s.ok()) return Status::IoError(fmt::format("{}: {}", dir, s.ToString()));
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = true;
  s = db->IngestExternalFile(files, ingest);
  if (!s.ok()) return Status::IoError(fmt::format("{}: ingest: {}", dir, s.ToString()));
  s = db->Close();
  if (!s.ok()) return Status::IoError(fmt::format("{}: close: {}", dir, s.ToString()));
  db.reset();
  phase("ingest");
  std::error_code ec;
  for (const std::string& file : files) fs::remove(file, ec);  // Ingest hard-linked them.
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) SHARDFS_RETURN_IF_ERROR(SyncPath(it->path()));
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", dir, ec.message()));
  return SyncPath(dir);
}

// True if `dir` is a proper ancestor of `path` ("" is everyone's).
bool IsAncestor(std::string_view dir, std::string_view path) {
  if (dir.empty()) return !path.empty();
  return path.size() > dir.size() && path[dir.size()] == '/' && path.starts_with(dir);
}

}  // namespace

Status CheckOutputPath(const std::string& out_path, bool force) {
  struct stat st;
  if (::lstat(out_path.c_str(), &st) == 0 && !force) {
    return Status::AlreadyExists(
        fmt::format("{}: already exists (use --force to replace it)", out_path));
  }
  std::error_code ec;
  fs::path parent = fs::absolute(out_path, ec).parent_path();
  if (ec) return Status::IoError(fmt::format("{}: {}", out_path, ec.message()));
  if (::access(parent.c_str(), W_OK) != 0) {
    return Status::FromErrno(errno, fmt::format("{}: cannot write to {}", out_path,
                                                parent.string()));
  }
  return Status::Ok();
}

ShardId IndexWriter::AddShard(ShardMeta meta) {
  shards_.push_back(std::move(meta));
  return ShardId{static_cast<uint32_t>(shards_.size() - 1)};
}

void IndexWriter::AddMember(MemberEntry member) { members_.push_back(std::move(member)); }

Result<WriteStats> IndexWriter::Finish(const std::string& out_path,
                                       const WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckOutputPath(out_path, options.force));
  WriteStats stats;
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("index write: {} done at {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };

  // 1. Tree order; of several members with one path the last added wins.
  std::vector<uint32_t> order(members_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  auto less = [&](uint32_t a, uint32_t b) {
    return TreeOrderLess(members_[a].path, members_[b].path);
  };
  // Shards written by `shardfs pack` (and many others) are already in tree
  // order; checking costs one comparison per member. Otherwise large inputs
  // sort in two halves on two threads and merge, which keeps the sort stable.
  if (order.size() < kParallelSortMin) {
    std::stable_sort(order.begin(), order.end(), less);
  } else if (!std::is_sorted(order.begin(), order.end(), less)) {
    auto mid = order.begin() + static_cast<ptrdiff_t>(order.size() / 2);
    std::thread first([&] { std::stable_sort(order.begin(), mid, less); });
    std::stable_sort(mid, order.end(), less);
    first.join();
    std::inplace_merge(order.begin(), mid, order.end(), less);
  }
  phase("sort");

  // 2. One pass in tree order with the chain of open ancestors on a stack:
  // synthesize missing directories right before their first descendant (so
  // `nodes` stays in tree order), and let a non-directory in the way give
  // way to the directory its descendants imply (tar could not extract them
  // otherwise).
  std::vector<Node> nodes;
  nodes.reserve(order.size() + order.size() / 8 + 1);
  nodes.push_back(Node{});  // The root, synthesized unless a member names it.
  std::vector<size_t> stack = {0};
  auto make_dir = [&](Node& up) {
    if (up.type == EntryType::kDir && !up.hardlink) return;
    ++stats.dropped;
    AddExample(&stats.dropped_examples,
               fmt::format("{}: not a directory but has entries below it", up.path));
    up.member = kSynthesized;
    up.type = EntryType::kDir;
    up.hardlink = false;
  };
  for (size_t i = 0; i < order.size(); ++i) {
    const MemberEntry& m = members_[order[i]];
    if (i + 1 < order.size() && members_[order[i + 1]].path == m.path) {
      ++stats.replaced;
      if (stats.replaced_examples.empty() || stats.replaced_examples.back() != m.path) {
        AddExample(&stats.replaced_examples, m.path);
      }
      continue;
    }
    if (m.path.empty()) {
      if (m.type == EntryType::kDir && !m.is_hardlink) {
        nodes[0].member = order[i];
      } else {
        ++stats.dropped;
        AddExample(&stats.dropped_examples, "/: the root must be a directory");
      }
      continue;
    }
    while (!IsAncestor(nodes[stack.back()].path, m.path)) stack.pop_back();
    make_dir(nodes[stack.back()]);
    // Synthesize the directories between the deepest open ancestor and m.
    std::string_view have = nodes[stack.back()].path;
    for (;;) {
      size_t from = have.empty() ? 0 : have.size() + 1;
      size_t slash = std::string_view(m.path).find('/', from);
      if (slash == std::string_view::npos) break;
      Node synth;
      synth.path = std::string_view(m.path).substr(0, slash);
      synth.parent_node = stack.back();
      nodes.push_back(synth);
      stack.push_back(nodes.size() - 1);
      have = synth.path;
    }
    Node n;
    n.path = m.path;
    n.member = order[i];
    n.type = m.type;
    n.hardlink = m.is_hardlink;
    n.parent_node = stack.back();
    nodes.push_back(n);
    stack.push_back(nodes.size() - 1);
  }
  phase("tree");

  // 3. Hard links resolve to a regular file, following chains.
  auto find_node = [&](std::string_view path) -> const Node* {
    auto it = std::lower_bound(nodes.begin(), nodes.end(), path,
                               [](const Node& n, std::string_view p) {
                                 return TreeOrderLess(n.path, p);
                               });
    return it != nodes.end() && it->path == path ? &*it : nullptr;
  };
  for (Node& n : nodes) {
    if (!n.hardlink) continue;
    std::string_view target = members_[n.member].link_target;
    const char* reason = nullptr;
    for (int hops = 0;; ++hops) {
      const Node* t = find_node(target);
      if (!t) {
        reason = "hard link to a path that is not in the archive";
        break;
      }
      if (t->hardlink && hops < 32) {
        target = members_[t->member].link_target;
        continue;
      }
      if (t->hardlink || t->type != EntryType::kFile || t->member == kSynthesized) {
        reason = "hard link to something that is not a regular file";
        break;
      }
      n.link_node = static_cast<size_t>(t - nodes.data());
      break;
    }
    if (reason) {
      n.dropped = true;
      ++stats.dropped;
      AddExample(&stats.dropped_examples, fmt::format("{}: {}", n.path, reason));
    }
  }

  // 4. Inodes in tree order, link counts.
  uint64_t next_inode = kRootInode.value;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.dropped) continue;
    if (n.hardlink) {
      ++nodes[n.link_node].nlink;
      ++stats.hardlinks;
      continue;
    }
    n.inode = next_inode++;
    if (n.type == EntryType::kDir) {
      n.nlink += 2;
      if (i > 0) ++nodes[n.parent_node].nlink;
      ++stats.dirs;
      if (n.member == kSynthesized) ++stats.synthesized_dirs;
    } else {
      n.nlink += 1;
      if (n.type == EntryType::kSymlink) ++stats.symlinks;
      if (n.type == EntryType::kFile) {
        ++stats.files;
        stats.bytes += members_[n.member].size;
      }
    }
    if (n.member != kSynthesized) n.mtime_ns = members_[n.member].mtime_ns;
  }
  // A synthesized directory takes the mtime of its newest child; children
  // come after parents in tree order, so walk backwards.
  for (size_t i = nodes.size(); i-- > 1;) {
    const Node& n = nodes[i];
    if (n.dropped) continue;
    Node& parent = nodes[n.parent_node];
    int64_t child_mtime = n.hardlink ? nodes[n.link_node].mtime_ns : n.mtime_ns;
    if (parent.member == kSynthesized) parent.mtime_ns = std::max(parent.mtime_ns, child_mtime);
  }
  for (Node& n : nodes) {
    if (n.mtime_ns == INT64_MIN) n.mtime_ns = 0;
  }
  phase("inodes");

  // 5. Keys in ascending order, without a sort, in two table files written
  // side by side: 'D' keys ordered by parent inode (a stable counting sort;
  // siblings are already in name order), with a bloom filter for names that
  // do not exist; then 'I' keys in inode order (tree order), 'M' and 'S'.
  auto record_of = [&](const Node& n) {
    EntryRecord rec;
    rec.type = n.type;
    rec.inode = InodeId{n.inode};
    rec.parent = InodeId{n.inode == kRootInode.value ? kRootInode.value
                                                     : nodes[n.parent_node].inode};
    rec.mtime_ns = n.mtime_ns;
    rec.nlink = n.nlink;
    if (n.member == kSynthesized) {
      rec.mode = S_IFDIR | 0755;
      return rec;
    }
    const MemberEntry& m = members_[n.member];
    rec.mode = TypeBits(n.type) | (m.mode & 07777);
    rec.uid = m.uid;
    rec.gid = m.gid;
    if (n.type == EntryType::kFile) {
      rec.size = m.size;
      rec.shard = m.shard;
      rec.offset = m.offset;
      rec.xxh3 = m.xxh3;
      if (m.has_checksum) rec.flags |= kEntryHasChecksum;
    } else if (n.type == EntryType::kSymlink) {
      rec.target = m.link_target;
      rec.size = m.link_target.size();
    }
    return rec;
  };
  std::vector<uint32_t> by_parent_start(next_inode + 1, 0);
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (!nodes[i].dropped) ++by_parent_start[nodes[nodes[i].parent_node].inode + 1];
  }
  for (size_t k = 1; k < by_parent_start.size(); ++k) by_parent_start[k] += by_parent_start[k - 1];
  std::vector<uint32_t> by_parent(by_parent_start.back());
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (!nodes[i].dropped) {
      by_parent[by_parent_start[nodes[nodes[i].parent_node].inode]++] = static_cast<uint32_t>(i);
    }
  }

  std::error_code abs_ec;
  fs::path out_abs = fs::absolute(out_path, abs_ec).lexically_normal();
  if (abs_ec) return Status::IoError(fmt::format("{}: {}", out_path, abs_ec.message()));
  if (out_abs.filename().empty()) out_abs = out_abs.parent_path();
  fs::path base = out_abs.parent_path();
  std::vector<std::pair<std::string, std::string>> small_kvs;  // 'M' and 'S'.
  ShardKeyBuffer skey;
  for (size_t i = 0; i < shards_.size(); ++i) {
    ShardMeta meta = shards_[i];
    fs::path abs = fs::absolute(meta.path, abs_ec).lexically_normal();
    if (abs_ec) return Status::IoError(fmt::format("shard {}: {}", meta.path, abs_ec.message()));
    fs::path rel = abs.lexically_relative(base);
    if (!rel.empty() && *rel.begin() != "..") {
      meta.path = rel.string();
      meta.flags |= kShardPathRelative;
    } else {
      meta.path = abs.string();
    }
    std::string value;
    EncodeShardMeta(meta, &value);
    small_kvs.emplace_back(std::string(EncodeShardKey(ShardId{static_cast<uint32_t>(i)}, skey)),
                           std::move(value));
  }
  auto meta = [&](std::string_view name, std::string value) {
    small_kvs.emplace_back(EncodeMetaKey(name), std::move(value));
  };
  // Checksums "xxh3" only if every file that made it into the tree has one.
  bool all_checksummed = std::all_of(nodes.begin(), nodes.end(), [&](const Node& n) {
    return n.dropped || n.hardlink || n.type != EntryType::kFile || n.member == kSynthesized ||
           members_[n.member].has_checksum;
  });
  meta(kMetaSchemaVersion, std::to_string(kSchemaVersion));
  meta(kMetaBuildOptions, options.build_options);
  meta(kMetaCreatedBy, options.created_by);
  meta(kMetaFiles, std::to_string(stats.files));
  meta(kMetaDirs, std::to_string(stats.dirs));
  meta(kMetaSymlinks, std::to_string(stats.symlinks));
  meta(kMetaBytes, std::to_string(stats.bytes));
  meta(kMetaMaxInode, std::to_string(next_inode - 1));
  meta(kMetaChecksums, all_checksummed ? "xxh3" : "none");
  std::sort(small_kvs.begin(), small_kvs.end());
  static_assert(kDirentPrefix < kInodePrefix && kInodePrefix < kMetaPrefix &&
                kMetaPrefix < kShardPrefix);

  std::vector<TablePart> parts(2);
  parts[0].emit = [&](const KvSink& put) -> Status {
    DirentKeyBuffer dkey;
    std::string value;
    for (uint32_t i : by_parent) {
      const Node& n = nodes[i];
      EncodeEntry(record_of(n.hardlink ? nodes[n.link_node] : n), &value);
      InodeId parent{nodes[n.parent_node].inode};
      SHARDFS_RETURN_IF_ERROR(
          put(EncodeDirentKey(kDefaultView, parent, BaseName(n.path), dkey), value));
    }
    return Status::Ok();
  };
  parts[1].filter = false;
  parts[1].emit = [&](const KvSink& put) -> Status {
    InodeKeyBuffer ikey;
    std::string value;
    for (const Node& n : nodes) {
      if (n.dropped || n.hardlink) continue;
      EncodeEntry(record_of(n), &value);
      SHARDFS_RETURN_IF_ERROR(put(EncodeInodeKey(kDefaultView, InodeId{n.inode}, ikey), value));
    }
    for (const auto& [key, v] : small_kvs) SHARDFS_RETURN_IF_ERROR(put(key, v));
    return Status::Ok();
  };

  // 6. Publish: write beside the output, then rename into place.
  std::random_device rd;
  std::string tmp = fmt::format("{}.tmp-{}-{:08x}", out_abs.string(), ::getpid(), rd());
  std::error_code ec;
  if (!fs::create_directory(tmp, ec)) {
    return Status::IoError(fmt::format("{}: cannot create: {}", tmp, ec.message()));
  }
  parts[0].file = tmp + "/dirents.sst";
  parts[1].file = tmp + "/inodes.sst";
  Status s = WriteDatabase(tmp, parts);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s.WithContext(out_path);
  }
  phase("database");
  std::string old;
  if (fs::exists(fs::symlink_status(out_abs, ec))) {
    old = fmt::format("{}.old-{}-{:08x}", out_abs.string(), ::getpid(), rd());
    fs::rename(out_abs, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      return Status::IoError(fmt::format("{}: cannot move aside: {}", out_path, ec.message()));
    }
  }
  fs::rename(tmp, out_abs, ec);
  if (ec) {
    std::string msg = ec.message();
    fs::remove_all(tmp, ec);
    if (!old.empty()) fs::rename(old, out_abs, ec);
    return Status::IoError(fmt::format("{}: cannot publish: {}", out_path, msg));
  }
  if (!old.empty()) fs::remove_all(old, ec);
  SHARDFS_RETURN_IF_ERROR(SyncPath(base.string()));
  fs::directory_iterator it(out_abs, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) stats.index_bytes += it->file_size(ec);
  }
  return stats;
}

}  // namespace shardfs::index
