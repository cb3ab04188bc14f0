// The Python package's extension module: an open volume (src/reader/volume.h)
// as a small class the pure-Python layer (shardfs/__init__.py) wraps. Every
// lookup and read runs without the GIL; errors become OSError with the errno
// of ToErrno (base/status.h), made by shardfs._errors (log_queue.h:
// shardfs.CorruptShardError, shardfs.FetchError, shardfs.NotFoundError, ...).
// The core's messages go to the "shardfs" logger (log_queue.h says how).
// handle.h says how a handle survives fork(); reads.h has the reads.
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/strings.h"
#include "index/index_reader.h"
#include "index/schema.h"
#include "src/indexref/index_ref.h"
#include "src/python/shardfs/handle.h"
#include "src/python/shardfs/log_queue.h"
#include "src/python/shardfs/path_args.h"
#include "src/python/shardfs/reads.h"
#include "src/reader/volume.h"

namespace py = pybind11;

namespace shardfs::python {

namespace {

using index::EntryRecord;
using index::EntryType;
using index::InodeId;
using index::RecordHolder;

// (mode, ino, nlink, uid, gid, size, mtime_ns, blocks) of an entry.
using StatTuple =
    std::tuple<uint32_t, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, int64_t, uint64_t>;

StatTuple ToTuple(const struct stat& st) {
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return {st.st_mode,  st.st_ino,
          st.st_nlink, st.st_uid,
          st.st_gid,   static_cast<uint64_t>(st.st_size),
          mtime_ns,    static_cast<uint64_t>(st.st_blocks)};
}

StatTuple Stat(Handle& h, const py::object& path_arg, bool follow) {
  const std::string path = PathArg(path_arg);
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  struct stat st;
  Check(v->Stat(path, follow, &st), path);
  return ToTuple(st);
}

std::vector<std::pair<std::string, uint32_t>> ListDirPath(Handle& h, const py::object& path_arg) {
  const std::string path = PathArg(path_arg);
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  std::vector<std::pair<std::string, uint32_t>> out;
  Check(v->ListDir(path,
                   [&](std::string_view name, const EntryRecord& rec) {
                     out.emplace_back(std::string(name), rec.mode);
                     return true;
                   }),
        path);
  return out;
}

// Appends to `out` the path of every file under directory `dir` (named
// `dir_path`, "" or ending in '/') whose name starts with `name_prefix`, in
// tree order (a directory's children in name order, each subtree in turn).
void CollectFiles(const reader::Volume& v, InodeId dir, const std::string& dir_path,
                  std::string_view name_prefix, std::vector<std::string>* out) {
  std::vector<std::pair<std::string, InodeId>> subdirs;
  std::vector<std::pair<std::string, bool>> entries;  // (name, is_dir) in order.
  Check(v.ListDir(dir,
                  [&](std::string_view name, const EntryRecord& rec) {
                    if (!name.starts_with(name_prefix)) return true;
                    bool is_dir = rec.type == EntryType::kDir;
                    entries.emplace_back(std::string(name), is_dir);
                    if (is_dir) subdirs.emplace_back(std::string(name), rec.inode);
                    return true;
                  }),
        dir_path);
  size_t next_dir = 0;
  for (const auto& [name, is_dir] : entries) {
    if (!is_dir) {
      out->push_back(dir_path + name);
      continue;
    }
    const auto& [dname, inode] = subdirs[next_dir++];
    CollectFiles(v, inode, dir_path + dname + "/", "", out);
  }
}

std::vector<std::string> Files(Handle& h, const py::object& prefix_arg) {
  const std::string prefix = PlainPrefix(PathArg(prefix_arg));
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  size_t slash = prefix.rfind('/');
  std::string dir_path = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
  std::string_view name_prefix = std::string_view(prefix).substr(dir_path.size());
  EntryRecord rec;
  RecordHolder holder;
  std::vector<std::string> out;
  Status s = v->Resolve(dir_path, /*follow=*/true, &rec, &holder);
  if (s.code() == Status::Code::kNotFound || s.code() == Status::Code::kNotADirectory) return out;
  Check(s, prefix);
  if (rec.type != EntryType::kDir) return out;
  CollectFiles(*v, rec.inode, dir_path, name_prefix, &out);
  return out;
}

// How many paths Files("") gives (every file and symbolic link; each name of
// a hard-linked file) under directory `dir`, counted in the same walk
// without building them. The index's stored count is not this: it counts
// file inodes of the whole view, not names, nor a rank's share.
uint64_t CountFiles(const reader::Volume& v, InodeId dir) {
  std::vector<InodeId> subdirs;
  uint64_t n = 0;
  Check(v.ListDir(dir,
                  [&](std::string_view, const EntryRecord& rec) {
                    if (rec.type == EntryType::kDir) {
                      subdirs.push_back(rec.inode);
                    } else {
                      ++n;
                    }
                    return true;
                  }),
        "");
  for (InodeId d : subdirs) n += CountFiles(v, d);
  return n;
}

// The name of each shard of the index by number (what _placement gives):
// its path, or its URL redacted, as `shardfs ls --json` names it.
std::vector<std::string> ShardNames(Handle& h) {
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  const index::IndexReader& r = v->fs().reader();
  std::vector<std::string> out(r.shards().size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = RedactLocation(r.ShardPath(index::ShardId{static_cast<uint32_t>(i)}));
  }
  return out;
}

reader::VolumeOptions MakeOptions(std::optional<std::string> view, std::optional<uint32_t> rank,
                                  std::optional<uint32_t> world, uint64_t seed, bool rank_keep_dirs,
                                  const std::string& verify, const py::object& cache_dir,
                                  uint64_t cache_size, const std::string& storage,
                                  std::optional<uint64_t> decode_cache,
                                  std::optional<uint64_t> max_open_shards) {
  reader::VolumeOptions o;
  if (!ParseStorageMode(storage, &o.storage)) {
    throw py::value_error("storage: expected auto, local or network, not " + storage);
  }
  if (view) o.reader.view = *view;
  if (rank.has_value() != world.has_value()) {
    throw py::value_error("rank and world go together: give both or neither");
  }
  if (world) {
    if (*world == 0 || *rank >= *world) {
      throw py::value_error(
          fmt::format("rank {} of world {}: need world > 0 and rank < world", *rank, *world));
    }
    o.reader.rank = *rank;
    o.reader.world = *world;
    o.reader.seed = seed;
    o.reader.rank_keep_dirs = rank_keep_dirs;
  }
  if (verify == "auto") {
    o.fs.verify = reader::VerifyMode::kFirst;
    o.verify_where_possible = true;
  } else if (verify == "off") {
    o.fs.verify = reader::VerifyMode::kOff;
  } else if (verify == "first") {
    o.fs.verify = reader::VerifyMode::kFirst;
  } else if (verify == "always") {
    o.fs.verify = reader::VerifyMode::kAlways;
  } else {
    throw py::value_error("verify: expected auto, off, first or always, not " + verify);
  }
  if (!cache_dir.is_none()) o.cache_dir = PathArg(cache_dir);
  o.cache_size = cache_size;
  if (decode_cache) o.decode_cache = *decode_cache;
  if (max_open_shards) o.fs.max_open_shards = std::max<uint64_t>(1, *max_open_shards);
  return o;
}

// The Volume's constructor: the index at `path_arg` opened with the options
// (MakeOptions).
std::unique_ptr<Handle> NewHandle(const py::object& path_arg, std::optional<std::string> view,
                                  std::optional<uint32_t> rank, std::optional<uint32_t> world,
                                  uint64_t seed, bool rank_keep_dirs, const std::string& verify,
                                  const py::object& cache_dir, uint64_t cache_size,
                                  const std::string& storage, std::optional<uint64_t> decode_cache,
                                  std::optional<uint64_t> max_open_shards) {
  const std::string path = PathArg(path_arg);
  reader::VolumeOptions o = MakeOptions(view, rank, world, seed, rank_keep_dirs, verify, cache_dir,
                                        cache_size, storage, decode_cache, max_open_shards);
  py::gil_scoped_release nogil;
  return std::make_unique<Handle>(path, std::move(o));
}

}  // namespace

}  // namespace shardfs::python

PYBIND11_MODULE(_shardfs, m) {
  using namespace shardfs;
  using namespace shardfs::python;
  m.doc() = "The C++ core of shardfs: an index opened in-process (see shardfs.Index).";
  // First: fork's prepare handlers run in reverse order, so the queue's
  // mutex is taken last, after the locks a thread may log while holding.
  InstallLogQueue();
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    ::pthread_atfork(&Handle::LockAll, &Handle::UnlockAll, &Handle::UnlockAllInChild);
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      SetStatusError(e.status, e.filename, e.index);
    }
  });

  m.attr("__version__") = SHARDFS_VERSION;
  m.def("_drain_log", &DrainLog);
  // Every call hands the messages queued meanwhile to logging as it returns.
  using Drain = py::call_guard<DrainOnReturn>;
  // The methods' signatures and documentation are shardfs.Index's (Python,
  // with annotations); these are what it calls.
  py::class_<Handle> volume(m, "Volume");
  volume
      .def(py::init(&NewHandle), Drain(), py::arg("path"), py::kw_only(),
           py::arg("view") = py::none(), py::arg("rank") = py::none(),
           py::arg("world") = py::none(), py::arg("seed") = 0, py::arg("rank_keep_dirs") = false,
           py::arg("verify") = "auto", py::arg("cache_dir") = py::none(), py::arg("cache_size") = 0,
           py::arg("storage") = "auto", py::arg("decode_cache") = py::none(),
           py::arg("max_open_shards") = py::none())
      .def("_close", &Handle::Close, Drain())
      .def_property_readonly("closed", &Handle::closed)
      .def_property_readonly("_shown",
                             [](Handle& h) {
                               std::shared_ptr<reader::Volume> v = h.Get();
                               return v->shown();
                             })
      .def("_inodes", &Inodes, Drain(), py::arg("relpaths"))
      .def("_prefetch", &Prefetch, Drain(), py::arg("relpaths"))
      .def("_read_many", &ReadMany, Drain(), py::arg("relpaths"))
      .def("_placement", &Placement, Drain(), py::arg("relpaths"))
      .def("_readinto", &ReadInto, Drain(), py::arg("inode"), py::arg("offset"), py::arg("buffer"),
           py::arg("name"))
      .def("_stat", &Stat, Drain(), py::arg("relpath"), py::arg("follow") = true)
      .def("_listdir", &ListDirPath, Drain(), py::arg("relpath"))
      .def("_files", &Files, Drain(), py::arg("prefix"))
      .def(
          "_count_files",
          [](Handle& h) {
            std::shared_ptr<reader::Volume> v = h.Get();
            py::gil_scoped_release nogil;
            return CountFiles(*v, index::kRootInode);
          },
          Drain())
      .def("_shard_names", &ShardNames, Drain())
      .def(
          "_readlink",
          [](Handle& h, const py::object& path_arg) {
            const std::string path = PathArg(path_arg);
            std::shared_ptr<reader::Volume> v = h.Get();
            py::gil_scoped_release nogil;
            return Check(v->ReadLink(path), path);
          },
          Drain());
  AddFastReads(volume);  // _read and _read_inodes, by vectorcall.
}
