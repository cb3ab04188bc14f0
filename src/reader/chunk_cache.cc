#include "src/reader/chunk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack.
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/coding.h"
#include "base/io.h"
#include "base/log.h"
#include "src/reader/cache_dir.h"

namespace shardfs::reader {

namespace {

constexpr char kMagic[8] = {'S', 'H', 'F', 'S', 'C', 'H', 'N', 'K'};
constexpr uint64_t kMaxChunkSize = uint64_t{1} << 30;
constexpr uint64_t kBlock = 4096;
constexpr size_t kHeaderSumOffset = 56;

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
  std::unique_ptr<char[]> data;          // Memory mode; immutable once mapped.
  std::atomic<bool> verified{false};     // Disk mode: payload checked in this process.
  bool doomed = false;                   // Set under mu_ when unmapped for good.
  std::shared_ptr<const UniqueFd> file;  // Guarded by mu_: the chunk file, while in open_files_.
  Queue queue = Queue::kSmall;           // Guarded by mu_.
  uint8_t freq = 0;                      // Guarded by mu_; 0..3.
  std::list<Slot*>::iterator pos;        // Guarded by mu_; in small_ or main_.
};

ChunkCache::ChunkCache(ChunkCacheOptions options, std::vector<ChunkShard> shards)
    : options_(std::move(options)), shards_(std::move(shards)) {
  id_hash_.reserve(shards_.size());
  for (const ChunkShard& s : shards_) {
    id_hash_.push_back(
        XXH3_64bits_withSeed(s.identity.data(), s.identity.size(), options_.chunk_size));
  }
  small_target_ = options_.capacity / 10;
  ghost_limit_ =
      std::max<uint64_t>(1, (options_.capacity - small_target_) / Charge(options_.chunk_size));
  stats_.capacity = options_.capacity;
  stats_.shard_resident_bytes.assign(shards_.size(), 0);
}

ChunkCache::~ChunkCache() = default;

Result<std::unique_ptr<ChunkCache>> ChunkCache::Open(ChunkCacheOptions options,
                                                     std::vector<ChunkShard> shards) {
  if (options.chunk_size == 0 || options.chunk_size > kMaxChunkSize) {
    return Status::InvalidArgument(fmt::format("chunk cache: chunk size {} bytes, expected 1 to {}",
                                               options.chunk_size, kMaxChunkSize));
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
  return FormatChunkName(id_hash_[key.shard], key.index, gen);
}

std::string ChunkCache::ChunkPath(ChunkKey key, uint64_t gen) const {
  return fmt::format("{}/{}", chunk_dir_, ChunkName(key, gen));
}

Status ChunkCache::OpenDir() {
  SHARDFS_ASSIGN_OR_RETURN(CacheDir d, OpenCacheDir(options_.dir, kChunkDir, options_.lock_wait));
  chunk_dir_ = std::move(d.chunk_dir);
  dir_fd_ = std::move(d.dir_fd);
  lock_fd_ = std::move(d.lock_fd);
  return Status::Ok();
}

namespace {

// What the chunk subdirectory holds, sorted by ListChunkDir.
struct ChunkDirListing {
  struct Chunk {
    std::string name;
    ChunkKey key;
    uint64_t gen;
    uint32_t len;
    int64_t mtime_ns;
    bool foreign;  // Of a shard this index does not have.
  };
  std::vector<Chunk> found;
  std::vector<std::string> bad;     // Shardfs's names, but not intact chunks: to delete.
  std::vector<std::string> others;  // Files shardfs cannot prove it wrote: left alone.
  uint64_t max_gen = 0;             // The largest generation in any name.
};

// Sorts entry `name` of the chunk subdirectory `dir_fd` into `out`.
// `shard_of` maps a shard's id hash to its number.
void ListChunkDirEntry(const ChunkCache& cache, int dir_fd, const char* c_name,
                       const std::unordered_map<uint64_t, uint32_t>& shard_of,
                       ChunkDirListing* out) {
  std::string_view name = c_name;
  // A file shardfs wrote has one of its names and is a regular file of
  // this user; in a directory of this user that no one else may write to,
  // nobody else can have put it there.
  struct stat st;
  const bool mine = ::fstatat(dir_fd, c_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
  uint64_t id_hash, index, gen;
  const bool chunk_name = ParseChunkName(name, &id_hash, &index, &gen);
  const bool tmp_name = !chunk_name && ParseTmpName(name, &gen);
  // New files get higher numbers than any name here, so no Insert is
  // stopped by, or renames over, a file it may not delete.
  if (chunk_name || tmp_name) out->max_gen = std::max(out->max_gen, gen);
  if (!mine || (!chunk_name && !tmp_name)) {
    out->others.emplace_back(name);
    return;
  }
  if (!chunk_name) {
    out->bad.emplace_back(name);  // An Insert cut short by a crash.
    return;
  }
  UniqueFd fd(::openat(dir_fd, c_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  char raw[ChunkCache::kHeaderSize];
  Header h;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      !PreadExact(fd.get(), raw, ChunkCache::kHeaderSize, 0).ok() || !DecodeHeader(raw, &h) ||
      h.id_hash != id_hash || h.index != index || h.len == 0 ||
      static_cast<uint64_t>(st.st_size) != ChunkCache::kHeaderSize + h.len) {
    out->bad.emplace_back(name);
    return;
  }
  ChunkDirListing::Chunk f{std::string(name),
                           ChunkKey{0, index},
                           gen,
                           h.len,
                           int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                           true};
  if (auto it = shard_of.find(id_hash); it != shard_of.end()) {
    f.key.shard = it->second;
    f.foreign = false;
    if (cache.ChunkLength(f.key) != h.len) {
      out->bad.push_back(std::move(f.name));  // Not a chunk of this shard at this size.
      return;
    }
  }
  out->found.push_back(std::move(f));
}

// Lists the chunk subdirectory `dir_fd` (shown as `dir`) into `out`.
Status ListChunkDir(const ChunkCache& cache, int dir_fd, const std::string& dir,
                    const std::unordered_map<uint64_t, uint32_t>& shard_of, ChunkDirListing* out) {
  int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (d == nullptr) {
    int err = errno;
    if (list_fd >= 0) ::close(list_fd);
    return Status::FromErrno(err, fmt::format("cache_dir {}", dir));
  }
  while (true) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || name == kCacheMarker || name == kCacheLock) continue;
    ListChunkDirEntry(cache, dir_fd, e->d_name, shard_of, out);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno(err, fmt::format("cache_dir {}: listing", dir));
  return Status::Ok();
}

}  // namespace

Status ChunkCache::Scan() {
  const std::string& dir = chunk_dir_;
  std::unordered_map<uint64_t, uint32_t> shard_of;
  for (uint32_t i = 0; i < id_hash_.size(); ++i) shard_of.emplace(id_hash_[i], i);
  ChunkDirListing listing;
  SHARDFS_RETURN_IF_ERROR(ListChunkDir(*this, dir_fd_.get(), dir, shard_of, &listing));
  for (const std::string& name : listing.bad) {
    log::Debug("chunk cache: {}/{}: not an intact chunk, deleted", dir, name);
  }
  UnlinkAll(listing.bad);
  const std::vector<std::string>& others = listing.others;
  if (!others.empty()) {
    log::Warning("chunk cache: {}: {} file(s) not written by shardfs left alone (the first: {})",
                 dir, others.size(), others.front());
  }

  std::vector<ChunkDirListing::Chunk>& found = listing.found;
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  std::vector<std::string> duplicates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_gen_ = listing.max_gen + 1;
    stats_.other_files = others.size();
    for (ChunkDirListing::Chunk& f : found) {
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

Result<uint64_t> ChunkCache::WriteChunk(ChunkKey key, const char* data, size_t len, uint64_t gen) {
  const std::string tmp = FormatTmpName(gen);
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

bool ChunkCache::Locate(ChunkKey key, uint64_t offset, size_t len, bool reference,
                        std::shared_ptr<const UniqueFd>* file, uint64_t* file_pos) {
  if (options_.dir.empty()) return false;
  const uint64_t clen = ChunkLength(key);
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clen == 0 || offset > clen || len > clen - offset ? map_.end() : map_.find(key);
    if (it == map_.end()) return false;
    slot = it->second;
  }
  if (!slot->verified.load(std::memory_order_acquire)) return false;
  std::shared_ptr<const UniqueFd> f = ChunkFile(slot);
  if (!f) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reference && slot->freq < 3) ++slot->freq;
    ++stats_.hits;
  }
  *file = std::move(f);
  *file_pos = kHeaderSize + offset;
  return true;
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

}  // namespace shardfs::reader
