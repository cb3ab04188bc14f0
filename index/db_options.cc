#include "index/db_options.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "index/file_reads.h"

namespace shardfs::index {
namespace {

// Discards RocksDB's informational log: an index may sit on a read-only
// filesystem, and a mount must not write next to it.
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

rocksdb::BlockBasedTableOptions TableOptions(bool filter = true) {
  rocksdb::BlockBasedTableOptions t;
  if (filter) t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.whole_key_filtering = true;
  t.block_size = 4096;
  // Index and filter in 4 KiB partitions under a small top-level index: a
  // mount opening a table reads only the top level (a few KiB per million
  // entries), not the whole index and filter (~2.5 MB per million), so its
  // start does not grow with the dataset; a lookup reads the one partition
  // it needs. Readers of indexes written before keep working: the layout is
  // recorded in each table.
  t.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  t.partition_filters = filter;
  t.metadata_block_size = 4096;
  return t;
}

// The Env read-only databases open with: CountingEnv's files and clock, and
// no background threads. RocksDB sizes the default Env's process-wide thread
// pools at every open (IncBackgroundThreadsIfNeeded), and a pool thread
// starting holds its pool's mutex for a moment; a fork() in that moment
// (a DataLoader worker forked while another thread opens an index) copies
// the mutex locked, and the child's first open waits on it for ever. A
// read-only database never flushes or compacts: with no pool threads, no
// thread of RocksDB runs at all, and a fork finds none mid-way.
class NoBackgroundEnv : public rocksdb::EnvWrapper {
 public:
  explicit NoBackgroundEnv(rocksdb::Env* target) : rocksdb::EnvWrapper(target) {}
  static const char* kClassName() { return "ShardfsNoBackgroundEnv"; }
  const char* Name() const override { return kClassName(); }
  void SetBackgroundThreads(int, Priority) override {}
  void IncBackgroundThreadsIfNeeded(int, Priority) override {}
};

// Never destroyed, as CountingEnv.
rocksdb::Env* ReaderEnv() {
  static rocksdb::Env* env = new NoBackgroundEnv(CountingEnv());
  return env;
}

rocksdb::CompressionType BestCompression() {
  auto supported = rocksdb::GetSupportedCompressions();
  bool lz4 =
      std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end();
  return lz4 ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
}

}  // namespace

rocksdb::Options WriterDbOptions(bool filter) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.error_if_exists = true;
  o.compression = BestCompression();
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(TableOptions(filter)));
  o.info_log = std::make_shared<NullLogger>();
  o.max_background_jobs = 1;
  return o;
}

rocksdb::Status OpenReadOnlyDb(const rocksdb::Options& options, const std::string& path,
                               std::unique_ptr<rocksdb::DB>* db) {
  // The overload with column families opens the plain read-only database
  // (DBImplReadOnly), which registers no periodic task.
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(options)}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(options), path, families, &handles, &raw);
  // The database keeps its default family without the handle.
  for (rocksdb::ColumnFamilyHandle* h : handles) delete h;
  if (s.ok()) db->reset(raw);
  return s;
}

rocksdb::Options ReaderDbOptions(size_t block_cache_bytes) {
  rocksdb::Options o;
  rocksdb::BlockBasedTableOptions t = TableOptions();
  // Few cache shards: with RocksDB's default of 64, a shard of a 16 MiB
  // cache holds 256 KiB and larger blocks would not stay.
  t.block_cache = rocksdb::NewLRUCache(block_cache_bytes, /*num_shard_bits=*/2);
  // The index and filter blocks of the table live with the table reader,
  // loaded once at open: an index of 1M entries has a ~1.3 MB filter block,
  // which a block cache would evict and re-read on every lookup (seen at
  // 1M files: 94% of a core in LZ4 and copies). About 2.5 MB per million
  // entries, outside the block cache.
  t.cache_index_and_filter_blocks = false;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  o.info_log = std::make_shared<NullLogger>();
  o.env = ReaderEnv();  // Reads counted for stats (file_reads.h); no threads.
  o.create_if_missing = false;
  o.max_open_files = -1;
  o.max_file_opening_threads = 1;
  o.skip_stats_update_on_db_open = true;
  // Tree walks read neighbouring keys (siblings are adjacent): let the
  // kernel read ahead in the table files instead of one block per miss.
  o.advise_random_on_open = false;
  return o;
}

size_t AutoBlockCacheBytes(const std::string& dir, size_t cap) {
  uint64_t tables = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".sst") continue;
    std::error_code size_ec;
    const uintmax_t size = e.file_size(size_ec);
    if (!size_ec) tables += size;
  }
  const uint64_t want = std::max<uint64_t>(tables * kAutoCacheExpansion, kMinAutoBlockCache);
  return static_cast<size_t>(std::min<uint64_t>(want, std::max(cap, kMinAutoBlockCache)));
}

size_t AutoBlockCacheCap() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kMinAutoBlockCache;
  const uint64_t memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return static_cast<size_t>(std::max<uint64_t>(memory / 16, kMinAutoBlockCache));
}

}  // namespace shardfs::index
