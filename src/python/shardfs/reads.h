// The reads of the extension's Volume class (reads.cc): what shardfs.Index's
// read methods and shardfs.torch's datasets call. Each gets the handle's
// volume, lets the GIL go around every lookup and read, and raises
// StatusError (handle.h) naming the file.
#ifndef SHARDFS_SRC_PYTHON_SHARDFS_READS_H_
#define SHARDFS_SRC_PYTHON_SHARDFS_READS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/python/shardfs/handle.h"

namespace shardfs::python {

// Adds to class `cls` (the extension's Volume) the methods CPython calls by
// vectorcall, with no pybind11 dispatch per call: _read(relpath, offset,
// size, /) (Index.read: one pread, and the file's lookup the first time it
// is read) and _read_inodes(inodes, willneed=False, /) (the whole bytes of
// files by inode number, which _inodes gave: SampleDataset's items).
void AddFastReads(pybind11::handle cls);

// Asks the kernel for the bytes of each file of `paths` now (Volume::WillNeed),
// without waiting for them: reads that follow find them on their way or in
// the page cache. Paths that do not name a file are passed over (the read
// reports them).
void Prefetch(Handle& h, const pybind11::iterable& paths_arg);

// Where each file of `paths` lies: (shard number, offset), in order; what
// shardfs._split orders reads by. Raises for the first that names no file.
std::vector<std::pair<uint64_t, uint64_t>> Placement(Handle& h,
                                                     const pybind11::iterable& paths_arg);

// The whole bytes of each file of `paths`, in order. All are resolved first
// and the kernel is told of each one's bytes (Volume::WillNeed), so that the
// reads of a batch from a local disk are in flight together; then each is
// read into its bytes object. Raises for the first path that fails, as a
// loop of Read would, before reading any.
pybind11::list ReadMany(Handle& h, const pybind11::iterable& paths_arg);

// The inode number of each file of `paths`, in order (ResolveFile's errors
// for the first that names no file): what _read_inodes takes. Each record
// is remembered by the volume.
std::vector<uint64_t> Inodes(Handle& h, const pybind11::iterable& paths_arg);

// Reads into writable buffer `buf` from `offset` of file `inode`; returns the
// bytes read (0 at end of file).
size_t ReadInto(Handle& h, uint64_t inode, uint64_t offset, const pybind11::object& buf,
                const std::string& name);

}  // namespace shardfs::python

#endif  // SHARDFS_SRC_PYTHON_SHARDFS_READS_H_
