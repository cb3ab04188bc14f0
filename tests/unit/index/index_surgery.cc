#include "tests/unit/index/index_surgery.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <memory>

namespace shardfs::testing {

std::string EditIndex(const std::string& index_path, const std::vector<KeyEdit>& edits) {
  rocksdb::Options options;
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, index_path, &raw);
  if (!s.ok()) return "open " + index_path + ": " + s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteBatch batch;
  for (const KeyEdit& e : edits) {
    s = e.value ? batch.Put(e.key, *e.value) : batch.Delete(e.key);
    if (!s.ok()) return "batch: " + s.ToString();
  }
  s = db->Write(rocksdb::WriteOptions(), &batch);
  // A table file rather than a log the read-only reader would replay: the
  // edit then looks like any index's content.
  if (s.ok()) s = db->Flush(rocksdb::FlushOptions());
  if (s.ok()) s = db->Close();
  return s.ok() ? "" : index_path + ": " + s.ToString();
}

}  // namespace shardfs::testing
