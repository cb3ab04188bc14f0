#include "index/file_reads.h"

#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

namespace shardfs::index {
namespace {

std::atomic<uint64_t> g_reads{0};

void Add(uint64_t n) { g_reads.fetch_add(n, std::memory_order_relaxed); }

class CountingFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  using FSRandomAccessFileOwnerWrapper::FSRandomAccessFileOwnerWrapper;

  rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& options,
                         rocksdb::Slice* result, char* scratch,
                         rocksdb::IODebugContext* dbg) const override {
    Add(1);
    return target()->Read(offset, n, options, result, scratch, dbg);
  }
  rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    Add(num_reqs);
    return target()->MultiRead(reqs, num_reqs, options, dbg);
  }
  rocksdb::IOStatus ReadAsync(rocksdb::FSReadRequest& req, const rocksdb::IOOptions& opts,
                              std::function<void(const rocksdb::FSReadRequest&, void*)> cb,
                              void* cb_arg, void** io_handle, rocksdb::IOHandleDeleter* del_fn,
                              rocksdb::IODebugContext* dbg) override {
    Add(1);
    return target()->ReadAsync(req, opts, cb, cb_arg, io_handle, del_fn, dbg);
  }
};

class CountingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  CountingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  const char* Name() const override { return "ShardfsCountingFileSystem"; }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSRandomAccessFile> file;
    rocksdb::IOStatus s = target()->NewRandomAccessFile(f, opts, &file, dbg);
    if (s.ok()) *r = std::make_unique<CountingFile>(std::move(file));
    return s;
  }
};

}  // namespace

rocksdb::Env* CountingEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<CountingFileSystem>()).release();
  return env;
}

uint64_t IndexFileReads() { return g_reads.load(std::memory_order_relaxed); }

}  // namespace shardfs::index
