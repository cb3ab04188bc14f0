// The Python package's write side, the extension module shardfs._build: an
// index built from shards (builder::BuildIndex, what `shardfs index build`
// runs) and a loose tree packed (pack::Pack, what `shardfs pack` runs), for
// shardfs.Index.build and shardfs.pack (src/python/shardfs/_write.py, which
// checks every option's type and range first and hands them over as a dict
// of plain values: bools, ints, sizes as an int or a string, paths).
//
// The command's code paths do the work, so its safety rules hold as they
// are: what may be replaced (--force), inputs that may not be overwritten,
// the atomic publish that leaves no half-written index behind. The GIL is
// released for the whole build. The core's messages go to the "shardfs"
// logger through the read extension's queue (src/python/shardfs/log_queue.h,
// linked into this module as an object: each extension has its own copy of
// base/log's sink), drained when a call returns. A failure raises the
// package's exception for its Status (shardfs._write._error).
//
// The read extension (_shardfs) never links this side or libarchive; this
// module links both, and nothing of the read path.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/parse.h"
#include "base/progress.h"
#include "base/status.h"
#include "src/python/shardfs/log_queue.h"
#include "src/python/shardfs/path_args.h"
#include "tools/builder/index_build.h"
#include "tools/pack/pack.h"

namespace py = pybind11;

namespace shardfs::python_build {

using python::DrainOnReturn;
using python::InstallLogQueue;
using python::PathArg;

namespace {

// A failed build on its way to Python: the Status, and the paths the call
// was given (shardfs._write._error takes the one the message names as the
// exception's filename).
struct BuildError {
  Status status;
  std::string message;  // The Status's, and more (PackCall).
  std::vector<std::string> paths;
};

// Text of the core (paths are bytes) as Python's os functions decode it.
py::object FsText(const std::string& s) {
  PyObject* o = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// What the exception's message says: the Status's, then the first of the
// entries that failed a pack (all are logged).
constexpr size_t kErrorsInMessage = 5;

// How many lines of one list (skipped entries, errors) are logged, as the
// command prints them.
constexpr size_t kListed = 1000;

void LogList(log::Level level, std::string_view what, const std::vector<std::string>& lines) {
  for (size_t i = 0; i < lines.size() && i < kListed; ++i) {
    log::Write(level, fmt::format("{}: {}", what, lines[i]));
  }
  if (lines.size() > kListed) {
    log::Write(level, fmt::format("{}: ... and {} more", what, lines.size() - kListed));
  }
}

// Option `name` of `o`, or nullptr when it is absent or None.
py::handle Get(const py::dict& o, const char* name) {
  PyObject* v = PyDict_GetItemString(o.ptr(), name);
  return v == nullptr || v == Py_None ? py::handle() : py::handle(v);
}

bool Flag(const py::dict& o, const char* name, bool otherwise) {
  py::handle v = Get(o, name);
  return v ? v.cast<bool>() : otherwise;
}

uint64_t Count(const py::dict& o, const char* name, uint64_t otherwise) {
  py::handle v = Get(o, name);
  return v ? v.cast<uint64_t>() : otherwise;
}

std::string Path(const py::dict& o, const char* name) {
  py::handle v = Get(o, name);
  return v ? PathArg(v) : std::string();
}

// A size: an int of bytes, or a string in the command's grammar ("512M",
// "4G": base/parse.h). Zero is refused, as the command refuses it.
uint64_t Size(const py::dict& o, const char* name, uint64_t otherwise) {
  py::handle v = Get(o, name);
  if (!v) return otherwise;
  uint64_t n = 0;
  if (py::isinstance<py::str>(v)) {
    const std::string text = v.cast<std::string>();
    if (!ParseSize(text, &n) || n == 0) {
      throw py::value_error(fmt::format(
          "{}='{}': expected a size of at least 1 byte such as 512M or 4G (suffixes B, K, M, G, "
          "T: powers of 1024)",
          name, text));
    }
    return n;
  }
  n = v.cast<uint64_t>();
  if (n == 0) throw py::value_error(fmt::format("{}=0: expected a size of at least 1 byte", name));
  return n;
}

builder::ShardPart Part(const py::dict& o) {
  builder::ShardPart part;
  py::handle v = Get(o, "part");
  if (!v) return part;
  const std::string text = v.cast<std::string>();
  if (Status s = builder::ParseShardPart(text, &part); !s.ok()) {
    throw py::value_error(fmt::format("part='{}': {}", text, s.message()));
  }
  return part;
}

builder::IndexBuildOptions BuildOptions(const py::handle& out, const py::iterable& shards,
                                        const py::dict& o) {
  builder::IndexBuildOptions b;
  b.out = PathArg(out);
  for (py::handle s : shards) b.inputs.push_back(PathArg(s));
  b.from_list = Path(o, "from_list");
  b.url_prefix = Path(o, "url_prefix");
  b.checksum = Flag(o, "checksum", true);
  b.jobs = static_cast<int>(Count(o, "jobs", 0));
  b.force = Flag(o, "force", false);
  b.quiet = true;  // No progress line: it would go to stderr on a terminal.
  b.memory = Size(o, "memory", 0);
  b.seek_spacing = Size(o, "seek_spacing", 0);
  b.part = Part(o);
  b.remote.max_shard_size = Size(o, "max_shard_size", b.remote.max_shard_size);
  b.remote.max_list_pages = Count(o, "max_list_pages", b.remote.max_list_pages);
  archive::NestOptions& nest = b.nest;
  nest.recursive = Flag(o, "recursive", false);
  nest.max_depth = static_cast<int>(Count(o, "recursive_depth", nest.max_depth));
  nest.strip_extension = Flag(o, "strip_recursive_tar_extension", false);
  nest.strip_zip_extension = Flag(o, "strip_recursive_zip_extension", false);
  nest.max_zip_ratio = Count(o, "max_zip_ratio", nest.max_zip_ratio);
  nest.max_entries = Count(o, "recursive_max_entries", nest.max_entries);
  return b;
}

index::Codec Codec(const py::dict& o) {
  py::handle v = Get(o, "compress");
  const std::string name = v ? v.cast<std::string>() : "none";
  if (name == "zstd") return index::Codec::kZstd;
  if (name == "gzip") return index::Codec::kGzip;
  if (name == "none") return index::Codec::kNone;
  throw py::value_error(
      fmt::format("compress='{}': expected 'zstd', 'gzip', 'none' or None", name));
}

pack::PackOptions PackOptions(const py::handle& src, const py::handle& out, const py::dict& o) {
  pack::PackOptions p;
  p.src = PathArg(src);
  p.out = PathArg(out);
  p.shard_size = Size(o, "shard_size", p.shard_size);
  p.max_files = Count(o, "max_files", 0);
  if (py::handle v = Get(o, "name")) p.name = v.cast<std::string>();
  p.jobs = static_cast<int>(Count(o, "jobs", 0));
  p.from_list = Path(o, "from_list");
  if (py::handle v = Get(o, "exclude")) p.excludes = v.cast<std::vector<std::string>>();
  p.skip_unreadable = Flag(o, "skip_unreadable", false);
  p.skip_special = Flag(o, "skip_special", false);
  p.follow_symlinks = Flag(o, "follow_symlinks", false);
  p.quiet = true;  // As above.
  p.force = Flag(o, "force", false);
  p.compress = Codec(o);
  if (py::handle v = Get(o, "compress_level")) p.compress_level = v.cast<int>();
  p.group_bytes = Size(o, "group_bytes", p.group_bytes);
  p.part = Part(o);
  if (py::handle v = Get(o, "shuffle")) {
    p.shuffle = true;
    p.shuffle_seed = v.cast<uint64_t>();
  }
  if (auto name = pack::ParseShardName(p.name); !name.ok()) {
    throw py::value_error(fmt::format("name='{}': {}", p.name, name.status().message()));
  }
  return p;
}

// What `index build` logs after a build, in short: what was left out or
// replaced (warnings), then the summary (info).
void LogBuild(const builder::IndexBuildOptions& o, const builder::IndexBuildReport& r) {
  const index::WriteStats& st = r.stats;
  if (st.replaced) {
    log::Warning(
        "{} member(s) replaced by a later member of the same path (the later shard wins, as "
        "with tar extraction), e.g.: {}",
        st.replaced, fmt::join(st.replaced_examples, ", "));
  }
  if (r.rejected) {
    log::Warning("{} member(s) left out (unsafe names or unsupported types), e.g.: {}", r.rejected,
                 fmt::join(r.rejected_examples, ", "));
  }
  if (st.dropped) {
    log::Warning("{} member(s) could not be placed in the tree, e.g.: {}", st.dropped,
                 fmt::join(st.dropped_examples, ", "));
  }
  log::Info(
      "indexed {} shards ({}): {} files, {} dirs, {} symlinks, {} of content; index at {} "
      "({:.2f}s)",
      r.shards, HumanBytes(r.shard_bytes), st.files, st.dirs, st.symlinks, HumanBytes(st.bytes),
      o.out, r.seconds);
}

void LogPack(const pack::PackReport& r) {
  LogList(log::Level::kWarning, "skipped", r.skipped);
  log::Info(
      "packed {} files ({}), {} dirs, {} symlinks into {} shards ({}); skipped {}; index at {} "
      "({:.2f}s)",
      r.files, HumanBytes(r.bytes), r.dirs, r.symlinks, r.shards, HumanBytes(r.shard_bytes),
      r.skipped.size(), r.index_path, r.seconds);
}

// shardfs._build.build_index: returns the index's path.
std::string BuildIndexCall(const py::handle& out, const py::iterable& shards,
                           const py::dict& options) {
  const builder::IndexBuildOptions o = BuildOptions(out, shards, options);
  Result<builder::IndexBuildReport> r = Status::IoError("not built");
  {
    py::gil_scoped_release nogil;
    r = builder::BuildIndex(o);
  }
  if (!r.ok()) {
    std::vector<std::string> paths = o.inputs;
    paths.push_back(o.from_list);
    paths.push_back(o.out);
    throw BuildError{r.status(), r.status().message(), std::move(paths)};
  }
  LogBuild(o, *r);
  return o.out;
}

// shardfs._build.pack: returns the index's path (OUT/index, OUT/part-K/index).
std::string PackCall(const py::handle& src, const py::handle& out, const py::dict& options) {
  const pack::PackOptions o = PackOptions(src, out, options);
  pack::PackReport r;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = pack::Pack(o, &r);
  }
  for (const std::string& w : r.warnings) log::Warning("{}", w);
  if (!s.ok()) {
    LogList(log::Level::kError, "cannot pack", r.errors);
    std::string message = s.message();
    for (size_t i = 0; i < r.errors.size() && i < kErrorsInMessage; ++i) {
      message += (i == 0 ? ": " : "; ") + r.errors[i];
    }
    if (r.errors.size() > kErrorsInMessage) {
      message += fmt::format("; and {} more (logged)", r.errors.size() - kErrorsInMessage);
    }
    throw BuildError{s, message + "; no index written", {o.src, o.from_list, o.out}};
  }
  LogPack(r);
  return r.index_path;
}

void SetBuildError(const BuildError& e) {
  try {
    const Status& s = e.status;
    const char* kind = s.code() == Status::Code::kCorruption ? "corrupt"
                       : s.fetch_failed()                    ? "fetch"
                                                             : "";
    py::object make = py::module_::import("shardfs._write").attr("_error");
    py::list paths;
    for (const std::string& p : e.paths) {
      if (!p.empty()) paths.append(FsText(p));
    }
    // A system call's own errno (ENOENT for a missing source, EACCES, ...)
    // where the Status has one, as Python's os functions raise it.
    const int err = s.sys_errno() != 0 ? s.sys_errno() : ToErrno(s);
    py::object exc = make(err, kind, FsText(e.message), paths);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  }
}

}  // namespace

}  // namespace shardfs::python_build

PYBIND11_MODULE(_build, m) {
  using namespace shardfs::python_build;
  using shardfs::python::DrainLog;
  m.doc() =
      "The write side of shardfs: index build and pack (see shardfs.Index.build, shardfs.pack).";
  InstallLogQueue();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const BuildError& e) {
      SetBuildError(e);
    }
  });
  using Drain = py::call_guard<DrainOnReturn>;
  m.def("_drain_log", &DrainLog);
  m.def("build_index", &BuildIndexCall, Drain(), py::arg("out"), py::arg("shards"),
        py::arg("options"));
  m.def("pack", &PackCall, Drain(), py::arg("src"), py::arg("out"), py::arg("options"));
}
