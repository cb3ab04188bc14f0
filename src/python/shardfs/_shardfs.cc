// The Python package's extension module: an open volume (src/reader/volume.h)
// as a small class the pure-Python layer (shardfs/__init__.py) wraps. Every
// lookup and read runs without the GIL; errors become OSError with the errno
// of ToErrno (base/status.h), made by shardfs._errors (log_queue.h:
// shardfs.CorruptShardError, shardfs.FetchError, shardfs.NotFoundError, ...).
// The core's messages go to the "shardfs" logger (log_queue.h says how).
//
// Fork safety. A process that forks after opening (PyTorch's DataLoader
// workers) must not use the parent's volume in the child: its RocksDB
// database, its shard descriptors' locks and its fetcher threads belong to
// the parent. Each handle remembers the fork generation it was opened in
// (counted by a pthread_atfork child handler); the first call in a child
// process opens the index again from the resolved reference and
// leaves the parent's volume alone (leaked on purpose: destroying it could
// wait on locks that threads the child does not have were holding). No lock
// of ours is held across fork(): pthread_atfork takes every handle's mutex
// before the fork and releases it on both sides.
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
#include "src/python/shardfs/log_queue.h"
#include "src/python/shardfs/path_args.h"
#include "src/reader/volume.h"

namespace py = pybind11;

namespace shardfs::python {

namespace {

using index::EntryRecord;
using index::EntryType;
using index::InodeId;
using index::RecordHolder;

// A non-ok Status on its way to Python as an OSError (SetStatusError).
struct StatusError {
  Status status;
  std::string filename;
  std::string index;  // The index the call was about (its argument), for the message.
};

// The index argument of the Handle this thread last called (Get, or the
// constructor): every call gets its volume before anything can fail.
thread_local std::string current_index;

[[noreturn]] void Throw(const Status& s, std::string filename) {
  throw StatusError{s, std::move(filename), current_index};
}

void Check(const Status& s, const std::string& filename) {
  if (!s.ok()) Throw(s, filename);
}

template <typename T>
T Check(Result<T> r, const std::string& filename) {
  if (!r.ok()) Throw(r.status(), filename);
  return std::move(r).value();
}

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

class Handle;

// How many fork()s this process descends from since the module was loaded
// (pthread_atfork's child handler counts them): a volume opened at another
// count belongs to an ancestor. Cheaper than getpid(), a system call, on
// every call.
std::atomic<uint64_t> fork_generation{0};

// Set once this process opened an index (its RocksDB has static state).
std::atomic<bool> opened_any{false};

// An exit handler: what exit(status) would do after it, but for the static
// destructors (see UnlockAllInChild).
void ExitAtOnce(int status, void*) {
  std::fflush(nullptr);
  ::_exit(status);
}

// Every open handle, so that fork() waits until none is being swapped.
std::mutex registry_mu;
std::set<Handle*>* registry = new std::set<Handle*>();  // Guarded by registry_mu; never freed.

// Held around every open and every close of a volume's RocksDB database,
// and taken by fork() last (pthread_atfork): RocksDB's process-wide periodic
// task scheduler takes a mutex of its own in each open and close, and a
// fork() while another thread held it would leave it locked for ever in the
// child (a DataLoader worker forked while a thread opened a validation set
// blocked in its first open). Lock order: registry_mu, a handle's mu_, then
// db_mu.
std::mutex db_mu;

// Opens a volume under db_mu; the volume is closed under it too, by
// whichever holder lets go last.
Result<std::shared_ptr<reader::Volume>> OpenVolume(const reader::IndexLocation& where,
                                                   reader::VolumeOptions options) {
  std::lock_guard<std::mutex> l(db_mu);
  Result<std::unique_ptr<reader::Volume>> v = reader::Volume::Open(where, std::move(options));
  if (!v.ok()) return v.status();
  return std::shared_ptr<reader::Volume>(std::move(v).value().release(), [](reader::Volume* p) {
    std::lock_guard<std::mutex> l(db_mu);
    delete p;
  });
}

class Handle {
 public:
  Handle(const std::string& arg, reader::VolumeOptions options) : arg_(arg) {
    current_index = arg;
    Result<indexref::IndexRef> ref = indexref::ResolveForVolume(arg, &options);
    if (!ref.ok()) Throw(ref.status(), arg);
    auto v = OpenVolume(indexref::LocationOf(ref.value()), options);
    if (!v.ok()) Throw(v.status(), arg);
    ref_ = std::move(ref).value();
    options_ = std::move(options);
    volume_ = std::move(v).value();
    // A forked child opens the very version this process opened ("NAME@N"),
    // not whatever `index add` or `view create` made meanwhile.
    const index::IndexReader& r = volume_->fs().reader();
    if (r.manifest() == nullptr) options_.reader.view = r.version().label();
    opened_any.store(true, std::memory_order_relaxed);
    generation_ = fork_generation.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> l(registry_mu);
    registry->insert(this);
  }

  ~Handle() {
    {
      std::lock_guard<std::mutex> l(registry_mu);
      registry->erase(this);
    }
    if (generation_ != fork_generation.load(std::memory_order_relaxed)) {
      Leak(std::move(volume_));
    }
  }

  // The volume of this process: opened again after a fork. ValueError after
  // close().
  std::shared_ptr<reader::Volume> Get() {
    current_index = arg_;
    std::unique_lock<std::mutex> l(mu_);
    if (closed_) throw py::value_error("I/O operation on a closed shardfs.Index (" + arg_ + ")");
    uint64_t generation = fork_generation.load(std::memory_order_relaxed);
    if (generation == generation_) return volume_;
    // A child after fork(): the parent's volume is not ours to use or free.
    Leak(std::move(volume_));
    // The disk chunk cache is the parent's directory, shared: the child
    // finds the chunks its parent and siblings stored, and they its own.
    reader::VolumeOptions o = options_;
    o.announce = false;  // The parent logged how the storage is read.
    auto v = OpenVolume(indexref::LocationOf(ref_), std::move(o));
    if (!v.ok()) Throw(v.status(), arg_);
    volume_ = std::move(v).value();
    generation_ = generation;
    return volume_;
  }

  void Close() {
    std::shared_ptr<reader::Volume> old;
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      if (generation_ == fork_generation.load(std::memory_order_relaxed)) {
        old = std::move(volume_);
      } else {
        Leak(std::move(volume_));
      }
    }
    // Freed here, or by the last call still reading from it.
  }

  bool closed() {
    std::lock_guard<std::mutex> l(mu_);
    return closed_;
  }
  const std::string& arg() const { return arg_; }

  static void LockAll() {
    registry_mu.lock();
    for (Handle* h : *registry) h->mu_.lock();
    db_mu.lock();
  }
  static void UnlockAll() {
    db_mu.unlock();
    for (Handle* h : *registry) h->mu_.unlock();
    registry_mu.unlock();
  }
  // In the child: a new process, whose handles open their volumes again.
  static void UnlockAllInChild() {
    fork_generation.fetch_add(1, std::memory_order_relaxed);
    UnlockAll();
    // RocksDB's static timer, copied from a parent whose timer thread was
    // waiting on its condition variable, would block the child's exit() for
    // ever in that variable's destructor (glibc waits for the waiters the
    // copy still counts). A child of a process that opened an index ends,
    // once Python has finalised, without running the static destructors:
    // an exit handler registered now runs before theirs.
    if (opened_any.load(std::memory_order_relaxed)) ::on_exit(&ExitAtOnce, nullptr);
  }

 private:
  static void Leak(std::shared_ptr<reader::Volume> v) {
    if (v) new std::shared_ptr<reader::Volume>(std::move(v));
  }

  const std::string arg_;
  indexref::IndexRef ref_;
  reader::VolumeOptions options_;
  std::mutex mu_;
  std::shared_ptr<reader::Volume> volume_;  // Guarded by mu_.
  uint64_t generation_ = 0;  // fork_generation when volume_ was opened. Guarded by mu_.
  bool closed_ = false;      // Guarded by mu_.
};

// Reads of at most this many bytes go into a buffer of the thread while the
// GIL is released once, and are copied into the bytes object after; larger
// ones go straight into a bytes object allocated between lookup and read.
constexpr size_t kCopiedReadMax = 1 << 20;

py::bytes Read(Handle& h, const py::object& path_arg, int64_t offset, int64_t size) {
  if (offset < 0) throw py::value_error(fmt::format("offset {}: negative", offset));
  const std::string path = PathArg(path_arg);
  const uint64_t off = static_cast<uint64_t>(offset);
  std::shared_ptr<reader::Volume> v = h.Get();
  thread_local std::string buffer;
  EntryRecord rec;
  RecordHolder holder;
  size_t n = 0;
  {
    py::gil_scoped_release nogil;
    Check(v->ResolveFile(path, &rec, &holder), path);
    const uint64_t avail = off < rec.size ? rec.size - off : 0;
    n = static_cast<size_t>(size < 0 ? avail : std::min<uint64_t>(avail, size));
    if (n <= kCopiedReadMax) {
      buffer.resize(n);
      n = Check(v->Read(rec, off, n, buffer.data()), path);
    }
  }
  if (n <= kCopiedReadMax) return py::bytes(buffer.data(), n);
  PyObject* obj = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (!obj) throw py::error_already_set();
  py::bytes out = py::reinterpret_steal<py::bytes>(obj);
  Result<size_t> got = Status::IoError("not read");
  {
    py::gil_scoped_release nogil;
    got = v->Read(rec, off, n, PyBytes_AS_STRING(obj));
  }
  if (Check(std::move(got), path) != n) return py::bytes(PyBytes_AS_STRING(obj), *got);
  return out;
}

// Asks the kernel for the bytes of each file of `paths` now (Volume::WillNeed),
// without waiting for them: reads that follow find them on their way or in
// the page cache. Paths that do not name a file are passed over (the read
// reports them).
void Prefetch(Handle& h, const py::iterable& paths_arg) {
  std::vector<std::string> paths;
  for (py::handle p : paths_arg) paths.push_back(PathArg(p));
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  for (const std::string& path : paths) {
    EntryRecord rec;
    RecordHolder holder;
    if (v->ResolveFile(path, &rec, &holder).ok()) v->WillNeed(rec);
  }
}

// Where each file of `paths` lies: (shard number, offset), in order; what
// shardfs._split orders reads by. Raises for the first that names no file.
std::vector<std::pair<uint64_t, uint64_t>> Placement(Handle& h, const py::iterable& paths_arg) {
  std::vector<std::string> paths;
  for (py::handle p : paths_arg) paths.push_back(PathArg(p));
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(paths.size());
  for (const std::string& path : paths) {
    EntryRecord rec;
    RecordHolder holder;
    Check(v->ResolveFile(path, &rec, &holder), path);
    out.emplace_back(rec.shard.value, rec.offset);
  }
  return out;
}

// The whole bytes of each file of `paths`, in order. All are resolved first
// and the kernel is told of each one's bytes (Volume::WillNeed), so that the
// reads of a batch from a local disk are in flight together; then each is
// read into its bytes object. Raises for the first path that fails, as a
// loop of Read would, before reading any.
py::list ReadMany(Handle& h, const py::iterable& paths_arg) {
  std::vector<std::string> paths;
  for (py::handle p : paths_arg) paths.push_back(PathArg(p));
  std::shared_ptr<reader::Volume> v = h.Get();
  const size_t n = paths.size();
  std::vector<EntryRecord> recs(n);
  std::vector<RecordHolder> holders(n);  // Never moved: recs point into them.
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) Check(v->ResolveFile(paths[i], &recs[i], &holders[i]), paths[i]);
    for (const EntryRecord& rec : recs) v->WillNeed(rec);
  }
  std::vector<py::bytes> out;
  out.reserve(n);
  for (const EntryRecord& rec : recs) {
    PyObject* obj = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(rec.size));
    if (!obj) throw py::error_already_set();
    out.push_back(py::reinterpret_steal<py::bytes>(obj));
  }
  std::vector<char*> bufs(n);
  for (size_t i = 0; i < n; ++i) bufs[i] = PyBytes_AS_STRING(out[i].ptr());
  std::vector<size_t> got(n);
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      got[i] = Check(v->Read(recs[i], 0, static_cast<size_t>(recs[i].size), bufs[i]), paths[i]);
    }
  }
  py::list list(n);
  for (size_t i = 0; i < n; ++i) {
    list[i] = got[i] == recs[i].size ? out[i] : py::bytes(bufs[i], got[i]);
  }
  return list;
}

// A writable, C-contiguous buffer of bytes: what io.FileIO.readinto takes.
// TypeError for anything else (read-only, strided, reversed), since the
// bytes are written in one run from its start.
class WritableBuffer {
 public:
  explicit WritableBuffer(py::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::type_error(fmt::format(
          "readinto() argument must be a writable, C-contiguous bytes-like object, not {}",
          Py_TYPE(obj.ptr())->tp_name));
    }
  }
  ~WritableBuffer() { PyBuffer_Release(&view_); }
  WritableBuffer(const WritableBuffer&) = delete;
  WritableBuffer& operator=(const WritableBuffer&) = delete;
  char* data() const { return static_cast<char*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

// Reads into writable buffer `buf` from `offset` of file `inode`; returns the
// bytes read (0 at end of file).
size_t ReadInto(Handle& h, uint64_t inode, uint64_t offset, const py::object& buf,
                const std::string& name) {
  std::shared_ptr<reader::Volume> v = h.Get();
  const WritableBuffer into(buf);
  Result<size_t> got = Status::IoError("not read");
  {
    py::gil_scoped_release nogil;
    got = v->Read(InodeId{inode}, offset, into.size(), into.data());
  }
  return Check(std::move(got), name);
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
  py::class_<Handle>(m, "Volume")
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
      .def("_read", &Read, Drain(), py::arg("relpath"), py::arg("offset"), py::arg("size"))
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
}
