#include "src/reader/decoded_cache.h"

#include <algorithm>
#include <condition_variable>
#include <utility>
#include <vector>

namespace shardfs::reader {
namespace {

constexpr uint8_t kMaxFreq = 3;
constexpr size_t kMinGhostKeys = 64;

}  // namespace

struct DecodedCache::Entry {
  DecodedKey key;
  Block block;
  uint8_t freq = 0;
  bool in_main = false;
};

struct DecodedCache::Inflight {
  uint64_t size = 0;  // The min_size of the Get that decodes: what it will at least bring.
  std::condition_variable cv;
  bool done = false;
  Status status;
  Block block;
};

DecodedCache::DecodedCache(uint64_t capacity_bytes)
    : capacity_(capacity_bytes), small_target_(capacity_bytes / 10) {
  stats_.capacity = capacity_bytes;
}

DecodedCache::~DecodedCache() = default;

Result<DecodedCache::Block> DecodedCache::Get(DecodedKey key, uint64_t min_size,
                                              const Decoder& decode,
                                              std::chrono::milliseconds wait) {
  std::shared_ptr<Inflight> mine;
  {
    std::unique_lock lock(mu_);
    bool too_short = false;  // A block or a decode of this key was found short of min_size.
    if (auto it = map_.find(key); it != map_.end()) {
      Entry& e = *it->second;
      if (e.block->size() >= min_size) {
        e.freq = static_cast<uint8_t>(std::min<int>(e.freq + 1, kMaxFreq));
        ++stats_.hits;
        return e.block;
      }
      too_short = true;
    }
    if (auto it = inflight_.find(key); it == inflight_.end()) {
      mine = std::make_shared<Inflight>();
      mine->size = min_size;
      inflight_.emplace(key, mine);
    } else if (it->second->size < min_size) {
      // That decode is for less than this caller needs: waiting for it
      // would only delay its own.
      too_short = true;
    } else {
      std::shared_ptr<Inflight> other = it->second;
      if (other->cv.wait_for(lock, wait, [&] { return other->done; })) {
        if (!other->status.ok()) {
          ++stats_.joined;
          return other->status;
        }
        if (other->block->size() >= min_size) {
          ++stats_.joined;
          return other->block;
        }
        too_short = true;
      } else {
        ++stats_.gave_up;
      }
    }
    if (too_short) ++stats_.too_short;
    ++stats_.decodes;
  }

  Result<std::string> made = decode();
  Block block;
  if (made.ok()) block = std::make_shared<const std::string>(std::move(made).value());

  std::lock_guard lock(mu_);
  if (block != nullptr) {
    stats_.decoded_bytes += block->size();
    InsertLocked(key, block);
  } else {
    ++stats_.errors;
  }
  if (mine != nullptr) {
    mine->done = true;
    if (block == nullptr) mine->status = made.status();
    mine->block = block;
    inflight_.erase(key);
    mine->cv.notify_all();
  }
  if (block == nullptr) return made.status();
  return block;
}

void DecodedCache::InsertLocked(DecodedKey key, Block block) {
  if (block->size() > capacity_) return;
  if (auto it = map_.find(key); it != map_.end()) {
    // A longer block replaces a prefix in its place; a block no longer than
    // the resident one (a racing decode) leaves it alone.
    Entry& e = *it->second;
    if (block->size() <= e.block->size()) return;
    (e.in_main ? main_bytes_ : small_bytes_) += block->size() - e.block->size();
    e.block = std::move(block);
    EvictLocked();
    return;
  }
  auto entry = std::make_shared<Entry>();
  entry->key = key;
  entry->block = std::move(block);
  if (ghost_.erase(key) > 0) {
    entry->in_main = true;
    main_.push_back(entry);
    main_bytes_ += entry->block->size();
  } else {
    small_.push_back(entry);
    small_bytes_ += entry->block->size();
  }
  map_.emplace(key, std::move(entry));
  EvictLocked();
}

void DecodedCache::EvictLocked() {
  while (small_bytes_ + main_bytes_ > capacity_) {
    if (!small_.empty() && (small_bytes_ > small_target_ || main_.empty())) {
      std::shared_ptr<Entry> e = std::move(small_.front());
      small_.pop_front();
      const uint64_t n = e->block->size();
      small_bytes_ -= n;
      if (e->freq > 0) {
        e->freq = 0;
        e->in_main = true;
        main_.push_back(std::move(e));
        main_bytes_ += n;
      } else {
        map_.erase(e->key);
        AddGhostLocked(e->key);
        ++stats_.evictions;
      }
    } else {
      std::shared_ptr<Entry> e = std::move(main_.front());
      main_.pop_front();
      if (e->freq > 0) {
        --e->freq;
        main_.push_back(std::move(e));
      } else {
        main_bytes_ -= e->block->size();
        map_.erase(e->key);
        ++stats_.evictions;
      }
    }
  }
}

void DecodedCache::AddGhostLocked(DecodedKey key) {
  if (!ghost_.insert(key).second) return;
  ghost_order_.push_back(key);
  const size_t limit = std::max(kMinGhostKeys, map_.size());
  while (ghost_order_.size() > limit) {
    ghost_.erase(ghost_order_.front());
    ghost_order_.pop_front();
  }
}

DecodedCacheStats DecodedCache::stats() const {
  std::lock_guard lock(mu_);
  DecodedCacheStats s = stats_;
  s.resident_bytes = small_bytes_ + main_bytes_;
  s.resident_blocks = map_.size();
  return s;
}

}  // namespace shardfs::reader
