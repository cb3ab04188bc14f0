#include "src/reader/chunk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "base/io.h"
#include "base/log.h"
#include "src/reader/cache_dir.h"
#include "src/reader/chunk_file.h"

namespace shardfs::reader {

namespace {

constexpr uint64_t kMaxChunkSize = uint64_t{1} << 30;
constexpr uint64_t kBlock = 4096;

}  // namespace

struct ChunkCache::Slot {
  Slot(const ChunkCache* c, ChunkKey k, uint32_t l, uint64_t ch)
      : cache(c), key(k), len(l), charge(ch) {}
  // A doomed disk slot deletes its file once no reader holds it, if the
  // name still holds that file (not a copy stored since, by anyone).
  ~Slot() {
    if (doomed && cache->dir_fd_.valid()) cache->UnlinkIfSame(cache->ChunkName(key), ino);
  }
  const ChunkCache* const cache;
  const ChunkKey key;
  const uint32_t len;
  const uint64_t charge;
  uint64_t ino = 0;                      // Disk mode; guarded by mu_ once mapped.
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
    shard_of_.emplace(id_hash_.back(), static_cast<uint32_t>(id_hash_.size() - 1));
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
    cache->TrimDir();
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

std::string ChunkCache::ChunkName(ChunkKey key) const {
  return FormatChunkName(id_hash_[key.shard], key.index);
}

std::string ChunkCache::ChunkPath(ChunkKey key) const {
  return fmt::format("{}/{}", chunk_dir_, ChunkName(key));
}

void ChunkCache::UnlinkIfSame(const std::string& name, uint64_t ino) const {
  // Between the look and the unlink another process may store a new copy:
  // then that copy is deleted, which costs a fetch, never a wrong byte.
  struct stat st;
  if (::fstatat(dir_fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      static_cast<uint64_t>(st.st_ino) == ino) {
    ::unlinkat(dir_fd_.get(), name.c_str(), 0);
  }
}

Status ChunkCache::OpenDir() {
  SHARDFS_ASSIGN_OR_RETURN(CacheDir d, OpenSharedCacheDir(options_.dir, kChunkDir));
  chunk_dir_ = std::move(d.chunk_dir);
  dir_fd_ = std::move(d.dir_fd);
  lock_fd_ = std::move(d.lock_fd);
  return Status::Ok();
}

Status ChunkCache::Scan() {
  const std::string& dir = chunk_dir_;
  ChunkDirListing listing;
  SHARDFS_RETURN_IF_ERROR(ListChunkDir(dir_fd_.get(), dir, /*check_headers=*/true, &listing));
  std::vector<ChunkDirListing::Chunk>& found = listing.found;
  for (ChunkDirListing::Chunk& f : found) {
    auto it = shard_of_.find(f.id_hash);
    if (it != shard_of_.end() && ChunkLength(ChunkKey{it->second, f.index}) != f.len) {
      listing.bad.push_back(std::move(f.name));  // Not a chunk of this shard at this size.
    }
  }
  std::erase_if(found, [](const ChunkDirListing::Chunk& f) { return f.name.empty(); });
  for (const std::string& name : listing.bad) {
    log::Debug("chunk cache: {}/{}: not an intact chunk, deleted", dir, name);
  }
  UnlinkAll(listing.bad);
  const std::vector<std::string>& others = listing.others;
  if (!others.empty()) {
    log::Warning("chunk cache: {}: {} file(s) not written by shardfs left alone (the first: {})",
                 dir, others.size(), others.front());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.other_files = others.size();
    for (ChunkDirListing::Chunk& f : found) {
      auto it = shard_of_.find(f.id_hash);
      if (it == shard_of_.end()) {
        uint64_t charge = Charge(f.len);
        foreign_.push_back({std::move(f.name), charge});
        stats_.foreign_bytes += charge;
        continue;
      }
      auto slot = std::make_shared<Slot>(this, ChunkKey{it->second, f.index}, f.len, Charge(f.len));
      slot->ino = f.ino;
      // Oldest first at main's head, so the oldest ends up at its tail.
      AddLocked(std::move(slot), Queue::kMain);
      ++stats_.reused_at_open;
    }
    EvictToFitLocked(0, &dead, &dead_foreign);
  }
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

Result<uint64_t> ChunkCache::WriteChunk(ChunkKey key, const char* data, size_t len) {
  // Numbered per process: two caches of one process may share a directory.
  static std::atomic<uint64_t> tmp_seq{0};
  const std::string tmp = FormatOwnedTmpName(ThisProcess(), tmp_seq.fetch_add(1) + 1);
  UniqueFd fd(::openat(dir_fd_.get(), tmp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    return Status::FromErrno(errno, fmt::format("chunk cache: {}/{}", chunk_dir_, tmp));
  }
  char raw[kHeaderSize];
  EncodeChunkHeader(
      {static_cast<uint32_t>(len), id_hash_[key.shard], key.index, XXH3_64bits(data, len)}, raw);
  Status st = Status::Ok();
  struct stat fst;
  if (!WriteFully(fd.get(), raw, kHeaderSize) || !WriteFully(fd.get(), data, len)) {
    st = Status::FromErrno(errno, "write");
  }
  if (st.ok() && ::fstat(fd.get(), &fst) != 0) st = Status::FromErrno(errno, "fstat");
  if (st.ok() && ::close(fd.release()) != 0) st = Status::FromErrno(errno, "close");
  const std::string name = ChunkName(key);
  // The rename is what makes the chunk count, in every process at once:
  // until then it is a temp file. It replaces a copy stored meanwhile by
  // another process (the same bytes) or a damaged one.
  if (st.ok() && ::renameat(dir_fd_.get(), tmp.c_str(), dir_fd_.get(), name.c_str()) != 0) {
    st = Status::FromErrno(errno, fmt::format("rename to {}", name));
  }
  if (!st.ok()) {
    ::unlinkat(dir_fd_.get(), tmp.c_str(), 0);
    return st.WithContext(fmt::format("chunk cache: {}/{}", chunk_dir_, tmp));
  }
  return static_cast<uint64_t>(fst.st_ino);
}

void ChunkCache::AdmitLocked(std::shared_ptr<Slot> slot, std::vector<std::shared_ptr<Slot>>* dead,
                             std::vector<std::string>* dead_foreign) {
  Queue q = Queue::kSmall;
  if (auto g = ghost_index_.find(slot->key); g != ghost_index_.end()) {
    ghost_.erase(g->second);
    ghost_index_.erase(g);
    ++stats_.ghost_hits;
    q = Queue::kMain;
  }
  // Room first, as in the paper: the newcomer is never its own victim.
  EvictToFitLocked(slot->charge, dead, dead_foreign);
  AddLocked(std::move(slot), q);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key) != 0) return Status::Ok();
  }
  auto slot = std::make_shared<Slot>(this, key, static_cast<uint32_t>(len), Charge(len));
  if (options_.dir.empty()) {
    slot->data.reset(new char[len]);
    std::memcpy(slot->data.get(), data, len);
  } else {
    Result<uint64_t> ino = WriteChunk(key, data, len);
    if (!ino.ok()) return ino.status();
    slot->ino = *ino;
  }
  slot->verified.store(true, std::memory_order_relaxed);  // From the caller's bytes.

  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  bool trim = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(key); it != map_.end()) {
      // Another thread stored it meanwhile, and the name now holds this
      // copy (the same bytes): the resident slot owns it.
      if (!options_.dir.empty()) it->second->ino = slot->ino;
    } else {
      since_trim_ += slot->charge;
      AdmitLocked(std::move(slot), &dead, &dead_foreign);
      ++stats_.inserts;
      trim = !options_.dir.empty() && since_trim_ >= options_.capacity / 16;
      if (trim) since_trim_ = 0;
    }
  }
  // Outside the lock: dropping the last pins of dead slots deletes their files.
  UnlinkAll(dead_foreign);
  if (trim) TrimDir();
  return Status::Ok();
}

void ChunkCache::KeepOpenLocked(const std::shared_ptr<Slot>& slot,
                                std::shared_ptr<const UniqueFd> file) {
  slot->file = std::move(file);
  open_files_.push_back(slot);
  while (open_files_.size() > kOpenChunkFiles) {
    // Closed once the readers holding it let go.
    if (std::shared_ptr<Slot> old = open_files_.front().lock()) old->file.reset();
    open_files_.pop_front();
  }
}

std::shared_ptr<const UniqueFd> ChunkCache::ChunkFile(const std::shared_ptr<Slot>& slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot->file) return slot->file;
  }
  auto file = std::make_shared<const UniqueFd>(
      ::openat(dir_fd_.get(), ChunkName(slot->key).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st;
  if (!file->valid() || ::fstat(file->get(), &st) != 0) {
    // ENOENT: another process evicted it; a miss like any other.
    if (errno != ENOENT)
      log::Warning("chunk cache: {}: {}", ChunkPath(slot->key), std::strerror(errno));
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (slot->file) return slot->file;  // Another reader opened it meanwhile.
  if (static_cast<uint64_t>(st.st_ino) != slot->ino) {
    // Another process stored the chunk anew since this one looked: its
    // payload is checked again on this first read.
    slot->ino = static_cast<uint64_t>(st.st_ino);
    slot->verified.store(false, std::memory_order_release);
  }
  if (slot->doomed) return file;  // Read once, not kept.
  KeepOpenLocked(slot, file);
  return file;
}

bool ChunkCache::ReadDisk(const Slot& slot, int fd_raw, uint64_t offset, size_t len, char* buf,
                          bool verify) const {
  const std::string path = ChunkPath(slot.key);
  if (!verify) {
    Status st = PreadExact(fd_raw, buf, len, kHeaderSize + offset);
    if (!st.ok()) log::Warning("chunk cache: {}: {}", path, st.message());
    return st.ok();
  }
  // First read in this process: the header and the whole payload checked.
  std::string why;
  if (!ReadCheckedChunk(fd_raw, id_hash_[slot.key.shard], slot.key.index, slot.len, offset, len,
                        buf, &why)) {
    log::Warning("chunk cache: {}: {}; dropped", path, why);
    return false;
  }
  // In use: the directory's trim deletes the chunks least recently used.
  ::futimens(fd_raw, nullptr);
  return true;
}

std::shared_ptr<ChunkCache::Slot> ChunkCache::Lookup(ChunkKey key) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;  // The pin: outlives an eviction meanwhile.
    }
    if (attempt == 1 || options_.dir.empty() || !Adopt(key)) break;
  }
  return nullptr;
}

bool ChunkCache::Adopt(ChunkKey key) {
  const uint64_t clen = ChunkLength(key);
  auto file = std::make_shared<const UniqueFd>(::openat(
      dir_fd_.get(), ChunkName(key).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!file->valid()) return false;
  struct stat st;
  ChunkHeader h;
  // A damaged one is a miss: the fetch that follows renames its copy over it.
  if (::fstat(file->get(), &st) != 0 || st.st_uid != ::geteuid() ||
      !ReadChunkHeader(file->get(), st, id_hash_[key.shard], key.index, &h) || h.len != clen) {
    return false;
  }
  auto slot = std::make_shared<Slot>(this, key, static_cast<uint32_t>(clen), Charge(clen));
  slot->ino = static_cast<uint64_t>(st.st_ino);
  std::vector<std::shared_ptr<Slot>> dead;
  std::vector<std::string> dead_foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key) != 0) return true;
    KeepOpenLocked(slot, std::move(file));
    AdmitLocked(std::move(slot), &dead, &dead_foreign);
    ++stats_.adopted;
  }
  UnlinkAll(dead_foreign);
  return true;
}

bool ChunkCache::Read(ChunkKey key, uint64_t offset, size_t len, char* buf, bool reference) {
  uint64_t clen = ChunkLength(key);
  std::shared_ptr<Slot> slot;
  if (clen != 0 && offset <= clen && len <= clen - offset) slot = Lookup(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!slot) {
      ++stats_.misses;
      return false;
    }
    if (reference && slot->freq < 3) ++slot->freq;
    ++stats_.hits;
  }
  if (options_.dir.empty()) {
    std::memcpy(buf, slot->data.get() + offset, len);
    return true;
  }
  std::shared_ptr<const UniqueFd> file = ChunkFile(slot);
  bool verify = !slot->verified.load(std::memory_order_acquire);
  if (file && ReadDisk(*slot, file->get(), offset, len, buf, verify)) {
    if (verify) slot->verified.store(true, std::memory_order_release);
    return true;
  }
  std::vector<std::shared_ptr<Slot>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.hits;
    ++stats_.misses;
    if (file) ++stats_.corrupt_dropped;  // Else gone: another process evicted it.
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
  // Opened anew (another process's copy): Read checks it first.
  if (!f || !slot->verified.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reference && slot->freq < 3) ++slot->freq;
    ++stats_.hits;
  }
  *file = std::move(f);
  *file_pos = kHeaderSize + offset;
  return true;
}

ChunkCache::Claimed ChunkCache::Claim(ChunkKey key, const std::atomic<bool>* cancel) {
  if (options_.dir.empty()) return Claimed::kMine;
  const std::string name = FormatClaimName(id_hash_[key.shard], key.index);
  const auto deadline = std::chrono::steady_clock::now() + options_.claim_wait;
  for (bool waited = false;; waited = true) {
    if (Lookup(key)) return Claimed::kStored;
    const ClaimFile claim = TryClaimFile(dir_fd_.get(), name);
    if (claim == ClaimFile::kFailed) return Claimed::kUnclaimed;
    if (claim == ClaimFile::kMine) {
      // Its holder may have stored it and let go between the two looks.
      if (!Lookup(key)) return Claimed::kMine;
      EndClaim(key);
      return Claimed::kStored;
    }
    if (!waited) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.claim_waits;
    }
    if (std::chrono::steady_clock::now() >= deadline || (cancel != nullptr && cancel->load())) {
      return Claimed::kUnclaimed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChunkCache::EndClaim(ChunkKey key) {
  if (options_.dir.empty()) return;
  ::unlinkat(dir_fd_.get(), FormatClaimName(id_hash_[key.shard], key.index).c_str(), 0);
}

void ChunkCache::TrimDir() {
  if (options_.dir.empty() || trimming_.exchange(true)) return;
  if (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    trimming_ = false;  // Another process is at it.
    return;
  }
  ChunkDirListing listing;
  (void)ListChunkDir(dir_fd_.get(), chunk_dir_, /*check_headers=*/false, &listing);
  UnlinkAll(listing.bad);  // Leftovers of processes that are gone.
  std::vector<ChunkDirListing::Chunk>& chunks = listing.found;
  uint64_t total = 0;
  for (const auto& c : chunks) total += (c.file_bytes + kBlock - 1) / kBlock * kBlock;
  std::vector<Trimmed> gone;
  if (total > options_.capacity) {
    std::sort(chunks.begin(), chunks.end(),
              [](const auto& a, const auto& b) { return a.mtime_ns < b.mtime_ns; });
    const uint64_t target = options_.capacity - options_.capacity / 16;
    for (const ChunkDirListing::Chunk& c : chunks) {
      if (total <= target) break;
      // A copy stored under the name since the listing may go too: a fetch
      // more, never a wrong byte.
      if (::unlinkat(dir_fd_.get(), c.name.c_str(), 0) == 0) {
        gone.push_back({c.id_hash, c.index, c.ino});
      }
      total -= (c.file_bytes + kBlock - 1) / kBlock * kBlock;
    }
  }
  ::flock(lock_fd_.get(), LOCK_UN);
  trimming_ = false;
  ForgetTrimmed(gone);
}

void ChunkCache::ForgetTrimmed(const std::vector<Trimmed>& gone) {
  std::vector<std::shared_ptr<Slot>> dead;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.trimmed += gone.size();
  for (const Trimmed& t : gone) {
    auto shard = shard_of_.find(t.id_hash);
    if (shard == shard_of_.end()) continue;  // Foreign: its charge goes with the next trim.
    auto it = map_.find(ChunkKey{shard->second, t.index});
    if (it != map_.end() && it->second->ino == t.ino) RemoveLocked(it->second.get(), &dead);
  }
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
