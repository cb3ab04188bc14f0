#include "src/volume/volume.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <random>
#include <utility>
#include <vector>

#include "base/log.h"
#include "remote/aws_config.h"
#include "src/mount/chunk_cache.h"

namespace shardfs::volume {

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

// The chunk fetcher and its cache, for an index with remote shards or a
// cache_dir; null otherwise (local shards read directly).
Result<std::unique_ptr<mount::ShardFetcher>> MakeFetcher(const VolumeOptions& o,
                                                         const index::IndexReader& r) {
  bool any_remote = false, any_s3 = false;
  for (const index::ShardMeta& m : r.shards()) {
    any_remote |= m.remote();
    any_s3 |= m.remote() && m.path.starts_with("s3://");
  }
  if (!any_remote && o.cache_dir.empty()) return std::unique_ptr<mount::ShardFetcher>();
  if (!o.cache_dir.empty() && r.db_identity().empty()) {
    log::Warning("index {}: no database id; chunks cached in {} will not be reused", r.path(),
                 o.cache_dir);
  }
  std::vector<mount::ChunkShard> chunk_shards;
  std::vector<mount::FetchShard> fetch_shards;
  for (uint32_t i = 0; i < r.shards().size(); ++i) {
    const index::ShardMeta& m = r.shards()[i];
    const std::string& location = r.ShardPath(index::ShardId{i});
    chunk_shards.push_back({ChunkIdentity(r, i), m.size});
    fetch_shards.push_back({location, m.remote(), m.size, m.etag, m.mtime_ns});
  }
  mount::ChunkCacheOptions co;
  co.dir = o.cache_dir;
  co.chunk_size = o.fetch.chunk_size;
  co.capacity = o.cache_size != 0     ? o.cache_size
                : o.cache_dir.empty() ? VolumeOptions::kDefaultMemoryCache
                                      : VolumeOptions::kDefaultDiskCache;
  SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<mount::ChunkCache> cache,
                           mount::ChunkCache::Open(co, std::move(chunk_shards)));
  mount::FetcherOptions fo = o.fetch;
  if (any_s3) {
    SHARDFS_ASSIGN_OR_RETURN(fo.aws, remote::LoadAwsConfig());
  }
  log::Debug("chunk fetcher: {} cache of {} bytes{}, chunks of {} bytes, {} threads",
             co.dir.empty() ? "memory" : "disk", co.capacity, co.dir.empty() ? "" : " in " + co.dir,
             co.chunk_size, fo.threads);
  return mount::ShardFetcher::Create(std::move(fo), std::move(fetch_shards), std::move(cache));
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

Result<indexref::IndexRef> Volume::Resolve(const std::string& arg, VolumeOptions* options) {
  indexref::IndexCacheOptions co;
  co.cache_dir = options->cache_dir;
  co.fetch = options->fetch.fetch;
  co.max_index_size = options->max_index_size;
  return indexref::ResolveIndex(arg, co, &options->reader);
}

Result<std::unique_ptr<Volume>> Volume::Open(indexref::IndexRef ref, VolumeOptions options) {
  auto reader = index::IndexReader::Open(ref.path, options.reader);
  if (!reader.ok()) return reader.status();
  if (options.fs.verify != mount::VerifyMode::kOff &&
      (*reader)->Meta(index::kMetaChecksums) != "xxh3") {
    if (!options.verify_where_possible) {
      return Status::InvalidArgument(fmt::format(
          "index {}: built without checksums (--no-checksum); verify=first|always needs them",
          ref.shown));
    }
    options.fs.verify = mount::VerifyMode::kOff;
  }
  std::unique_ptr<Volume> v(new Volume());
  SHARDFS_ASSIGN_OR_RETURN(v->fetcher_, MakeFetcher(options, **reader));
  if (v->fetcher_) {
    options.fs.chunked = v->fetcher_.get();
    options.fs.chunk_local = !options.cache_dir.empty();
    v->fetcher_->Start();
  }
  v->decoded_ = std::make_unique<mount::DecodedCache>(options.decode_cache);
  options.fs.decoded = v->decoded_.get();
  v->fs_ = std::make_unique<mount::Filesystem>(std::move(reader).value(), options.fs);
  v->ref_ = std::move(ref);
  v->options_ = std::move(options);
  return v;
}

Result<std::unique_ptr<Volume>> Volume::Open(const std::string& arg, VolumeOptions options) {
  SHARDFS_ASSIGN_OR_RETURN(indexref::IndexRef ref, Resolve(arg, &options));
  return Open(std::move(ref), std::move(options));
}

Volume::~Volume() {
  if (fetcher_) fetcher_->Stop();
}

Status Volume::Resolve(std::string_view relpath, bool follow, EntryRecord* rec,
                       index::RecordHolder* holder) const {
  constexpr int kMaxLinks = 40;  // As Linux's path walk.
  auto not_found = [&] {
    return Status::NotFound(
        fmt::format("{}: no such file or directory in index {}", relpath, ref_.shown));
  };
  // A file in a directory seen before: one Lookup.
  const bool plain = IsPlainPath(relpath);
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
          fmt::format("{}: not a directory in index {}: {}", relpath, ref_.shown, comp));
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
      return Status::InvalidArgument(
          fmt::format("{}: too many levels of symbolic links in index {}", relpath, ref_.shown));
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
  return Status::Ok();
}

}  // namespace shardfs::volume
