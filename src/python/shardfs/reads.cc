// The reads of the extension's Volume class (_shardfs.cc): a file by path,
// the files of a sample by inode, a batch. The two of every item of a
// loop, _read (Index.read) and _read_inodes (shardfs.torch.SampleDataset),
// are methods CPython calls by vectorcall, with no pybind11 dispatch; the
// others are bound by _shardfs.cc.
#include "src/python/shardfs/reads.h"

#include <sys/uio.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "index/index_reader.h"
#include "index/schema.h"
#include "src/python/shardfs/log_queue.h"
#include "src/python/shardfs/path_args.h"

namespace py = pybind11;

namespace shardfs::python {

namespace {

using index::EntryRecord;
using index::InodeId;
using index::RecordHolder;

// A bytes object of `n` bytes to fill without the GIL. REQUIRES: the GIL.
py::object NewBytes(uint64_t n) {
  PyObject* obj = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (!obj) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(obj);
}

// `*bytes` cut to its first `n` bytes (a read that ended early).
void ShrinkBytes(py::object* bytes, size_t n) {
  if (static_cast<size_t>(PyBytes_GET_SIZE(bytes->ptr())) == n) return;
  PyObject* obj = bytes->release().ptr();
  if (_PyBytes_Resize(&obj, static_cast<Py_ssize_t>(n)) != 0) throw py::error_already_set();
  *bytes = py::reinterpret_steal<py::object>(obj);
}

// Index.read. The record of a file read before is remembered by the volume
// (Volume::Remembered: a hash lookup, no I/O, so done with the GIL held),
// and the bytes object is made before the GIL is let go once for the read
// straight into it; a path not remembered is resolved without the GIL first.
py::object Read(Handle& h, py::handle path_arg, int64_t offset, int64_t size) {
  if (offset < 0) throw py::value_error(fmt::format("offset {}: negative", offset));
  const PathRef path(path_arg);
  const uint64_t off = static_cast<uint64_t>(offset);
  std::shared_ptr<reader::Volume> v = h.Get();
  EntryRecord rec;
  RecordHolder holder;
  if (!v->Remembered(path.view(), &rec)) {
    py::gil_scoped_release nogil;
    Check(v->ResolveFile(path.view(), &rec, &holder), path.str());
  }
  const uint64_t avail = off < rec.size ? rec.size - off : 0;
  const size_t n = static_cast<size_t>(size < 0 ? avail : std::min<uint64_t>(avail, size));
  py::object out = NewBytes(n);
  Result<size_t> got = Status::IoError("not read");
  {
    py::gil_scoped_release nogil;
    got = v->Read(rec, off, n, PyBytes_AS_STRING(out.ptr()));
  }
  ShrinkBytes(&out, Check(std::move(got), path.str()));
  return out;
}

// Runs `body`, the work of a method called by CPython's vectorcall with no
// pybind11 dispatch, as pybind11 would: its errors set as Python errors
// (nullptr returned), the log drained on return.
template <typename Body>
PyObject* Guarded(const Body& body) noexcept {
  DrainOnReturn drain;
  try {
    return body();
  } catch (const StatusError& e) {
    SetStatusError(e.status, e.filename, e.index);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// _read(relpath, offset, size, /): what Index.read calls, by vectorcall.
PyObject* ReadMethod(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                     PyObject* kwnames) noexcept {
  return Guarded([&] {
    if (PyVectorcall_NARGS(nargsf) != 3 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0)) {
      throw py::type_error("_read(relpath, offset, size, /)");
    }
    const long long offset = PyLong_AsLongLong(args[1]);
    const long long size = offset == -1 && PyErr_Occurred() ? 0 : PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) throw py::error_already_set();
    Handle& h = py::cast<Handle&>(py::handle(self));
    return Read(h, args[0], offset, size).release().ptr();
  });
}

PyMethodDef read_method = {
    "_read", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ReadMethod)),
    METH_FASTCALL | METH_KEYWORDS, "What Index.read calls: _read(relpath, offset, size, /)."};

// The inode numbers of a sequence of ints; an array('Q') (8-byte unsigned
// items, C-contiguous) is read as it is, with no int made.
std::vector<uint64_t> InodesArg(py::handle arg) {
  std::vector<uint64_t> out;
  Py_buffer view{};
  if (PyObject_CheckBuffer(arg.ptr()) &&
      PyObject_GetBuffer(arg.ptr(), &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
    const std::string_view format = view.format ? view.format : "B";
    const bool u64 = view.itemsize == 8 && (format == "Q" || format == "L" || format == "=Q");
    if (u64) {
      const auto* p = static_cast<const uint64_t*>(view.buf);
      out.assign(p, p + view.len / 8);
    }
    PyBuffer_Release(&view);
    if (u64) return out;
    throw py::type_error(
        fmt::format("inodes: an array of 8-byte unsigned ints expected, not format {}", format));
  }
  PyErr_Clear();
  for (py::handle i : arg) out.push_back(i.cast<uint64_t>());
  return out;
}

// The path of inode `inode` for a message, else "inode N". A lookup: no GIL needed.
std::string InodeName(const reader::Volume& v, uint64_t inode) {
  std::string path;
  if (v.fs().reader().PathOf(InodeId{inode}, &path).ok()) return path;
  return fmt::format("inode {}", inode);
}

// The whole bytes of each file of `inodes` (numbers that _inodes gave), in
// order, read with the GIL let go once (twice if a record is not
// remembered yet: looked up first); files that lie together in a shard (a
// sample's members) with one stamp check and one read
// (Volume::ReadAdjacent). What _read_many does by path without
// resolving any; `willneed`: the kernel is told of every file's bytes first
// (a system call each: for a batch from a cold disk). Raises for the first
// file that fails, naming its path, before any is read if its record fails.
std::vector<py::object> ReadInodeBytes(Handle& h, std::span<const uint64_t> inodes, bool willneed) {
  std::shared_ptr<reader::Volume> v = h.Get();
  const size_t n = inodes.size();
  std::vector<EntryRecord> recs(n);
  size_t known = 0;
  while (known < n && v->Remembered(InodeId{inodes[known]}, &recs[known])) ++known;
  std::vector<RecordHolder> holders(known < n ? n : 0);  // Never moved: recs point into them.
  std::optional<StatusError> failed;
  if (known < n || willneed) {
    py::gil_scoped_release nogil;
    for (size_t i = known; i < n && !failed; ++i) {
      Status s = v->GetFile(InodeId{inodes[i]}, &recs[i], &holders[i]);
      if (!s.ok()) failed = StatusError{s, InodeName(*v, inodes[i]), current_index};
    }
    if (willneed && !failed) {
      for (const EntryRecord& rec : recs) v->WillNeed(rec);
    }
  }
  if (failed) throw *failed;
  std::vector<py::object> out;
  out.reserve(n);
  for (const EntryRecord& rec : recs) out.push_back(NewBytes(rec.size));
  std::vector<size_t> got(n);
  std::vector<char*> bufs(n);
  for (size_t i = 0; i < n; ++i) bufs[i] = PyBytes_AS_STRING(out[i].ptr());
  {
    py::gil_scoped_release nogil;
    // A sample's members, next to each other in a tar: one read.
    Result<bool> together = v->ReadAdjacent(recs, bufs.data());
    const bool done = together.ok() && *together;
    if (!together.ok()) {
      failed = StatusError{together.status(), InodeName(*v, inodes[0]), current_index};
    } else if (done) {
      for (size_t i = 0; i < n; ++i) got[i] = static_cast<size_t>(recs[i].size);
    }
    for (size_t i = 0; i < n && !failed && !done; ++i) {
      Result<size_t> r =
          v->Read(recs[i], 0, static_cast<size_t>(recs[i].size), PyBytes_AS_STRING(out[i].ptr()));
      if (r.ok()) {
        got[i] = *r;
      } else {
        failed = StatusError{r.status(), InodeName(*v, inodes[i]), current_index};
      }
    }
  }
  if (failed) throw *failed;
  for (size_t i = 0; i < n; ++i) ShrinkBytes(&out[i], got[i]);
  return out;
}

py::list ReadInodes(Handle& h, py::handle inodes_arg, bool willneed) {
  std::vector<py::object> out = ReadInodeBytes(h, InodesArg(inodes_arg), willneed);
  py::list list(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), out[i].release().ptr());
  }
  return list;
}

// _read_sample(item, exts, inodes, start, end, /): dict `item` with the
// whole bytes of files inodes[start:end] of array('Q') `inodes` set under
// `exts` (a tuple of as many str), as _read_inodes reads them; returns
// `item`. SampleDataset's item in one call, no list or slice made.
PyObject* ReadSampleMethod(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                           PyObject* kwnames) noexcept {
  return Guarded([&] {
    if (PyVectorcall_NARGS(nargsf) != 5 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0) ||
        !PyDict_Check(args[0]) || !PyTuple_Check(args[1])) {
      throw py::type_error("_read_sample(item: dict, exts: tuple, inodes, start, end, /)");
    }
    Py_buffer view{};
    if (PyObject_GetBuffer(args[2], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> held(&view, PyBuffer_Release);
    const std::string_view format = view.format ? view.format : "B";
    const Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    const Py_ssize_t end = start == -1 && PyErr_Occurred() ? 0 : PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) throw py::error_already_set();
    if (view.itemsize != 8 || (format != "Q" && format != "L") || start < 0 || end < start ||
        end > view.len / 8 || end - start != PyTuple_GET_SIZE(args[1])) {
      throw py::value_error(
          "_read_sample: inodes[start:end] must be an array('Q') run, one per ext");
    }
    const auto* p = static_cast<const uint64_t*>(view.buf) + start;
    Handle& h = py::cast<Handle&>(py::handle(self));
    std::vector<py::object> datas =
        ReadInodeBytes(h, std::span<const uint64_t>(p, static_cast<size_t>(end - start)), false);
    for (size_t i = 0; i < datas.size(); ++i) {
      PyObject* ext = PyTuple_GET_ITEM(args[1], static_cast<Py_ssize_t>(i));
      if (PyDict_SetItem(args[0], ext, datas[i].ptr()) != 0) throw py::error_already_set();
    }
    return py::reinterpret_borrow<py::object>(args[0]).release().ptr();
  });
}

PyMethodDef read_sample_method = {
    "_read_sample", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ReadSampleMethod)),
    METH_FASTCALL | METH_KEYWORDS, "What SampleDataset reads an item with."};

// _read_inodes(inodes, willneed=False, /), by vectorcall as Index.read.
PyObject* ReadInodesMethod(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                           PyObject* kwnames) noexcept {
  return Guarded([&] {
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || nargs > 2 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0)) {
      throw py::type_error("_read_inodes(inodes, willneed=False, /)");
    }
    const int willneed = nargs > 1 ? PyObject_IsTrue(args[1]) : 0;
    if (willneed < 0) throw py::error_already_set();
    Handle& h = py::cast<Handle&>(py::handle(self));
    return ReadInodes(h, args[0], willneed != 0).release().ptr();
  });
}

PyMethodDef read_inodes_method = {
    "_read_inodes", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ReadInodesMethod)),
    METH_FASTCALL | METH_KEYWORDS, "What SampleDataset reads a sample's files with."};

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

}  // namespace

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

std::vector<uint64_t> Inodes(Handle& h, const py::iterable& paths_arg) {
  std::vector<std::string> paths;
  for (py::handle p : paths_arg) paths.push_back(PathArg(p));
  std::shared_ptr<reader::Volume> v = h.Get();
  py::gil_scoped_release nogil;
  std::vector<uint64_t> out;
  out.reserve(paths.size());
  for (const std::string& path : paths) {
    EntryRecord rec;
    RecordHolder holder;
    Check(v->ResolveFile(path, &rec, &holder), path);
    out.push_back(rec.inode.value);
  }
  return out;
}

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

void AddFastReads(py::handle cls) {
  for (PyMethodDef* def : {&read_method, &read_inodes_method, &read_sample_method}) {
    PyObject* method = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def);
    if (!method) throw py::error_already_set();
    cls.attr(def->ml_name) = py::reinterpret_steal<py::object>(method);
  }
}

}  // namespace shardfs::python
