// Unpacking an index bundle: one file that carries an index directory, so
// that one URL can name a whole index (an index is a RocksDB directory of
// several files). `shardfs index bundle` writes one.
//
// A bundle is a tar of the index directory's files, as
// `tar -C INDEX -cf index.tar .` writes it: regular files with plain names,
// each with or without a leading "./", and the directory "./" itself, which
// is skipped. Nothing else is accepted: no subdirectory, no '/' or ".." in a
// name, no link, device, FIFO or sparse file, no name twice. The tar may be
// compressed with gzip or zstd. Read here with the project's own tar reading
// (ustar, GNU and pax headers: a pax or GNU long name, a pax size), zlib and
// libzstd: the read path (a mount, the Python package) never links libarchive.
#ifndef SHARDFS_SRC_INDEXREF_BUNDLE_UNPACK_H_
#define SHARDFS_SRC_INDEXREF_BUNDLE_UNPACK_H_

#include <cstdint>
#include <string>

#include "base/status.h"

namespace shardfs::indexref {

struct BundleLimits {
  // Bytes of all members together, unpacked (--max-index-size).
  uint64_t max_bytes = uint64_t{64} << 30;
  // Members; an index has a few files per 64 MiB table file.
  uint64_t max_members = 100'000;
};

// Unpacks the bundle read from `tar_fd` (from its current offset) into the
// directory `dir_fd`, which should be empty: each member created there with
// O_EXCL, mode 0600, and fsynced; then the directory is fsynced. Errors name
// `shown` (the bundle's URL or path) and the member: InvalidArgument for a
// member that is not a plain regular file (see the top), a name seen twice,
// an archive that is not a tar; IoError past a limit, naming the option
// that raises it; Corruption for a truncated or damaged archive. On error,
// files already written stay in `dir_fd` for the caller to remove.
Status UnpackIndexBundle(int tar_fd, int dir_fd, const std::string& shown,
                         const BundleLimits& limits);

// Removes the directory `name` under `parent_fd` and the files in it (an
// unpacked bundle has no subdirectory). Best effort.
void RemoveUnpacked(int parent_fd, const std::string& name);

}  // namespace shardfs::indexref

#endif  // SHARDFS_SRC_INDEXREF_BUNDLE_UNPACK_H_
