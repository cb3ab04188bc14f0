#include "src/reader/volume.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "base/log.h"
#include "src/reader/chunk_cache.h"
#include "src/reader/index_copy.h"
#include "src/reader/storage_plan.h"
#include "src/remote/aws_config.h"

namespace shardfs::reader {

namespace {

using index::EntryRecord;
using index::EntryType;
using index::InodeId;

// What names shard `i`'s bytes in the chunk cache. Chunks cached under an
// identity are reused by a later mount only if it computes the same one, so
// it must change whenever the bytes can have changed:
// - the index database's id and the shard's ordinal: every `index build`
//   creates a new database with a new random id, so a shard rebuilt and
//   re-indexed (even at the same size, with the same first and last 64 KiB,
//   the same fingerprint) never matches the chunks of its predecessor;
//   `index add` keeps the database but appends shards at new ordinals.
// - a local shard: its inode number, mtime and ctime now. Writing the file
//   changes its ctime (which no user can set back), replacing it by a rename
//   changes its inode. st_dev is left out: NFS and Lustre clients number
//   their mounts anew after a remount, which would drop every chunk.
// - a remote shard: its ETag; every response is held to the indexed one.
// - location, size and fingerprint, as before.
// An identity that cannot be established (no database id, a local shard that
// cannot be stat'd) gets a random part: its chunks are never reused.
std::string ChunkIdentity(const index::IndexReader& r, uint32_t i) {
  const index::ShardMeta& m = r.shards()[i];
  const std::string& location = r.ShardPath(index::ShardId{i});
  auto unique = [] {
    std::random_device rd;
    return fmt::format("unique {:08x}{:08x}", rd(), rd());
  };
  std::string db = r.db_identity().empty() ? unique() : r.db_identity();
  std::string state;
  if (m.remote()) {
    state = fmt::format("etag {}", m.etag);
  } else if (struct stat st; ::stat(location.c_str(), &st) == 0) {
    state =
        fmt::format("ino {} mtime {}.{:09} ctime {}.{:09}", static_cast<uint64_t>(st.st_ino),
                    st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
  } else {
    state = unique();
  }
  return fmt::format("db {}\nshard {}\n{}\n{}\n{:016x}\n{}", db, i, location, m.size, m.fingerprint,
                     state);
}

// Opens the chunk cache for a volume without cache_dir whose shards cross a
// network (remote shards, or local ones on network storage): in the first
// usable default root, which every process of this user on the node shares
// (a mount, each rank, each forked or spawned DataLoader worker: a chunk is
// fetched once per node), else in memory (src/reader/storage_plan.h). Sets
// `dir` to where it is ("" in memory).
Result<std::unique_ptr<reader::ChunkCache>> OpenAutoCache(
    reader::ChunkCacheOptions co, const std::vector<reader::ChunkShard>& shards,
    const VolumeOptions& o, std::string* dir) {
  Result<std::string> root = PickCacheRoot(DefaultCacheRoots());
  std::string why;
  if (!root.ok()) {
    why = root.status().message();
  } else {
    // What the shared cache holds already counts as room for it.
    uint64_t in_use = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(
             fmt::format("{}/{}", *root, reader::ChunkCache::kChunkDir), ec)) {
      if (e.is_regular_file(ec)) in_use += e.file_size(ec);
    }
    co.capacity = o.cache_size != 0
                      ? o.cache_size
                      : AutoCacheSize(*root, VolumeOptions::kDefaultDiskCache, in_use);
    if (co.capacity == 0) {
      why = fmt::format("{}: less than {} bytes free", *root, kMinAutoCache * 4);
    } else {
      co.dir = *root;
      auto cache = reader::ChunkCache::Open(co, shards);
      if (cache.ok()) {
        *dir = co.dir;
        return cache;
      }
      why = cache.status().message();
    }
  }
  log::Warning("node-local chunk cache: {}; caching chunks in memory instead ({} bytes)", why,
               VolumeOptions::kDefaultMemoryCache);
  co.dir.clear();
  co.capacity = VolumeOptions::kDefaultMemoryCache;
  dir->clear();
  return reader::ChunkCache::Open(co, shards);
}

// The chunk fetcher and its cache, for an index with remote shards, a
// cache_dir, or local shards on network storage (`network`); null otherwise
// (local shards read directly). Sets `dir` to the cache's directory.
Result<std::unique_ptr<reader::ShardFetcher>> MakeFetcher(const VolumeOptions& o,
                                                          const index::IndexReader& r, bool network,
                                                          std::string* dir, uint64_t* capacity) {
  bool any_remote = false, any_s3 = false;
  for (const index::ShardMeta& m : r.shards()) {
    any_remote |= m.remote();
    any_s3 |= m.remote() && m.path.starts_with("s3://");
  }
  if (!any_remote && o.cache_dir.empty() && !network) {
    return std::unique_ptr<reader::ShardFetcher>();
  }
  if (!o.cache_dir.empty() && r.db_identity().empty()) {
    log::Warning("index {}: no database id; chunks cached in {} will not be reused", r.path(),
                 o.cache_dir);
  }
  std::vector<reader::ChunkShard> chunk_shards;
  std::vector<reader::FetchShard> fetch_shards;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    const index::ShardMeta& m = r.shards()[i];
    const std::string& location = r.ShardPath(index::ShardId{i});
    chunk_shards.push_back({ChunkIdentity(r, i), m.size});
    fetch_shards.push_back({location, m.remote(), m.size, m.etag, m.mtime_ns});
  }
  reader::ChunkCacheOptions co;
  co.dir = o.cache_dir;
  co.chunk_size = o.fetch.chunk_size;
  co.capacity = o.cache_size != 0     ? o.cache_size
                : o.cache_dir.empty() ? VolumeOptions::kDefaultMemoryCache
                                      : VolumeOptions::kDefaultDiskCache;
  std::unique_ptr<reader::ChunkCache> cache;
  if (o.cache_dir.empty()) {  // Remote shards, or local ones on network storage.
    SHARDFS_ASSIGN_OR_RETURN(cache, OpenAutoCache(co, chunk_shards, o, dir));
  } else {
    SHARDFS_ASSIGN_OR_RETURN(cache, reader::ChunkCache::Open(co, std::move(chunk_shards)));
    *dir = o.cache_dir;
  }
  *capacity = cache->stats().capacity;
  reader::FetcherOptions fo = o.fetch;
  if (any_s3) {
    SHARDFS_ASSIGN_OR_RETURN(fo.aws, remote::LoadAwsConfig());
  }
  log::Debug("chunk fetcher: {} cache of {} bytes{}, chunks of {} bytes, {} threads",
             dir->empty() ? "memory" : "disk", *capacity, dir->empty() ? "" : " in " + *dir,
             co.chunk_size, fo.threads);
  return reader::ShardFetcher::Create(std::move(fo), std::move(fetch_shards), std::move(cache));
}

// What IndexReader::Open opens for `ref`: a node-local copy of an index
// directory on network storage (src/reader/index_copy.h), with
// options->reader.shard_base set to the original's directory; else ref.path.
// A copy that cannot be made is one warning, and the index is read where it
// is.
std::string IndexToOpen(const IndexLocation& ref, VolumeOptions* options) {
  if (options->storage == StorageMode::kLocal || ref.cached) return ref.path;
  struct stat st {};
  if (::stat(ref.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return ref.path;
  if (options->storage == StorageMode::kAuto) {
    Result<StorageInfo> info = DetectStorage(ref.path);
    if (!info.ok() || !info->network) return ref.path;
  }
  std::string root = options->cache_dir;
  if (root.empty()) {
    Result<std::string> picked = PickCacheRoot(DefaultCacheRoots());
    if (!picked.ok()) {
      if (options->announce) {
        log::Warning("index {} on network storage, read there: {}", ref.shown,
                     picked.status().message());
      }
      return ref.path;
    }
    root = *picked;
  }
  Result<IndexCopy> copy =
      LocalIndexCopy(ref.path, root, AutoCacheSize(root, VolumeOptions::kDefaultDiskCache));
  if (!copy.ok()) {
    if (options->announce) {
      log::Warning("index {} on network storage, read there: no local copy: {}", ref.shown,
                   copy.status().message());
    }
    return ref.path;
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(ref.path, ec).lexically_normal();
  if (ec) return ref.path;
  if (abs.filename().empty()) abs = abs.parent_path();
  options->reader.shard_base = abs.parent_path().string();
  log::Debug("index {}: {} local copy {} ({} bytes)", ref.shown,
             copy->reused ? "reusing the" : "made a", copy->path, copy->bytes);
  return copy->path;
}

// Takes the next component off `rest` (leading '/'s skipped); false at the end.
bool NextComponent(std::string_view* rest, std::string_view* comp) {
  size_t start = rest->find_first_not_of('/');
  if (start == std::string_view::npos) {
    *rest = {};
    return false;
  }
  rest->remove_prefix(start);
  size_t end = rest->find('/');
  *comp = rest->substr(0, end);
  rest->remove_prefix(end == std::string_view::npos ? rest->size() : end);
  return true;
}

// Whether `path` is plain: components separated by single '/', none empty,
// "." or "..", no '/' at either end.
bool IsPlainPath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  size_t start = 0;
  for (;;) {
    size_t end = path.find('/', start);
    std::string_view comp = path.substr(start, end - start);
    if (comp.empty() || comp == "." || comp == "..") return false;
    if (end == std::string_view::npos) return true;
    start = end + 1;
  }
}

}  // namespace

Result<std::unique_ptr<Volume>> Volume::Open(IndexLocation ref, VolumeOptions options) {
  const std::string open_path = IndexToOpen(ref, &options);
  auto reader = index::IndexReader::Open(open_path, options.reader);
  if (!reader.ok()) return reader.status();
  if (options.fs.verify != reader::VerifyMode::kOff &&
      (*reader)->Meta(index::kMetaChecksums) != "xxh3") {
    if (!options.verify_where_possible) {
      return Status::InvalidArgument(fmt::format(
          "index {}: built without checksums (--no-checksum); verify=first|always needs them",
          ref.shown));
    }
    options.fs.verify = reader::VerifyMode::kOff;
  }
  std::unique_ptr<Volume> v(new Volume());
  v->storage_ = SurveyStorage(**reader, ref.path, options.storage);
  uint64_t capacity = 0;
  SHARDFS_ASSIGN_OR_RETURN(
      v->fetcher_, MakeFetcher(options, **reader, v->storage_.network, &v->cache_dir_, &capacity));
  if (v->fetcher_) {
    options.fs.chunked = v->fetcher_.get();
    options.fs.chunk_local = !options.cache_dir.empty() || v->storage_.network;
    v->fetcher_->Start();
  }
  if (v->storage_.network && options.cache_dir.empty() && options.announce) {
    log::Info(
        "{}: network storage ({}): shards read in {}-byte chunks through a node-local "
        "cache {} ({}); -o storage=local turns this off",
        ref.shown, v->storage_.why, options.fetch.chunk_size,
        v->cache_dir_.empty() ? "in memory" : "in " + v->cache_dir_,
        fmt::format("{} MiB", capacity >> 20));
  }
  v->decoded_ = std::make_unique<reader::DecodedCache>(options.decode_cache);
  options.fs.decoded = v->decoded_.get();
  v->fs_ = std::make_unique<reader::Filesystem>(std::move(reader).value(), options.fs);
  v->where_ = std::move(ref);
  // What a child after fork() opens its own volume with: nothing of ours.
  options.fs.chunked = nullptr;
  options.fs.chunk_local = false;
  options.fs.decoded = nullptr;
  v->options_ = std::move(options);
  return v;
}

Volume::~Volume() {
  if (fetcher_) fetcher_->Stop();
}

Status Volume::Resolve(std::string_view relpath, bool follow, EntryRecord* rec,
                       index::RecordHolder* holder) const {
  constexpr int kMaxLinks = 40;  // As Linux's path walk.
  auto not_found = [&] {
    return Status::NotFound(
        fmt::format("{}: no such file or directory in index {}", relpath, where_.shown));
  };
  const bool plain = IsPlainPath(relpath);
  // A file in a directory seen before: one Lookup.
  if (size_t slash = relpath.rfind('/'); plain && slash != std::string_view::npos) {
    InodeId dir;
    {
      std::shared_lock<std::shared_mutex> l(dirs_mu_);
      auto it = dirs_.find(relpath.substr(0, slash));
      if (it != dirs_.end()) dir = it->second;
    }
    if (dir.value != 0) {
      holder->Reset();
      Status s = fs_->Lookup(dir, relpath.substr(slash + 1), rec, holder);
      if (s.code() == Status::Code::kNotFound) return not_found();
      SHARDFS_RETURN_IF_ERROR(s);
      Remember(relpath, *rec);
      if (rec->type != EntryType::kSymlink || !follow) return Status::Ok();
      // A link at the end: walked in full below.
    }
  }
  // The root is a directory in every view: its record is read only if the
  // walk ends there.
  holder->Reset();
  *rec = EntryRecord{};
  rec->type = EntryType::kDir;
  rec->inode = index::kRootInode;
  rec->parent = index::kRootInode;
  std::string_view rest = relpath;
  std::string pending;  // The path still to walk after a symbolic link.
  int links = 0;
  std::string_view comp;
  while (NextComponent(&rest, &comp)) {
    if (comp == ".") continue;
    if (comp == "..") {
      if (rec->inode == index::kRootInode) continue;
      InodeId parent = rec->parent;
      holder->Reset();
      SHARDFS_RETURN_IF_ERROR(fs_->GetAttr(parent, rec, holder));
      continue;
    }
    if (rec->type != EntryType::kDir) {
      return Status::NotADirectory(
          fmt::format("{}: not a directory in index {}: {}", relpath, where_.shown, comp));
    }
    InodeId dir = rec->inode;
    holder->Reset();
    Status s = fs_->Lookup(dir, comp, rec, holder);
    if (s.code() == Status::Code::kNotFound) return not_found();
    SHARDFS_RETURN_IF_ERROR(s);
    bool last = rest.find_first_not_of('/') == std::string_view::npos;
    if (rec->type == EntryType::kDir && plain && links == 0) {
      std::string_view path = relpath.substr(0, comp.data() + comp.size() - relpath.data());
      std::unique_lock<std::shared_mutex> l(dirs_mu_);
      if (dirs_.size() < kMaxCachedDirs) dirs_.try_emplace(std::string(path), rec->inode);
    }
    if (rec->type != EntryType::kSymlink || (last && !follow)) continue;
    if (++links > kMaxLinks) {
      return Status::TooManyLinks(
          fmt::format("{}: too many levels of symbolic links in index {}", relpath, where_.shown));
    }
    if (rec->target.starts_with('/')) return not_found();  // Out of the index.
    std::string next = fmt::format("{}/{}", rec->target, rest);
    pending.swap(next);
    rest = pending;
    holder->Reset();
    SHARDFS_RETURN_IF_ERROR(fs_->GetAttr(dir, rec, holder));
  }
  if (rec->inode == index::kRootInode) {
    holder->Reset();
    return fs_->GetAttr(index::kRootInode, rec, holder);
  }
  if (plain && links == 0) Remember(relpath, *rec);
  return Status::Ok();
}

void Volume::Remember(std::string_view relpath, const EntryRecord& rec) const {
  if (rec.type != EntryType::kFile || rec.sparse()) return;
  std::unique_lock<std::shared_mutex> l(files_mu_);
  if (file_records_.size() >= kMaxCachedFiles) return;
  auto it = file_records_.try_emplace(rec.inode.value, rec).first;
  if (!relpath.empty()) file_paths_.try_emplace(std::string(relpath), &it->second);
}

bool Volume::Remembered(std::string_view relpath, EntryRecord* rec) const {
  std::shared_lock<std::shared_mutex> l(files_mu_);
  auto path = file_paths_.find(relpath);
  if (path == file_paths_.end()) return false;
  *rec = *path->second;
  return true;
}

bool Volume::Remembered(InodeId inode, EntryRecord* rec) const {
  std::shared_lock<std::shared_mutex> l(files_mu_);
  auto it = file_records_.find(inode.value);
  if (it == file_records_.end()) return false;
  *rec = it->second;
  return true;
}

Status Volume::GetFile(InodeId inode, EntryRecord* rec, index::RecordHolder* holder) const {
  holder->Reset();
  if (Remembered(inode, rec)) return Status::Ok();
  SHARDFS_RETURN_IF_ERROR(fs_->GetAttr(inode, rec, holder));
  if (rec->type == EntryType::kDir) {
    return Status::IsADirectory(
        fmt::format("inode {}: is a directory in index {}", inode.value, where_.shown));
  }
  Remember("", *rec);
  return Status::Ok();
}

Status Volume::ResolveFile(std::string_view relpath, EntryRecord* rec,
                           index::RecordHolder* holder) const {
  if (Remembered(relpath, rec)) {  // A file resolved before: no lookup.
    holder->Reset();
    return Status::Ok();
  }
  SHARDFS_RETURN_IF_ERROR(Resolve(relpath, /*follow=*/true, rec, holder));
  if (rec->type == EntryType::kDir) {
    return Status::IsADirectory(
        fmt::format("{}: is a directory in index {}", relpath, where_.shown));
  }
  return Status::Ok();
}

Status Volume::Stat(std::string_view relpath, bool follow, struct stat* st) const {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(Resolve(relpath, follow, &rec, &holder));
  fs_->ToStat(rec, st);
  return Status::Ok();
}

Status Volume::ListDir(std::string_view relpath, const ListFn& fn) const {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(Resolve(relpath, /*follow=*/true, &rec, &holder));
  if (rec.type != EntryType::kDir) {
    return Status::NotADirectory(
        fmt::format("{}: not a directory in index {}", relpath, where_.shown));
  }
  return ListDir(rec.inode, fn);
}

Status Volume::ListDir(InodeId dir, const ListFn& fn) const { return fs_->ReadDir(dir, "", fn); }

Result<std::string> Volume::ReadLink(std::string_view relpath) const {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(Resolve(relpath, /*follow=*/false, &rec, &holder));
  if (rec.type != EntryType::kSymlink) {
    return Status::InvalidArgument(
        fmt::format("{}: not a symbolic link in index {}", relpath, where_.shown));
  }
  return std::string(rec.target);
}

Result<size_t> Volume::Read(std::string_view relpath, uint64_t offset, size_t size, char* buf) {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(ResolveFile(relpath, &rec, &holder));
  return Read(rec, offset, size, buf);
}

Result<size_t> Volume::Read(const EntryRecord& rec, uint64_t offset, size_t size, char* buf) {
  SHARDFS_ASSIGN_OR_RETURN(ReadReply reply, fs_->Read(rec, offset, size, buf, false));
  return reply.length;
}

Result<size_t> Volume::Read(InodeId inode, uint64_t offset, size_t size, char* buf) {
  EntryRecord rec;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(GetFile(inode, &rec, &holder));
  return Read(rec, offset, size, buf);
}

}  // namespace shardfs::reader
