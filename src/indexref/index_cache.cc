#include "src/indexref/index_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string_view>

#include "base/io.h"
#include "base/log.h"
#include "base/open_file.h"
#include "base/paths.h"
#include "base/progress.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/schema.h"
#include "src/indexref/bundle_unpack.h"
#include "src/reader/cache_dir.h"
#include "src/remote/aws_config.h"
#include "src/remote/url.h"

namespace shardfs::indexref {

namespace {

constexpr char kStateFile[] = "state";
constexpr char kLockFile[] = "lock";
constexpr char kManifestName[] = "manifest";
constexpr std::string_view kCopyPrefix = "copy-";
constexpr std::string_view kTmpPrefix = "tmp-";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kStateMagic = "shardfs-index-cache 1";
constexpr std::string_view kMarkerText =
    "This directory holds copies of indexes fetched by URL (see cache_dir in\n"
    "shardfs(1)). shardfs writes and deletes its own files here.\n";

std::string RandomHex() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// A strong ETag: one that proves the same bytes.
bool IsStrongEtag(std::string_view etag) { return !etag.empty() && !etag.starts_with("W/"); }

bool IsCopyName(std::string_view name) {
  if (!name.starts_with(kCopyPrefix) || name.size() == kCopyPrefix.size()) return false;
  for (char c : name.substr(kCopyPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::vector<std::string> ListDir(int dir_fd) {
  std::vector<std::string> names;
  int listing = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return names;
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

// An unnamed file in directory `dir_fd` (O_TMPFILE), or a named one unlinked
// at once where the filesystem has no O_TMPFILE.
Result<UniqueFd> TempFile(int dir_fd, const std::string& shown) {
  UniqueFd fd(::openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd.valid()) return fd;
  const std::string name = fmt::format("{}{}.part", kTmpPrefix, RandomHex());
  fd.reset(
      ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, fmt::format("{}: a temporary file", shown));
  ::unlinkat(dir_fd, name.c_str(), 0);
  return fd;
}

Status FlockRetry(int fd, int op) {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "flock");
  }
  return Status::Ok();
}

}  // namespace

struct IndexCache::Entry {
  std::string path;  // CACHE/shardfs-index-v1/KEY
  UniqueFd dir;
  UniqueFd lock;  // LOCK_EX while the entry is used.
};

struct IndexCache::State {
  std::string copy;
  std::string etag;
  uint64_t length = 0;
  bool manifest = false;
};

// Where a cached object comes from.
class IndexCache::Source {
 public:
  virtual ~Source() = default;
  // What messages name (a redacted URL, or a path).
  virtual const std::string& shown() const = 0;
  // Whether the validator is an HTTP ETag (else a file's state).
  virtual bool has_etag() const = 0;
  // For a manifest: the base its relative references are taken from.
  virtual std::string base() const = 0;
  // Whether the copy recorded in `s` is still what the source holds.
  virtual Result<bool> Unchanged(const State& s) = 0;
  // Whether a failed Unchanged allows using the cached copy anyway.
  virtual bool FallBack(const Status& s) const = 0;
  // The object's bytes in a file (at any offset), with its validator ("" if
  // it has none that proves the same bytes) and length.
  virtual Result<UniqueFd> Get(int temp_dir_fd, std::string* etag, uint64_t* length) = 0;
};

class IndexCache::UrlSource final : public IndexCache::Source {
 public:
  UrlSource(remote::RemoteUrl url, remote::AwsConfig aws, const IndexCacheOptions& o)
      : url_(std::move(url)), aws_(std::move(aws)), options_(o), shown_(url_.Redacted()) {}

  const std::string& shown() const override { return shown_; }
  bool has_etag() const override { return true; }
  std::string base() const override {
    std::string s = url_.ToString();
    return s.substr(0, s.rfind('/') + 1);
  }

  Result<bool> Unchanged(const State& s) override {
    remote::FetchOptions fo = options_.fetch;
    fo.retry_budget = std::min(fo.retry_budget, options_.revalidate_budget);
    remote::HttpClient client(fo, aws_, nullptr);
    bool not_modified = false;
    SHARDFS_ASSIGN_OR_RETURN(remote::ObjectInfo info,
                             client.Revalidate(url_, s.etag, &not_modified));
    if (not_modified) return true;
    // A server that ignores If-None-Match: the same strong ETag and size.
    return info.etag == s.etag && info.size == s.length;
  }

  bool FallBack(const Status& s) const override {
    // Unreachable, not refused: a denied request or a certificate that
    // fails is an answer, and using the old copy would hide it.
    return s.code() == Status::Code::kIoError &&
           s.message().find("access denied") == std::string::npos &&
           s.message().find("TLS: ") == std::string::npos;
  }

  Result<UniqueFd> Get(int temp_dir_fd, std::string* etag, uint64_t* length) override {
    SHARDFS_ASSIGN_OR_RETURN(UniqueFd fd, TempFile(temp_dir_fd, shown_));
    remote::HttpClient client(options_.fetch, aws_, nullptr);
    uint64_t written = 0;
    const uint64_t max = options_.max_index_size;
    Result<remote::ObjectInfo> got = client.GetStream(url_, [&](const char* data, size_t len) {
      if (len > max - written) {
        return Status::IoError(
            fmt::format("longer than the {} ({} bytes) an index may have; --max-index-size SIZE "
                        "(-o max_index_size for a mount) raises the limit",
                        HumanBytes(static_cast<double>(max)), max));
      }
      written += len;
      if (WriteFully(fd.get(), data, len)) return Status::Ok();
      return Status::FromErrno(errno, "writing the temporary copy");
    });
    if (!got.ok()) {
      const std::string& m = got.status().message();
      return m.rfind(shown_, 0) == 0 ? got.status() : got.status().WithContext(shown_);
    }
    *etag = IsStrongEtag(got->etag) ? got->etag : "";
    *length = written;
    if (etag->empty()) {
      log::Warning(
          "index {}: the server sent {} ETag: this copy is used once and fetched again next "
          "time",
          shown_, got->etag.empty() ? "no" : "only a weak");
    }
    return fd;
  }

 private:
  remote::RemoteUrl url_;
  remote::AwsConfig aws_;
  const IndexCacheOptions& options_;
  std::string shown_;
};

class IndexCache::FileSource final : public IndexCache::Source {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}

  const std::string& shown() const override { return path_; }
  bool has_etag() const override { return false; }
  std::string base() const override { return path_.substr(0, path_.rfind('/') + 1); }

  Result<bool> Unchanged(const State& s) override {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) {
      return Status::FromErrno(errno, fmt::format("index bundle {}", path_));
    }
    return Validator(st) == s.etag;
  }
  bool FallBack(const Status&) const override { return false; }

  Result<UniqueFd> Get(int, std::string* etag, uint64_t* length) override {
    struct stat st;
    Result<UniqueFd> fd = OpenRegularFile(path_, &st);  // Nothing but a file is opened.
    if (!fd.ok()) return fd.status().WithContext("index bundle");
    *etag = Validator(st);
    *length = static_cast<uint64_t>(st.st_size);
    return fd;
  }

 private:
  // What tells a replaced or rewritten file: its inode, size, mtime and ctime.
  static std::string Validator(const struct stat& st) {
    return fmt::format("file {}:{} {} {}.{:09} {}.{:09}", static_cast<uint64_t>(st.st_dev),
                       static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                       st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                       st.st_ctim.tv_nsec);
  }

  std::string path_;
};

IndexCache::IndexCache(IndexCacheOptions options)
    : options_([&] {
        if (options.cache_dir.empty()) options.cache_dir = kDefaultIndexCache;
        std::error_code ec;
        std::string abs =
            std::filesystem::absolute(options.cache_dir, ec).lexically_normal().string();
        if (!ec) options.cache_dir = abs;
        while (options.cache_dir.size() > 1 && options.cache_dir.back() == '/') {
          options.cache_dir.pop_back();
        }
        return options;
      }()) {}

IndexCache::~IndexCache() = default;

Status IndexCache::OpenRoot() {
  if (root_fd_.valid()) return Status::Ok();
  const std::string& dir = options_.cache_dir;
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd top, reader::OpenPrivateDir(AT_FDCWD, dir.c_str(), dir));
  const std::string shown = fmt::format("{}/{}", dir, kIndexCacheSubdir);
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd sub,
                           reader::OpenPrivateDir(top.get(), kIndexCacheSubdir, shown));
  // The marker says the directory is shardfs's: nothing is deleted in one
  // without it, unless it was empty.
  struct stat st;
  if (::fstatat(sub.get(), reader::kCacheMarker, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      return Status::InvalidArgument(fmt::format(
          "cache_dir {}: {}/{} is not a file this user wrote; not shardfs's directory, refused",
          dir, shown, reader::kCacheMarker));
    }
  } else {
    // Another process may have made the directory shardfs's between the two
    // looks: it writes the marker before anything else.
    if (!ListDir(sub.get()).empty() &&
        ::fstatat(sub.get(), reader::kCacheMarker, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::InvalidArgument(
          fmt::format("cache_dir {}: {} holds files but no {} marker: not made by shardfs, refused",
                      dir, shown, reader::kCacheMarker));
    }
    UniqueFd m(::openat(sub.get(), reader::kCacheMarker,
                        O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (m.valid() && !WriteFully(m.get(), kMarkerText.data(), kMarkerText.size())) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}", shown));
    }
  }
  root_fd_ = std::move(sub);
  root_shown_ = shown;
  return Status::Ok();
}

Result<IndexCache::Entry> IndexCache::LockEntry(const std::string& key) {
  SHARDFS_RETURN_IF_ERROR(OpenRoot());
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  const std::string name = fmt::format("{:016x}{:016x}", h.high64, h.low64);
  Entry e;
  e.path = fmt::format("{}/{}", root_shown_, name);
  SHARDFS_ASSIGN_OR_RETURN(e.dir, reader::OpenPrivateDir(root_fd_.get(), name.c_str(), e.path));
  e.lock.reset(::openat(e.dir.get(), kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!e.lock.valid()) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}/{}", e.path, kLockFile));
  }
  if (::flock(e.lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, fmt::format("cache_dir {}", e.path));
    log::Info("cache_dir {}: waiting for another shardfs process using it", e.path);
    SHARDFS_RETURN_IF_ERROR(
        FlockRetry(e.lock.get(), LOCK_EX).WithContext(fmt::format("cache_dir {}", e.path)));
  }
  return e;
}

namespace {

// "KEY VALUE" -> (KEY, VALUE); nullopt without a space.
std::optional<std::pair<std::string, std::string>> SplitLine(std::string_view line) {
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  return std::make_pair(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
}

}  // namespace

std::optional<IndexCache::State> IndexCache::ReadState(const Entry& entry) {
  UniqueFd fd(::openat(entry.dir.get(), kStateFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  std::string text(4096, '\0');
  const ssize_t n = fd.valid() ? ::read(fd.get(), text.data(), text.size()) : -1;
  if (n <= 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  State s;
  bool magic = false;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string_view line(text.data() + at, nl - at);
    if (line == kStateMagic) {
      magic = true;
      continue;
    }
    auto kv = SplitLine(line);
    if (!kv) continue;
    if (kv->first == "copy") s.copy = kv->second;
    if (kv->first == "etag") s.etag = kv->second;
    if (kv->first == "length") s.length = std::strtoull(kv->second.c_str(), nullptr, 10);
    if (kv->first == "kind") s.manifest = kv->second == "manifest";
  }
  struct stat st;
  if (!magic || !IsCopyName(s.copy) ||
      ::fstatat(entry.dir.get(), s.copy.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISDIR(st.st_mode)) {
    return std::nullopt;
  }
  return s;
}

Result<std::string> IndexCache::Obtain(const std::string& key, Source& source) {
  std::lock_guard<std::mutex> lock(mu_);
  SHARDFS_ASSIGN_OR_RETURN(Entry entry, LockEntry(key));
  // The recorded copy, if there is one and it is whole.
  const std::optional<State> state = ReadState(entry);
  if (state && !state->etag.empty()) {
    Result<bool> same = source.Unchanged(*state);
    if (same.ok() && *same) {
      log::Debug("index {}: unchanged (ETag {}); the cached copy is used", source.shown(),
                 state->etag);
      return Adopt(entry, *state);
    }
    if (!same.ok()) {
      if (!source.FallBack(same.status())) return same.status();
      log::Warning(
          "index {}: the server could not be reached ({}); using the copy cached with ETag {}",
          source.shown(), same.status().message(), state->etag);
      return Adopt(entry, *state);
    }
  }
  std::string etag;
  uint64_t length = 0;
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd body, source.Get(entry.dir.get(), &etag, &length));
  State fresh;
  SHARDFS_RETURN_IF_ERROR(Install(entry, source, body.get(), etag, length, &fresh).status());
  return Adopt(entry, fresh);
}

namespace {

// Whether the fetched body at `fd` is a manifest (by its magic), not a
// bundle; the file offset is left where it was.
bool IsManifestBody(int fd) {
  char head[64] = {};
  const size_t magic = index::kManifestMagic.size();
  return ::pread(fd, head, magic, 0) == static_cast<ssize_t>(magic) &&
         std::string_view(head, magic) == index::kManifestMagic;
}

// Copies the manifest `body_fd` (from its offset on) into the new file
// kManifestName of the directory `dir` (`dir_path` in messages), fsyncing
// both.
Status CopyManifest(int body_fd, int dir, const std::string& dir_path, const std::string& shown) {
  UniqueFd out(
      ::openat(dir, kManifestName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return Status::FromErrno(errno, fmt::format("cache_dir {}", dir_path));
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(body_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, fmt::format("index {}", shown));
    if (n == 0) break;
    if (!WriteFully(out.get(), buf.data(), static_cast<size_t>(n))) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}", dir_path));
    }
  }
  if (::fsync(out.get()) != 0 || ::fsync(dir) != 0) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}: fsync", dir_path));
  }
  return Status::Ok();
}

// Unpacks the index bundle `body_fd` into the directory `dir` (at
// `dir_path`), at most `max_bytes`. InvalidArgument if what it holds is not
// a shardfs index, or is one with a shard stored relative to its own
// directory: a copy sits in the cache, not beside the shards, so such a path
// would name a file in the cache.
Status UnpackIndexCopy(int body_fd, int dir, const std::string& dir_path, const std::string& shown,
                       uint64_t max_bytes) {
  BundleLimits limits;
  limits.max_bytes = max_bytes;
  SHARDFS_RETURN_IF_ERROR(UnpackIndexBundle(body_fd, dir, shown, limits));
  if (!index::IsShardfsIndex(dir_path)) {
    return Status::InvalidArgument(fmt::format(
        "index {}: the bundle's files are not a shardfs index (no RocksDB database with a "
        "schema version); refused",
        shown));
  }
  index::ReaderOptions ro;
  ro.block_cache_bytes = 1 << 20;
  SHARDFS_ASSIGN_OR_RETURN(auto reader, index::IndexReader::Open(dir_path, ro));
  for (size_t i = 0; i < reader->shards().size(); ++i) {
    const index::ShardMeta& m = reader->shards()[i];
    if ((m.flags & index::kShardPathRelative) && !m.remote()) {
      return Status::InvalidArgument(fmt::format(
          "index {}: shard {} ({}) is stored relative to the index's own directory, which a "
          "fetched copy does not have; refused (index shards by URL or by absolute path to "
          "fetch the index by URL)",
          shown, i, m.path));
    }
  }
  return Status::Ok();
}

// Replaces the file kStateFile of the directory `dir` (at `dir_path`) with
// `text` in one rename, fsynced.
Status WriteStateFile(int dir, const std::string& dir_path, const std::string& text) {
  const std::string state_tmp = fmt::format("{}{}.state", kTmpPrefix, RandomHex());
  UniqueFd sf(
      ::openat(dir, state_tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!sf.valid() || !WriteFully(sf.get(), text.data(), text.size()) || ::fsync(sf.get()) != 0 ||
      ::renameat(dir, state_tmp.c_str(), dir, kStateFile) != 0 || ::fsync(dir) != 0) {
    Status err = Status::FromErrno(errno, fmt::format("cache_dir {}/{}", dir_path, kStateFile));
    ::unlinkat(dir, state_tmp.c_str(), 0);
    return err;
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> IndexCache::Install(Entry& entry, Source& source, int body_fd,
                                        const std::string& etag, uint64_t length, State* state) {
  const std::string& shown = source.shown();
  const bool manifest = IsManifestBody(body_fd);
  if (::lseek(body_fd, 0, SEEK_SET) != 0) {
    return Status::FromErrno(errno, fmt::format("index {}: rewinding the copy", shown));
  }
  const std::string tmp = fmt::format("{}{}", kTmpPrefix, RandomHex());
  if (::mkdirat(entry.dir.get(), tmp.c_str(), 0700) != 0) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}/{}", entry.path, tmp));
  }
  const std::string tmp_path = fmt::format("{}/{}", entry.path, tmp);
  Status s = [&]() -> Status {
    UniqueFd dir(
        ::openat(entry.dir.get(), tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return Status::FromErrno(errno, fmt::format("cache_dir {}", tmp_path));
    if (manifest) return CopyManifest(body_fd, dir.get(), tmp_path, shown);
    return UnpackIndexCopy(body_fd, dir.get(), tmp_path, shown, options_.max_index_size);
  }();
  if (!s.ok()) {
    RemoveUnpacked(entry.dir.get(), tmp);
    const std::string& m = s.message();
    return m.find(shown) != std::string::npos ? s : s.WithContext(fmt::format("index {}", shown));
  }
  State fresh;
  fresh.copy = fmt::format("{}{}", kCopyPrefix, RandomHex());
  fresh.etag = etag;
  fresh.length = length;
  fresh.manifest = manifest;
  if (::renameat(entry.dir.get(), tmp.c_str(), entry.dir.get(), fresh.copy.c_str()) != 0) {
    Status err = Status::FromErrno(errno, fmt::format("cache_dir {}: rename", tmp_path));
    RemoveUnpacked(entry.dir.get(), tmp);
    return err;
  }
  // The state names the new copy only once the copy is on disk, and the
  // state itself is replaced in one rename.
  const std::string text =
      fmt::format("{}\ncopy {}\nkind {}\netag {}\nlength {}\nurl {}\n", kStateMagic, fresh.copy,
                  manifest ? "manifest" : "index", etag, length, shown);
  SHARDFS_RETURN_IF_ERROR(WriteStateFile(entry.dir.get(), entry.path, text));
  log::Info("index {}: {}{} into {}/{} ({} bytes{})", shown,
            source.has_etag() ? "fetched" : "unpacked", manifest ? " (a manifest)" : "", entry.path,
            fresh.copy, length, source.has_etag() && !etag.empty() ? ", ETag " + etag : "");
  *state = fresh;
  return fmt::format("{}/{}", entry.path, fresh.copy);
}

Result<std::string> IndexCache::Adopt(Entry& entry, const State& state) {
  const std::string lock_name = state.copy + std::string(kLockSuffix);
  UniqueFd fd(::openat(entry.dir.get(), lock_name.c_str(),
                       O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}/{}", entry.path, lock_name));
  }
  SHARDFS_RETURN_IF_ERROR(FlockRetry(fd.get(), LOCK_SH)
                              .WithContext(fmt::format("cache_dir {}/{}", entry.path, lock_name)));
  held_.push_back(std::move(fd));
  Prune(entry, state.copy);
  const std::string dir = fmt::format("{}/{}", entry.path, state.copy);
  return state.manifest ? fmt::format("{}/{}", dir, kManifestName) : dir;
}

void IndexCache::Prune(Entry& entry, const std::string& keep) {
  for (const std::string& name : ListDir(entry.dir.get())) {
    if (name.starts_with(kTmpPrefix)) {
      // Only a process holding the entry's lock writes tmp-*: any seen now
      // was left by one that died.
      struct stat st;
      if (::fstatat(entry.dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode)) {
          RemoveUnpacked(entry.dir.get(), name);
        } else {
          ::unlinkat(entry.dir.get(), name.c_str(), 0);
        }
      }
      continue;
    }
    if (!IsCopyName(name) || name == keep) continue;
    const std::string lock_name = name + std::string(kLockSuffix);
    UniqueFd fd(::openat(entry.dir.get(), lock_name.c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid() || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // In use.
    RemoveUnpacked(entry.dir.get(), name);
    ::unlinkat(entry.dir.get(), lock_name.c_str(), 0);
    log::Debug("index cache {}/{}: removed (replaced, unused)", entry.path, name);
  }
}

Result<std::string> IndexCache::Fetch(const std::string& url_text) {
  SHARDFS_ASSIGN_OR_RETURN(remote::RemoteUrl url, remote::ParseRemoteUrl(url_text));
  remote::AwsConfig aws;
  if (url.is_s3()) {
    SHARDFS_ASSIGN_OR_RETURN(aws, remote::LoadAwsConfig());
  }
  UrlSource source(url, std::move(aws), options_);
  Result<std::string> got = Obtain("url\n" + url.ToString(), source);
  const std::string suffix = std::string("/") + kManifestName;
  if (got.ok() && got->ends_with(suffix)) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string dir = got->substr(0, got->size() - suffix.size());
    bases_[dir] = source.base();
    // The reader may name it resolved (cache_dir under a symbolic link).
    if (Result<std::string> real = ResolvePath(dir); real.ok()) bases_[*real] = source.base();
  }
  return got;
}

Result<std::string> IndexCache::Unpack(const std::string& path) {
  SHARDFS_ASSIGN_OR_RETURN(std::string real, ResolvePath(path));
  FileSource source(real);
  return Obtain("file\n" + real, source);
}

std::string IndexCache::UrlBaseOf(const std::string& local) const {
  std::string dir = local;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = bases_.find(dir);
  return it == bases_.end() ? "" : it->second;
}

}  // namespace shardfs::indexref
