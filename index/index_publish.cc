#include "index/index_publish.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/file_kind.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/temp_dirs.h"
#include "index/db_options.h"
#include "index/index_files.h"
#include "index/index_reader.h"

namespace shardfs::index {
namespace fs = std::filesystem;
namespace {

// Every regular file in `dir`, then `dir` itself.
Status SyncDirectory(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) SHARDFS_RETURN_IF_ERROR(SyncPath(it->path()));
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", dir, ec.message()));
  return SyncPath(dir);
}

// What writing one part left: its status, and whether there is a file.
struct TableResult {
  std::string file;
  Status status;
  bool empty = true;  // Nothing was emitted; no file is left.
};

void WriteTable(const TablePart& part, TableResult* result) {
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), WriterDbOptions(part.filter));
  const std::string& file = result->file;
  rocksdb::Status s = writer.Open(file);
  if (!s.ok()) {
    result->status = Status::IoError(fmt::format("{}: {}", file, s.ToString()));
    return;
  }
  result->status = part.emit([&](std::string_view key, std::string_view value) {
    result->empty = false;
    rocksdb::Status ps = writer.Put(rocksdb::Slice(key.data(), key.size()),
                                    rocksdb::Slice(value.data(), value.size()));
    if (!ps.ok()) return Status::IoError(fmt::format("{}: {}", file, ps.ToString()));
    return Status::Ok();
  });
  if (!result->status.ok()) return;
  if (result->empty) {
    // RocksDB refuses to finish a table without entries; drop the file.
    writer.Finish().PermitUncheckedError();
    std::error_code ec;
    fs::remove(file, ec);
    return;
  }
  s = writer.Finish();
  if (!s.ok()) result->status = Status::IoError(fmt::format("{}: {}", file, s.ToString()));
}

// Opens a fresh database at `dir` and moves `files` into it.
Status IngestTables(const std::string& dir, const std::vector<std::string>& files) {
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
  return Status::Ok();
}

// Removes what publishing moved away from `out_path` (now at `old`): an
// index, or the empty directory it replaced; only the files RocksDB and
// shardfs write in an index (index_files.h), never a subdirectory. Anything
// else (put there since CheckReplaceable) is kept at `old`, with a warning.
void RemoveReplaced(const std::string& old, const std::string& out_path) {
  if (!IsShardfsIndex(old) && !IsEmptyDirectory(old)) {
    log::Warning("{}: what it held is not a shardfs index; kept at {}", out_path, old);
    return;
  }
  Result<std::vector<std::string>> left = RemoveOwnFiles(old, DirKind::kIndex);
  if (!left.ok()) {
    log::Warning("{}: the replaced index is left at {}: {}", out_path, old,
                 left.status().message());
  } else if (!left->empty()) {
    log::Warning("{}: the replaced index held {}, which shardfs did not write; kept at {}",
                 out_path, ListNames(*left), old);
  }
}

// Puts the complete database `tmp` at `out_abs`, in one step (see
// ReplaceDirectory): a reader finds the old index or the new one there at
// every moment, and a crash leaves one of them. Then removes the old one.
Status RenameIntoPlace(const std::string& tmp, const fs::path& out_abs,
                       const std::string& out_path) {
  // Checked again: the build took a while.
  if (Status s = CheckReplaceable(out_path, out_abs); !s.ok()) {
    RemoveBuildDir(tmp);
    return s;
  }
  // From here `tmp` may name the old index: a signal leaves it whole (for
  // RemoveStaleBuildDirs), never removes it.
  ForgetTempDir(tmp);
  Result<Replaced> r = ReplaceDirectory(tmp, out_abs.string());
  if (!r.ok()) {
    RemoveBuildDir(tmp);
    return Status::IoError(fmt::format("{}: cannot publish: {}", out_path, r.status().message()));
  }
  if (!r->atomic) log::Debug("{}: replaced by two renames (no RENAME_EXCHANGE here)", out_path);
  if (!r->old_path.empty()) RemoveReplaced(r->old_path, out_path);
  return Status::Ok();
}

uint64_t DirectoryBytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) bytes += it->file_size(ec);
  }
  return bytes;
}

}  // namespace

Result<fs::path> AbsoluteIndexPath(const std::string& out_path) {
  std::error_code ec;
  fs::path out_abs = fs::absolute(out_path, ec).lexically_normal();
  if (ec) return Status::IoError(fmt::format("{}: {}", out_path, ec.message()));
  if (out_abs.filename().empty()) out_abs = out_abs.parent_path();
  return out_abs;
}

Status CheckReplaceable(const std::string& out_path, const fs::path& out_abs) {
  struct stat st;
  if (::lstat(out_abs.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::FromErrno(errno, out_path);
  }
  if (IsEmptyDirectory(out_abs.string())) return Status::Ok();
  if (IsShardfsIndex(out_abs.string())) {
    SHARDFS_ASSIGN_OR_RETURN(const std::vector<std::string> foreign,
                             ForeignEntries(out_abs.string(), DirKind::kIndex));
    if (foreign.empty()) return Status::Ok();
    return Status::InvalidArgument(fmt::format(
        "{}: a shardfs index that also holds {}, which shardfs did not write; --force replaces "
        "an index only when it holds nothing else (move them out of it, or choose another "
        "--out): left alone",
        out_path, ListNames(foreign)));
  }
  const std::string what = S_ISREG(st.st_mode)   ? "is a file"
                           : S_ISDIR(st.st_mode) ? "is a directory that holds no shardfs index"
                                                 : FileKind(st.st_mode);
  return Status::InvalidArgument(
      fmt::format("{}: {}; --force replaces only a shardfs index or an empty directory: left alone",
                  out_path, what));
}

Status WriteDatabase(const std::string& dir, std::span<const TablePart> parts) {
  const auto start = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {
    log::Debug("index write: {} after {:.3f}s", what,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  // The table files are independent: each is written on its own thread.
  std::vector<TableResult> results(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) results[i].file = dir + "/" + parts[i].name;
  {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < parts.size(); ++i) {
      threads.emplace_back(WriteTable, std::cref(parts[i]), &results[i]);
    }
    if (!parts.empty()) WriteTable(parts[0], &results[0]);
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::string> files;
  for (const TableResult& result : results) {
    SHARDFS_RETURN_IF_ERROR(result.status);
    if (!result.empty) files.push_back(result.file);
  }
  phase("table files");
  SHARDFS_RETURN_IF_ERROR(IngestTables(dir, files));
  phase("ingest");
  std::error_code ec;
  for (const std::string& file : files) fs::remove(file, ec);  // Ingest hard-linked them.
  return SyncDirectory(dir);
}

Result<uint64_t> PublishIndex(const std::string& out_path, const fs::path& out_abs,
                              std::span<const TablePart> parts) {
  RemoveStaleBuildDirs(out_abs);
  const std::string tmp = TempPathBeside(out_abs.string());
  SHARDFS_RETURN_IF_ERROR(MakeTempDir(tmp));
  Status s = WriteDatabase(tmp, parts);
  if (!s.ok()) {
    RemoveBuildDir(tmp);
    return s.WithContext(out_path);
  }
  log::Debug("index write: database written");
  SHARDFS_RETURN_IF_ERROR(RenameIntoPlace(tmp, out_abs, out_path));
  SHARDFS_RETURN_IF_ERROR(SyncPath(out_abs.parent_path().string()));
  return DirectoryBytes(out_abs);
}

Result<uint64_t> PublishTree(const std::string& out_path, const fs::path& out_abs,
                             const std::function<Status(const KvSink&)>& dirents,
                             const std::function<Status(const KvSink&)>& inodes,
                             const KeyValues& small_kvs, std::span<const uint64_t> shard_bytes,
                             const KeyValues& seek_kvs) {
  static_assert(kDirentPrefix < kInodePrefix && kInodePrefix < kMetaPrefix &&
                kMetaPrefix < kShardPrefix);
  const std::string shard_bytes_key = EncodeViewKeyPrefix(kDefaultView, kViewBytes);
  const std::string shard_bytes_value =
      EncodeShardBytes(std::vector<uint64_t>(shard_bytes.begin(), shard_bytes.end()));
  auto put_all = [](const KeyValues& kvs, const KvSink& put) -> Status {
    for (const auto& [key, value] : kvs) SHARDFS_RETURN_IF_ERROR(put(key, value));
    return Status::Ok();
  };
  const TablePart parts[] = {
      {"dirents.sst", true, dirents},
      {"inodes.sst", false,
       [&](const KvSink& put) -> Status {
         SHARDFS_RETURN_IF_ERROR(inodes(put));
         return put_all(small_kvs, put);
       }},
      {"views.sst", false,
       [&](const KvSink& put) { return put(shard_bytes_key, shard_bytes_value); }},
      {"seek.sst", false, [&](const KvSink& put) { return put_all(seek_kvs, put); }},
  };
  return PublishIndex(out_path, out_abs, parts);
}

}  // namespace shardfs::index
