#include "src/python/shardfs/path_args.h"

#include <Python.h>

#include <string>
#include <string_view>
#include <vector>

namespace py = pybind11;

namespace shardfs::python {

std::string PathArg(py::handle p) { return PathRef(p).str(); }

PathRef::PathRef(py::handle p) {
  if (PyUnicode_Check(p.ptr())) {
    Py_ssize_t n = 0;
    if (const char* s = PyUnicode_AsUTF8AndSize(p.ptr(), &n)) {
      view_ = std::string_view(s, static_cast<size_t>(n));
    } else {
      PyErr_Clear();
    }
  }
  if (view_.empty()) {
    PyObject* b = nullptr;
    if (!PyUnicode_FSConverter(p.ptr(), &b)) throw py::error_already_set();
    owner_ = py::reinterpret_steal<py::object>(b);
    view_ = std::string_view(PyBytes_AS_STRING(b), static_cast<size_t>(PyBytes_GET_SIZE(b)));
  }
  if (view_.find('\0') != std::string_view::npos) throw py::value_error("embedded null byte");
}

std::string PlainPrefix(std::string_view prefix) {
  std::vector<std::string_view> parts;
  bool dir = prefix.empty() || prefix.ends_with('/');
  size_t at = 0;
  while (at <= prefix.size()) {
    size_t end = prefix.find('/', at);
    if (end == std::string_view::npos) end = prefix.size();
    std::string_view comp = prefix.substr(at, end - at);
    const bool last = end == prefix.size();
    if (comp == "." || comp == "..") {
      if (comp == ".." && !parts.empty()) parts.pop_back();
      if (last) dir = true;
    } else if (!comp.empty()) {
      parts.push_back(comp);
    }
    at = end + 1;
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.push_back('/');
    out.append(parts[i]);
  }
  if (dir && !out.empty()) out.push_back('/');
  return out;
}

}  // namespace shardfs::python
