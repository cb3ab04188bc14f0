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
#include <unordered_map>

#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>

#include "base/log.h"
#include "index/db_options.h"
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
  bool hardlink = false;  // Another name of link_node's inode.
  uint64_t inode = 0;
  int64_t mtime_ns = INT64_MIN;
  uint32_t nlink = 0;
  size_t link_node = 0;  // Hard links: the node of the file they name.
  size_t parent_node = 0;
};

// While members are replayed: what a name refers to, a directory or a file or
// symlink with all its hard links (one inode).
struct Object {
  int64_t member = kSynthesized;  // The member describing it; directories: the last one.
  EntryType type = EntryType::kDir;
};

// A path of the tree while members are replayed. A name that a later member
// replaces is marked dead, never reused.
struct Name {
  std::string_view path;  // Into a member's path, which outlives the build.
  uint32_t object = 0;
  uint32_t parent = 0;    // The name of its directory.
  bool alive = true;
  bool has_children = false;  // Directories: something was created below it.
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

void IndexWriter::AddSparseMember(MemberEntry member, const std::vector<Extent>& extents) {
  std::string encoded;
  for (const Extent& e : extents) AppendExtent(e, &encoded);
  extents_[static_cast<uint32_t>(members_.size())] = std::move(encoded);
  members_.push_back(std::move(member));
}

Result<WriteStats> IndexWriter::Finish(const std::string& out_path,
                                       const WriteOptions& options) {
  SHARDFS_RETURN_IF_ERROR(CheckOutputPath(out_path, options.force));
  WriteStats stats;
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("index write: {} done at {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };

  // 1. Replay the members in archive order against the tree as it stands at
  // each one, by the rules in index_writer.h. Hard links must be resolved
  // here, not against the finished tree: a link names the inode its target
  // has when the link is met.
  std::vector<Object> objects;
  std::vector<Name> names;
  objects.reserve(members_.size() + 1);
  names.reserve(members_.size() + 1);
  objects.push_back(Object{});          // The root, implied unless a member names it.
  names.push_back(Name{"", 0, 0});
  std::unordered_map<std::string_view, uint32_t> by_path;  // Live names only.
  by_path.reserve(members_.size() + 1);
  by_path.emplace("", 0);
  auto drop = [&](const MemberEntry& m, std::string_view why) {
    ++stats.dropped;
    if (stats.dropped_examples.size() < kExamples) {
      std::string_view shard =
          m.shard.value < shards_.size() ? std::string_view(shards_[m.shard.value].path) : "?";
      AddExample(&stats.dropped_examples,
                 fmt::format("shard {}: member '{}' at byte {}: {}", shard, m.path,
                             m.header_offset, why));
    }
  };
  auto replaced = [&](std::string_view path) {
    ++stats.replaced;
    auto& ex = stats.replaced_examples;
    if (std::find(ex.begin(), ex.end(), path) == ex.end()) AddExample(&ex, std::string(path));
  };
  auto add_name = [&](std::string_view path, uint32_t object, uint32_t parent) {
    names.push_back(Name{path, object, parent});
    uint32_t id = static_cast<uint32_t>(names.size() - 1);
    by_path.insert_or_assign(path, id);
    names[parent].has_children = true;
    return id;
  };
  // Siblings usually follow each other: remember the last parent directory.
  std::string_view last_dir_path;
  uint32_t last_dir = 0;
  for (uint32_t i = 0; i < members_.size(); ++i) {
    const MemberEntry& m = members_[i];
    if (m.path.empty()) {
      if (m.type == EntryType::kDir && !m.is_hardlink) {
        if (objects[0].member != kSynthesized) replaced("/");
        objects[0].member = i;
      } else {
        drop(m, "the root must be a directory");
      }
      continue;
    }
    // The parent directory: there, implied now, or refused.
    std::string_view parent_path = ParentPath(m.path);
    uint32_t parent = 0;
    if (parent_path == last_dir_path && names[last_dir].alive) {
      parent = last_dir;
    } else {
      std::string blocked;
      for (size_t from = 0; from < parent_path.size();) {
        size_t slash = parent_path.find('/', from);
        if (slash == std::string_view::npos) slash = parent_path.size();
        std::string_view prefix = parent_path.substr(0, slash);
        from = slash + 1;
        auto it = by_path.find(prefix);
        if (it == by_path.end()) {
          objects.push_back(Object{});
          parent = add_name(prefix, static_cast<uint32_t>(objects.size() - 1), parent);
        } else if (objects[names[it->second].object].type != EntryType::kDir) {
          blocked = fmt::format("'{}' is not a directory", prefix);
          break;
        } else {
          parent = it->second;
        }
      }
      if (!blocked.empty()) {
        drop(m, blocked);
        continue;
      }
      last_dir_path = parent_path;
      last_dir = parent;
    }

    auto it = by_path.find(m.path);
    Name* old = it == by_path.end() ? nullptr : &names[it->second];
    const Object* old_object = old ? &objects[old->object] : nullptr;
    uint32_t object = 0;
    if (m.is_hardlink) {
      auto target = by_path.find(m.link_target);
      if (target == by_path.end()) {
        drop(m, fmt::format("hard link to '{}', which is not in the tree at this point of the "
                            "archive (missing, or only later)",
                            m.link_target));
        continue;
      }
      object = names[target->second].object;
      if (objects[object].type == EntryType::kDir) {
        drop(m, fmt::format("hard link to '{}', a directory", m.link_target));
        continue;
      }
      if (old && old->object == object) continue;  // Already a name of that inode.
    } else if (m.type == EntryType::kDir && old_object && old_object->type == EntryType::kDir) {
      if (old_object->member != kSynthesized) replaced(m.path);
      objects[old->object].member = i;  // The directory and its entries stay.
      continue;
    }
    if (old_object && old_object->type == EntryType::kDir && old->has_children) {
      drop(m, fmt::format("cannot replace directory '{}', which has entries (File exists)",
                          m.path));
      continue;
    }
    if (!m.is_hardlink) {
      objects.push_back(Object{i, m.type});
      object = static_cast<uint32_t>(objects.size() - 1);
    }
    if (old) {
      old->alive = false;
      replaced(m.path);
    }
    add_name(m.path, object, parent);
  }
  phase("replay");

  // 2. The live names in tree order. Shards written by `shardfs pack` (and
  // many others) are already in tree order; checking costs one comparison per
  // name. Otherwise large inputs sort in two halves on two threads and merge.
  std::vector<uint32_t> order;
  order.reserve(by_path.size());
  for (uint32_t i = 0; i < names.size(); ++i) {
    if (names[i].alive) order.push_back(i);
  }
  auto less = [&](uint32_t a, uint32_t b) {
    return TreeOrderLess(names[a].path, names[b].path);
  };
  if (order.size() < kParallelSortMin) {
    std::sort(order.begin(), order.end(), less);
  } else if (!std::is_sorted(order.begin(), order.end(), less)) {
    auto mid = order.begin() + static_cast<ptrdiff_t>(order.size() / 2);
    std::thread first([&] { std::sort(order.begin(), mid, less); });
    std::sort(mid, order.end(), less);
    first.join();
    std::inplace_merge(order.begin(), mid, order.end(), less);
  }
  phase("sort");

  // 3. Nodes in tree order: the first name of a file or symlink in tree order
  // carries its inode, the others are hard links to that node.
  std::vector<Node> nodes(order.size());
  {
    constexpr uint32_t kNone = UINT32_MAX;
    std::vector<uint32_t> node_of_name(names.size(), kNone);
    std::vector<uint32_t> node_of_object(objects.size(), kNone);
    for (uint32_t k = 0; k < order.size(); ++k) {
      const Name& name = names[order[k]];
      const Object& obj = objects[name.object];
      Node& n = nodes[k];
      n.path = name.path;
      n.member = obj.member;
      n.type = obj.type;
      n.parent_node = k == 0 ? 0 : node_of_name[name.parent];
      node_of_name[order[k]] = k;
      if (node_of_object[name.object] == kNone) {
        node_of_object[name.object] = k;
      } else {
        n.hardlink = true;
        n.link_node = node_of_object[name.object];
      }
    }
  }
  phase("tree");

  // 4. Inodes in tree order, link counts.
  uint64_t next_inode = kRootInode.value;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
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
  // The extent list of a sparse file node, or extents_.end().
  auto sparse_of = [&](const Node& n) {
    if (extents_.empty() || n.member == kSynthesized) return extents_.end();
    return extents_.find(static_cast<uint32_t>(n.member));
  };
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
    // A symlink's own mode bits mean nothing on Linux and tar makes every
    // symlink 0777, whatever its header says: show what tar -x shows.
    rec.mode = TypeBits(n.type) | (n.type == EntryType::kSymlink ? 0777 : m.mode & 07777);
    rec.uid = m.uid;
    rec.gid = m.gid;
    if (n.type == EntryType::kFile) {
      rec.size = m.size;
      rec.shard = m.shard;
      rec.offset = m.offset;
      rec.xxh3 = m.xxh3;
      if (m.has_checksum) rec.flags |= kEntryHasChecksum;
      if (auto it = sparse_of(n); it != extents_.end()) {
        rec.flags |= kEntrySparse;
        rec.extents = it->second;
      }
    } else if (n.type == EntryType::kSymlink) {
      rec.target = m.link_target;
      rec.size = m.link_target.size();
    }
    return rec;
  };
  std::vector<uint32_t> by_parent_start(next_inode + 1, 0);
  for (size_t i = 1; i < nodes.size(); ++i) ++by_parent_start[nodes[nodes[i].parent_node].inode + 1];
  for (size_t k = 1; k < by_parent_start.size(); ++k) by_parent_start[k] += by_parent_start[k - 1];
  std::vector<uint32_t> by_parent(by_parent_start.back());
  for (size_t i = 1; i < nodes.size(); ++i) {
    by_parent[by_parent_start[nodes[nodes[i].parent_node].inode]++] = static_cast<uint32_t>(i);
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
    return n.hardlink || n.type != EntryType::kFile || n.member == kSynthesized ||
           members_[n.member].has_checksum;
  });
  // Version 2 only when a sparse file made it into the tree: older readers
  // keep reading every other index.
  bool any_sparse = std::any_of(nodes.begin(), nodes.end(), [&](const Node& n) {
    return !n.hardlink && n.type == EntryType::kFile && sparse_of(n) != extents_.end();
  });
  meta(kMetaSchemaVersion, std::to_string(any_sparse ? kSparseSchemaVersion : kSchemaVersion));
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
      if (n.hardlink) continue;
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
