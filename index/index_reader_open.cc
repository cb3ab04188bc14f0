// IndexReader::Open: the one place that knows both readers (a directory's
// and a manifest's), apart from index_reader.cc so that the interface and
// its implementations do not include each other.
#include <memory>
#include <string>

#include "index/db_reader.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/union_reader.h"

namespace shardfs::index {

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       const ReaderOptions& options) {
  std::unique_ptr<IndexReader> r;
  if (IsManifestFile(path)) {
    SHARDFS_ASSIGN_OR_RETURN(r, UnionReader::Open(path, options));
  } else {
    SHARDFS_ASSIGN_OR_RETURN(r, DbReader::Open(path, options));
  }
  return r;
}

}  // namespace shardfs::index
