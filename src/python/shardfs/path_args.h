// The path arguments of the extension (_shardfs.cc): what Python's os
// functions take, checked as they check it.
#ifndef SHARDFS_SRC_PYTHON_SHARDFS_PATH_ARGS_H_
#define SHARDFS_SRC_PYTHON_SHARDFS_PATH_ARGS_H_

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

namespace shardfs::python {

// A path argument: str (UTF-8, or the file system encoding for surrogate
// escapes), bytes or os.PathLike, as os functions take it; ValueError for an
// embedded NUL, as open() and os.stat() raise (a C string would end there,
// and another file would be named).
std::string PathArg(pybind11::handle p);

// The same argument without a copy of a str's bytes: a view of its UTF-8
// form (which the str keeps while it lives), or of the bytes os.fsencode
// made of it, held here. REQUIRES: the GIL to make and destroy it, not to
// read view(); the argument outlives it.
class PathRef {
 public:
  explicit PathRef(pybind11::handle p);
  std::string_view view() const { return view_; }
  std::string str() const { return std::string(view_); }

 private:
  std::string_view view_;
  pybind11::object owner_;  // The encoded bytes, if any.
};

// A relative path's prefix made plain, as os.path.normpath makes a path:
// "." and empty components dropped, ".." taking away the component before
// it (none above the root), and a final "." or ".." naming a directory
// ("a/." is "a/"). Every path built on it lies inside the tree.
std::string PlainPrefix(std::string_view prefix);

}  // namespace shardfs::python

#endif  // SHARDFS_SRC_PYTHON_SHARDFS_PATH_ARGS_H_
