#include "src/mount/chunk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack.
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/coding.h"
#include "base/io.h"
#include "base/log.h"

namespace shardfs::mount {

namespace {

constexpr char kMagic[8] = {'S', 'H', 'F', 'S', 'C', 'H', 'N', 'K'};
constexpr uint64_t kMaxChunkSize = uint64_t{1} << 30;
constexpr uint64_t kBlock = 4096;
constexpr size_t kHeaderSumOffset = 56;
constexpr char kMarker[] = "shardfs-cache";
constexpr char kLock[] = "lock";
constexpr std::string_view kTmpPrefix = "tmp-";
constexpr std::string_view kMarkerText =
    "This directory holds the chunk files of shardfs mounts (see cache_dir in\n"
    "shardfs(1)). shardfs writes and deletes its own files here and leaves any\n"
    "other file alone.\n";

struct Header {
  uint32_t len = 0;
  uint64_t id_hash = 0;
  uint64_t index = 0;
  uint64_t xxh3 = 0;
};

void EncodeHeader(const Header& h, char* out) {
  std::memset(out, 0, ChunkCache::kHeaderSize);
  std::memcpy(out, kMagic, sizeof(kMagic));
  EncodeFixed32(out + 8, ChunkCache::kFormatVersion);
  EncodeFixed32(out + 12, h.len);
  EncodeFixed64(out + 16, h.id_hash);
  EncodeFixed64(out + 24, h.index);
  EncodeFixed64(out + 32, h.xxh3);
  EncodeFixed64(out + kHeaderSumOffset, XXH3_64bits(out, kHeaderSumOffset));
}

// False if the bytes are not a header this version wrote.
bool DecodeHeader(const char* in, Header* h) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) return false;
  if (DecodeFixed32(in + 8) != ChunkCache::kFormatVersion) return false;
  if (DecodeFixed64(in + kHeaderSumOffset) != XXH3_64bits(in, kHeaderSumOffset)) return false;
  h->len = DecodeFixed32(in + 12);
  h->id_hash = DecodeFixed64(in + 16);
  h->index = DecodeFixed64(in + 24);
  h->xxh3 = DecodeFixed64(in + 32);
  return true;
}

// "uid 65534 (nobody)".
std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

// Opens directory `name` under `at` (AT_FDCWD: a path) without following a
// symbolic link in its place, creating it 0700 if it is missing (only it: a
// mistyped parent should fail, not be made). Refuses one that another user
// owns or that group or others may write to: whoever can write there could
// plant chunk files, and the XXH3 sums in them are no defence against a
// forger. `shown` names it in errors.
Result<UniqueFd> OpenPrivateDir(int at, const char* name, const std::string& shown) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(at, name, kFlags));
  if (!fd.valid() && errno == ENOENT) {
    if (::mkdirat(at, name, 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}: cannot create it", shown));
    }
    fd.reset(::openat(at, name, kFlags));
  }
  if (!fd.valid()) {
    const int err = errno;
    struct stat lst;
    if ((err == ELOOP || err == ENOTDIR) && ::fstatat(at, name, &lst, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(lst.st_mode)) {
        return Status::InvalidArgument(fmt::format(
            "cache_dir {}: a symbolic link, refused: name the directory itself (whoever "
            "can change the link could point the cache elsewhere)",
            shown));
      }
      if (!S_ISDIR(lst.st_mode)) {
        return Status::NotADirectory(fmt::format("cache_dir {}: not a directory", shown));
      }
    }
    return Status::FromErrno(err, fmt::format("cache_dir {}", shown));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}", shown));
  }
  if (st.st_uid != ::geteuid()) {
    return Status::InvalidArgument(fmt::format(
        "cache_dir {}: owned by {}, not by this mount's user ({}), refused: its owner could "
        "plant chunks that the mount would serve as shard bytes",
        shown, UserName(st.st_uid), UserName(::geteuid())));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::InvalidArgument(fmt::format(
        "cache_dir {}: writable by {} (mode {:04o}), refused: they could plant chunks that "
        "the mount would serve as shard bytes (chmod go-w it)",
        shown, (st.st_mode & S_IWOTH) != 0 ? "others" : "its group", st.st_mode & 07777));
  }
  return fd;
}

// Whether directory `dir_fd` has no entries but . and ..
Result<bool> IsEmptyDir(int dir_fd, const std::string& shown) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    return Status::FromErrno(err, fmt::format("cache_dir {}", shown));
  }
  bool empty = true;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

// Parses "tmp-<gen>" (hex), the name WriteChunk gives its temp files.
bool ParseTmpName(std::string_view name, uint64_t* gen) {
  if (!name.starts_with(kTmpPrefix) || name.size() == kTmpPrefix.size()) return false;
  name.remove_prefix(kTmpPrefix.size());
  auto [next, ec] = std::from_chars(name.data(), name.data() + name.size(), *gen, 16);
  return ec == std::errc() && next == name.data() + name.size();
}

// Parses "<idhash>-<index>-<gen>.chunk" (hex).
bool ParseChunkName(std::string_view name, uint64_t* id_hash, uint64_t* index, uint64_t* gen) {
  constexpr std::string_view kSuffix = ".chunk";
  if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) return false;
  name.remove_suffix(kSuffix.size());
  uint64_t* out[3] = {id_hash, index, gen};
  const char* p = name.data();
  const char* end = name.data() + name.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *out[i], 16);
    if (ec != std::errc() || next == p) return false;
    p = next;
    if (i < 2) {
      if (p == end || *p != '-') return false;
      ++p;
    }
  }
  return p == end;
}

}  // namespace

struct ChunkCache::Slot {
  Slot(const ChunkCache* c, ChunkKey k, uint32_t l, uint64_t g, uint64_t ch)
      : cache(c), key(k), len(l), gen(g), charge(ch) {}
  // A doomed disk slot deletes its file once no reader holds it.
  ~Slot() {
    if (doomed && cache->dir_fd_.valid()) {
      ::unlinkat(cache->dir_fd_.get(), cache->ChunkName(key, gen).c_str(), 0);
    }
  }
  const ChunkCache* const cache;
  const ChunkKey key;
  const uint32_t len;
  const uint64_t gen;
  const uint64_t charge;
  std::unique_ptr<char[]> data;        // Memory mode; immutable once mapped.
  std::atomic<bool> verified{false};   // Disk mode: payload checked in this process.
  bool doomed = false;                 // Set under mu_ when unmapped for good.
  std::shared_ptr<const UniqueFd> file;  // Guarded by mu_: the chunk file, while in open_files_.
  Queue queue = Queue::kSmall;         // Guarded by mu_.
  uint8_t freq = 0;                    // Guarded by mu_; 0..3.
  std::list<Slot*>::iterator pos;      // Guarded by mu_; in small_ or main_.
};

ChunkCache::ChunkCache(ChunkCacheOptions options, std::vector<ChunkShard> shards)
    : options_(std::move(options)), shards_(std::move(shards)) {
  id_hash_.reserve(shards_.size());
  for (const ChunkShard& s : shards_) {
    id_hash_.push_back(XXH3_64bits_withSeed(s.identity.data(), s.identity.size(),
                                            options_.chunk_size));
  }
  small_target_ = options_.capacity / 10;
  ghost_limit_ = std::max<uint64_t>(
      1, (options_.capacity - small_target_) / Charge(options_.chunk_size));
  stats_.capacity = options_.capacity;
  stats_.shard_resident_bytes.assign(shards_.size(), 0);
}

ChunkCache::~ChunkCache() = default;

Result<std::unique_ptr<ChunkCache>> ChunkCache::Open(ChunkCacheOptions options,
                                                     std::vector<ChunkShard> shards) {
  if (options.chunk_size == 0 || options.chunk_size > kMaxChunkSize) {
    return Status::InvalidArgument(fmt::format(
        "chunk cache: chunk size {} bytes, expected 1 to {}", options.chunk_size, kMaxChunkSize));
  }
  if (shards.size() > UINT32_MAX) {
    return Status::InvalidArgument(fmt::format("chunk cache: {} shards, too many", shards.size()));
  }
  std::unique_ptr<ChunkCache> cache(new ChunkCache(std::move(options), std::move(shards)));
  uint64_t one = cache->Charge(cache->options_.chunk_size);
  if (cache->options_.capacity < one) {
    return Status::InvalidArgument(
        fmt::format("chunk cache: cache_size {} bytes is below one chunk ({} bytes{})",
                    cache->options_.capacity, one,
                    cache->options_.dir.empty() ? "" : " with its on-disk overhead"));
  }
  if (!cache->options_.dir.empty()) {
    SHARDFS_RETURN_IF_ERROR(cache->OpenDir());
    SHARDFS_RETURN_IF_ERROR(cache->Scan());
  }
  return cache;
}

uint64_t ChunkCache::Charge(uint64_t len) const {
  if (options_.dir.empty()) return len;
  return (kHeaderSize + len + kBlock - 1) / kBlock * kBlock;
}

uint64_t ChunkCache::ChunkLength(ChunkKey key) const {
  if (key.shard >= shards_.size()) return 0;
  uint64_t size = shards_[key.shard].size;
  uint64_t chunks = size / options_.chunk_size + (size % options_.chunk_size != 0);
  if (key.index >= chunks) return 0;
  return std::min(options_.chunk_size, size - key.index * options_.chunk_size);
}

std::string ChunkCache::ChunkName(ChunkKey key, uint64_t gen) const {
  return fmt::format("{:016x}-{:x}-{:x}.chunk", id_hash_[key.shard], key.index, gen);
}

std::string ChunkCache::ChunkPath(ChunkKey key, uint64_t gen) const {
  return fmt::format("{}/{}", chunk_dir_, ChunkName(key, gen));
}

Status ChunkCache::OpenDir() {
  const std::string& dir = options_.dir;
  SHARDFS_ASSIGN_OR_RETURN(UniqueFd top, OpenPrivateDir(AT_FDCWD, dir.c_str(), dir));
  chunk_dir_ = fmt::format("{}/{}", dir, kChunkDir);
  SHARDFS_ASSIGN_OR_RETURN(dir_fd_, OpenPrivateDir(top.get(), kChunkDir, chunk_dir_));
  // The marker says the directory is shardfs's: files are deleted only in a
  // directory that has it, or that was empty (a first Open cut short).
  const std::string marker = fmt::format("{}/{}", chunk_dir_, kMarker);
  struct stat st;
  if (::fstatat(dir_fd_.get(), kMarker, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      return Status::InvalidArgument(fmt::format(
          "cache_dir {}: {} is not a file this user wrote; not shardfs's directory, refused", dir,
          marker));
    }
  } else if (errno != ENOENT) {
    return Status::FromErrno(errno, fmt::format("cache_dir {}", marker));
  } else {
    SHARDFS_ASSIGN_OR_RETURN(bool empty, IsEmptyDir(dir_fd_.get(), chunk_dir_));
    if (!empty) {
      return Status::InvalidArgument(fmt::format(
          "cache_dir {}: {} holds files but no {} marker: not made by shardfs, refused (move it "
          "away to start a new cache)",
          dir, chunk_dir_, kMarker));
    }
    UniqueFd m(::openat(dir_fd_.get(), kMarker,
                        O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    // EEXIST: another process wrote it meanwhile; the lock below decides.
    if (!m.valid() && errno != EEXIST) {
      return Status::FromErrno(errno, fmt::format("cache_dir {}", marker));
    }
    if (m.valid() && !WriteFully(m.get(), kMarkerText.data(), kMarkerText.size())) {
      return Status::FromErrno(errno, "write").WithContext(fmt::format("cache_dir {}", marker));
    }
  }
  const std::string lock = fmt::format("{}/{}", chunk_dir_, kLock);
  lock_fd_.reset(::openat(dir_fd_.get(), kLock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock_fd_.valid()) return Status::FromErrno(errno, fmt::format("cache_dir {}", lock));
  // flock locks the open file description: a second Open in this process is
  // refused too.
  while (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return Status::InvalidArgument(
          fmt::format("cache_dir {}: in use by another shardfs process", dir));
    }
    return Status::FromErrno(errno, fmt::format("cache_dir {}: lock", lock));
  }
  return Status::Ok();
}

Status ChunkCache::Scan() {
  const std::string& dir = chunk_dir_;
  const uid_t uid = ::geteuid();
  struct Found {
    std::string name;
    ChunkKey key;
    uint64_t gen;
    uint32_t len;
    int64_t mtime_ns;
    bool foreign;
  };
  std::unordered_map<uint64_t, uint32_t> shard_of;
  for (uint32_t i = 0; i < id_hash_.size(); ++i) shard_of.emplace(id_hash_[i], i);

  std::vector<Found> found;
  std::vector<std::string> bad;
  // Files shardfs cannot prove it wrote: left alone.
  std::vector<std::string> others;
  int list_fd = ::openat(dir_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (d == nullptr) {
    int err = errno;
    if (list_fd >= 0) ::close(list_fd);
    return Status::FromErrno(err, fmt::format("cache_dir {}", dir));
  }
  uint64_t max_gen = 0;
  while (true) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || name == kMarker || name == kLock) continue;
    // A file shardfs wrote has one of its names and is a regular file of
    // this user; in a directory of this user that no one else may write to,
    // nobody else can have put it there.
    struct stat st;
    const bool mine = ::fstatat(dir_fd_.get(), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISREG(st.st_mode) && st.st_uid == uid;
    uint64_t id_hash, index, gen;
    const bool chunk_name = ParseChunkName(name, &id_hash, &index, &gen);
    const bool tmp_name = !chunk_name && ParseTmpName(name, &gen);
    // New files get higher numbers than any name here, so no Insert is
    // stopped by, or renames over, a file it may not delete.
    if (chunk_name || tmp_name) max_gen = std::max(max_gen, gen);
    if (!mine || (!chunk_name && !tmp_name)) {
      others.emplace_back(name);
      continue;
    }
    if (!chunk_name) {
      bad.emplace_back(name);  // An Insert cut short by a crash.
      continue;
    }
    UniqueFd fd(::openat(dir_fd_.get(), e->d_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
    char raw[kHeaderSize];
    Header h;
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        !PreadExact(fd.get(), raw, kHeaderSize, 0).ok() || !DecodeHeader(raw, &h) ||
        h.id_hash != id_hash || h.index != index || h.len == 0 ||
        static_cast<uint64_t>(st.st_size) != kHeaderSize + h.len) {
      bad.emplace_back(name);
      continue;
    }
    Found f{std::string(name), ChunkKey{0, index}, gen, h.len,
            int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, true};
    if (auto it = shard_of.find(id_hash); it != shard_of.end()) {
      f.key.shard = it->second;
      f.foreign = false;
      if (ChunkLength(f.key) != h.len) {
        bad.push_back(std::move(f.name));  // Not a chunk of this shard at this size.
        continue;
      }
    }
    found.push_back(std::move(f));
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno(err, fmt::format("cache_dir {}: listing", dir));
  for (const std::string& name : bad) {
    log::Debug("chunk cache: {}/{}: not an intact chunk, deleted", dir, name);
  }
  UnlinkAll(bad);
  if (!others.empty()) {
    log::Warning("chunk cache: {}: {} file(s) not written by shardfs left alone (the first: {})",
                 dir, others.size(), others.front());
  }

  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  std::vector<std::string> duplicates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_gen_ = max_gen + 1;
    stats_.other_files = others.size();
    for (Found& f : found) {
      if (f.foreign) {
        uint64_t charge = Charge(f.len);
        foreign_.push_back({std::move(f.name), charge});
        stats_.foreign_bytes += charge;
        continue;
      }
      if (map_.count(f.key) != 0) {
        duplicates.push_back(std::move(f.name));  // Left by a crash during a deferred delete.
        continue;
      }
      auto slot = std::make_shared<Slot>(this, f.key, f.len, f.gen, Charge(f.len));
      // Oldest first at main's head, so the oldest ends up at its tail.
      AddLocked(std::move(slot), Queue::kMain);
      ++stats_.reused_at_open;
    }
    EvictToFitLocked(0, &dead, &dead_foreign);
  }
  UnlinkAll(duplicates);
  UnlinkAll(dead_foreign);
  return Status::Ok();
}

void ChunkCache::UnlinkAll(const std::vector<std::string>& names) const {
  for (const std::string& name : names) {
    if (::unlinkat(dir_fd_.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
      log::Warning("chunk cache: {}/{}: cannot delete: {}", chunk_dir_, name, std::strerror(errno));
    }
  }
}

void ChunkCache::AddLocked(std::shared_ptr<Slot> slot, Queue q) {
  Slot* s = slot.get();
  s->queue = q;
  if (q == Queue::kSmall) {
    small_.push_front(s);
    s->pos = small_.begin();
    small_bytes_ += s->charge;
  } else {
    main_.push_front(s);
    s->pos = main_.begin();
    main_bytes_ += s->charge;
  }
  stats_.shard_resident_bytes[s->key.shard] += s->len;
  map_.emplace(s->key, std::move(slot));
}

void ChunkCache::RemoveLocked(Slot* s, std::vector<std::shared_ptr<Slot>>* dead) {
  if (s->queue == Queue::kSmall) {
    small_.erase(s->pos);
    small_bytes_ -= s->charge;
  } else {
    main_.erase(s->pos);
    main_bytes_ -= s->charge;
  }
  stats_.shard_resident_bytes[s->key.shard] -= s->len;
  auto it = map_.find(s->key);
  s->doomed = true;
  dead->push_back(std::move(it->second));
  map_.erase(it);
}

void ChunkCache::AddGhostLocked(ChunkKey key) {
  if (ghost_index_.count(key) != 0) return;
  ghost_.push_front(key);
  ghost_index_.emplace(key, ghost_.begin());
  while (ghost_.size() > ghost_limit_) {
    ghost_index_.erase(ghost_.back());
    ghost_.pop_back();
  }
}

void ChunkCache::EvictToFitLocked(uint64_t incoming, std::vector<std::shared_ptr<Slot>>* dead,
                                  std::vector<std::string>* dead_foreign) {
  while (small_bytes_ + main_bytes_ + stats_.foreign_bytes + incoming > options_.capacity &&
         !(small_.empty() && main_.empty() && foreign_.empty())) {
    EvictOneLocked(dead, dead_foreign);
  }
}

void ChunkCache::EvictOneLocked(std::vector<std::shared_ptr<Slot>>* dead,
                                std::vector<std::string>* dead_foreign) {
  ++stats_.evictions;
  if (!foreign_.empty()) {
    stats_.foreign_bytes -= foreign_.front().charge;
    dead_foreign->push_back(std::move(foreign_.front().name));
    foreign_.pop_front();
    return;
  }
  if (!small_.empty() && (small_bytes_ >= small_target_ || main_.empty())) {
    while (!small_.empty()) {
      Slot* s = small_.back();
      if (s->freq > 0) {
        // Re-used while in small: it has earned main.
        small_.pop_back();
        small_bytes_ -= s->charge;
        s->queue = Queue::kMain;
        main_.push_front(s);
        s->pos = main_.begin();
        main_bytes_ += s->charge;
        continue;
      }
      ChunkKey key = s->key;
      RemoveLocked(s, dead);
      AddGhostLocked(key);
      return;
    }
  }
  // Each pass lowers a frequency, so this ends within 4 rounds of main.
  while (!main_.empty()) {
    Slot* s = main_.back();
    if (s->freq > 0) {
      --s->freq;
      main_.splice(main_.begin(), main_, s->pos);
      continue;
    }
    RemoveLocked(s, dead);
    return;
  }
}

Result<uint64_t> ChunkCache::WriteChunk(ChunkKey key, const char* data, size_t len,
                                        uint64_t gen) {
  const std::string tmp = fmt::format("{}{:x}", kTmpPrefix, gen);
  UniqueFd fd(::openat(dir_fd_.get(), tmp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    return Status::FromErrno(errno, fmt::format("chunk cache: {}/{}", chunk_dir_, tmp));
  }
  char raw[kHeaderSize];
  EncodeHeader({static_cast<uint32_t>(len), id_hash_[key.shard], key.index, XXH3_64bits(data, len)},
               raw);
  Status st = Status::Ok();
  if (!WriteFully(fd.get(), raw, kHeaderSize) || !WriteFully(fd.get(), data, len)) {
    st = Status::FromErrno(errno, "write");
  }
  if (st.ok() && ::close(fd.release()) != 0) st = Status::FromErrno(errno, "close");
  const std::string name = ChunkName(key, gen);
  // The rename is what makes the chunk count: until then it is a temp file.
  if (st.ok() && ::renameat(dir_fd_.get(), tmp.c_str(), dir_fd_.get(), name.c_str()) != 0) {
    st = Status::FromErrno(errno, fmt::format("rename to {}", name));
  }
  if (!st.ok()) {
    ::unlinkat(dir_fd_.get(), tmp.c_str(), 0);
    return st.WithContext(fmt::format("chunk cache: {}/{}", chunk_dir_, tmp));
  }
  return gen;
}

Status ChunkCache::Insert(ChunkKey key, const char* data, size_t len) {
  uint64_t want = ChunkLength(key);
  if (want == 0) {
    return Status::InvalidArgument(
        fmt::format("chunk cache: shard {} chunk {}: no such chunk", key.shard, key.index));
  }
  if (len != want) {
    return Status::InvalidArgument(fmt::format(
        "chunk cache: shard {} chunk {}: {} bytes, expected {}", key.shard, key.index, len, want));
  }
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key) != 0) return Status::Ok();
    gen = next_gen_++;
  }
  auto slot = std::make_shared<Slot>(this, key, static_cast<uint32_t>(len), gen, Charge(len));
  if (options_.dir.empty()) {
    slot->data.reset(new char[len]);
    std::memcpy(slot->data.get(), data, len);
  } else {
    Result<uint64_t> written = WriteChunk(key, data, len, gen);
    if (!written.ok()) return written.status();
  }
  slot->verified.store(true, std::memory_order_relaxed);  // From the caller's bytes.

  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key) != 0) {
      slot->doomed = true;  // Another thread stored it meanwhile; drop this copy.
    } else {
      Queue q = Queue::kSmall;
      if (auto g = ghost_index_.find(key); g != ghost_index_.end()) {
        ghost_.erase(g->second);
        ghost_index_.erase(g);
        ++stats_.ghost_hits;
        q = Queue::kMain;
      }
      // Room first, as in the paper: the newcomer is never its own victim.
      EvictToFitLocked(slot->charge, &dead, &dead_foreign);
      AddLocked(std::move(slot), q);
      ++stats_.inserts;
    }
  }
  // Outside the lock: dropping the last pins of dead slots deletes their files.
  UnlinkAll(dead_foreign);
  return Status::Ok();
}

std::shared_ptr<const UniqueFd> ChunkCache::ChunkFile(const std::shared_ptr<Slot>& slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot->file) return slot->file;
  }
  auto file = std::make_shared<const UniqueFd>(::openat(
      dir_fd_.get(), ChunkName(slot->key, slot->gen).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!file->valid()) {
    log::Warning("chunk cache: {}: {}", ChunkPath(slot->key, slot->gen), std::strerror(errno));
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (slot->file) return slot->file;  // Another reader opened it meanwhile.
  if (slot->doomed) return file;      // Read once, not kept.
  slot->file = file;
  open_files_.push_back(slot);
  while (open_files_.size() > kOpenChunkFiles) {
    // Closed once the readers holding it let go.
    if (std::shared_ptr<Slot> old = open_files_.front().lock()) old->file.reset();
    open_files_.pop_front();
  }
  return file;
}

bool ChunkCache::ReadDisk(const Slot& slot, int fd_raw, uint64_t offset, size_t len, char* buf,
                          bool verify) const {
  const std::string path = ChunkPath(slot.key, slot.gen);
  if (!verify) {
    Status st = PreadExact(fd_raw, buf, len, kHeaderSize + offset);
    if (!st.ok()) log::Warning("chunk cache: {}: {}", path, st.message());
    return st.ok();
  }
  // First read in this process: hash the whole payload, copying the range
  // asked for on the way, with no allocation.
  char raw[kHeaderSize];
  Header h;
  if (!PreadExact(fd_raw, raw, kHeaderSize, 0).ok() || !DecodeHeader(raw, &h) ||
      h.len != slot.len || h.index != slot.key.index || h.id_hash != id_hash_[slot.key.shard]) {
    log::Warning("chunk cache: {}: header damaged since the cache was opened", path);
    return false;
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  char piece[32 << 10];
  for (uint64_t pos = 0; pos < slot.len;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(piece), slot.len - pos));
    Status st = PreadExact(fd_raw, piece, n, kHeaderSize + pos);
    if (!st.ok()) {
      log::Warning("chunk cache: {}: {}", path, st.message());
      return false;
    }
    XXH3_64bits_update(&state, piece, n);
    uint64_t lo = std::max(pos, offset);
    uint64_t hi = std::min<uint64_t>(pos + n, offset + len);
    if (lo < hi) std::memcpy(buf + (lo - offset), piece + (lo - pos), hi - lo);
    pos += n;
  }
  uint64_t got = XXH3_64bits_digest(&state);
  if (got != h.xxh3) {
    log::Warning("chunk cache: {}: payload XXH3 {:016x}, header says {:016x}; dropped", path, got,
                 h.xxh3);
    return false;
  }
  return true;
}

bool ChunkCache::Read(ChunkKey key, uint64_t offset, size_t len, char* buf, bool reference) {
  uint64_t clen = ChunkLength(key);
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clen == 0 || offset > clen || len > clen - offset ? map_.end() : map_.find(key);
    if (it == map_.end()) {
      ++stats_.misses;
      return false;
    }
    slot = it->second;  // The pin: the payload outlives an eviction meanwhile.
    if (reference && slot->freq < 3) ++slot->freq;
    ++stats_.hits;
  }
  if (options_.dir.empty()) {
    std::memcpy(buf, slot->data.get() + offset, len);
    return true;
  }
  bool verify = !slot->verified.load(std::memory_order_acquire);
  std::shared_ptr<const UniqueFd> file = ChunkFile(slot);
  if (file && ReadDisk(*slot, file->get(), offset, len, buf, verify)) {
    if (verify) slot->verified.store(true, std::memory_order_release);
    return true;
  }
  std::vector<std::shared_ptr<Slot>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.hits;
    ++stats_.misses;
    ++stats_.corrupt_dropped;
    auto it = map_.find(key);
    if (it != map_.end() && it->second == slot) RemoveLocked(slot.get(), &dead);
  }
  return false;
}

bool ChunkCache::Contains(ChunkKey key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

void ChunkCache::Clear() {
  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.reserve(map_.size());
    for (auto& entry : map_) {
      entry.second->doomed = true;
      dead.push_back(std::move(entry.second));
    }
    map_.clear();
    small_.clear();
    main_.clear();
    small_bytes_ = main_bytes_ = 0;
    ghost_.clear();
    ghost_index_.clear();
    for (Foreign& f : foreign_) dead_foreign.push_back(std::move(f.name));
    foreign_.clear();
    stats_.foreign_bytes = 0;
    std::fill(stats_.shard_resident_bytes.begin(), stats_.shard_resident_bytes.end(), 0);
  }
  UnlinkAll(dead_foreign);
}

ChunkCacheStats ChunkCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ChunkCacheStats s = stats_;
  s.resident_bytes = small_bytes_ + main_bytes_ + stats_.foreign_bytes;
  s.resident_chunks = map_.size();
  s.small_chunks = small_.size();
  s.main_chunks = main_.size();
  s.ghost_keys = ghost_.size();
  s.foreign_chunks = foreign_.size();
  return s;
}

}  // namespace shardfs::mount
