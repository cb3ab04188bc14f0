// Writing an index bundle: one file that carries an index directory, so
// that one URL can name a whole index (an index is a RocksDB directory of
// several files). A bundle is a tar of the index directory's files: regular
// files with plain names, as `tar -C INDEX -cf index.tar .` writes them too
// (readers unpack it with their own tar reading, without libarchive).
// WriteIndexBundle writes one deterministically (`shardfs index bundle`).
#ifndef SHARDFS_SRC_ARCHIVE_INDEX_BUNDLE_H_
#define SHARDFS_SRC_ARCHIVE_INDEX_BUNDLE_H_

#include <string>

#include "base/status.h"

namespace shardfs::archive {

// Writes the regular files of index directory `index` into a new tar at
// `out` (refused if it exists): names sorted, no "./" prefix, mode 0644,
// owner 0:0, mtime 0, so that the same index gives the same bytes. Refuses
// a directory that is not a shardfs index (index::IsShardfsIndex) and one
// holding anything but regular files.
Status WriteIndexBundle(const std::string& index, const std::string& out);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_INDEX_BUNDLE_H_
