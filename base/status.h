// Status and Result<T>: the error currency at every library boundary.
//
// A Status is a code plus a human message that names the file, the offset and
// what was expected ("shard a.tar: header at byte 512: checksum mismatch").
// errno is taken in where a system call fails, by Status::FromErrno (an
// IoError keeps it: sys_errno(), which callers may read to tell a transient
// failure from a lasting one), and given out only at the edges that speak
// errno (the FUSE adapter's replies, the Python package's OSErrors), by
// ToErrno(const Status&).
#ifndef SHARDFS_BASE_STATUS_H_
#define SHARDFS_BASE_STATUS_H_

#include <fmt/format.h>

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace shardfs {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kInvalidArgument,  // Bad input: a malformed archive, a bad option.
    kCorruption,       // Stored data disagrees with itself or its checksum.
    kIoError,          // The operating system said no.
    kNotSupported,     // Valid input we refuse (sparse members, newer schema).
    kAlreadyExists,
    kNotADirectory,  // A directory operation on something else.
    kIsADirectory,   // A file operation on a directory.
    kTooManyLinks,   // A path walk met too many symbolic links (a loop).
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  // An IoError whose message ends with strerror(err).
  static Status FromErrno(int err, std::string_view what);
  static Status NotSupported(std::string msg) { return {Code::kNotSupported, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status NotADirectory(std::string msg) { return {Code::kNotADirectory, std::move(msg)}; }
  static Status IsADirectory(std::string msg) { return {Code::kIsADirectory, std::move(msg)}; }
  static Status TooManyLinks(std::string msg) { return {Code::kTooManyLinks, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno an IoError came from, 0 otherwise.
  int sys_errno() const { return errno_; }
  // True if this IoError is a remote read that gave up (the server
  // unreachable or refusing, its retry budget spent), as opposed to a local
  // system call's failure or bytes that disagree with the index
  // (Corruption). The code stays kIoError: the edges still say EIO; the
  // Python package raises shardfs.FetchError for it.
  bool fetch_failed() const { return fetch_failed_; }
  // Returns a copy with fetch_failed() true.
  Status AsFetchFailure() const;

  // Returns a copy whose message is "<prefix>: <message>".
  Status WithContext(std::string_view prefix) const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  int errno_ = 0;
  bool fetch_failed_ = false;
  std::string message_;
};

// A value or a non-ok Status; a small std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design.
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// The errno a Status becomes where a caller speaks errno: ENOENT, EINVAL,
// ENOTDIR, EISDIR, EEXIST; EIO for bytes that cannot be served as indexed.
int ToErrno(const Status& s);

}  // namespace shardfs

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define SHARDFS_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::shardfs::Status shardfs_status_ = (expr);        \
    if (!shardfs_status_.ok()) return shardfs_status_; \
  } while (0)

// Declares `lhs` from the value of the Result `rexpr`, or returns its Status
// from the enclosing function:  SHARDFS_ASSIGN_OR_RETURN(auto db, Open(path));
#define SHARDFS_ASSIGN_OR_RETURN(lhs, rexpr) \
  SHARDFS_ASSIGN_OR_RETURN_IMPL_(SHARDFS_CONCAT_(shardfs_result_, __LINE__), lhs, rexpr)
#define SHARDFS_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                   \
  if (!result.ok()) return result.status();                \
  lhs = std::move(result).value()
#define SHARDFS_CONCAT_(a, b) SHARDFS_CONCAT_INNER_(a, b)
#define SHARDFS_CONCAT_INNER_(a, b) a##b

#endif  // SHARDFS_BASE_STATUS_H_
