#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace shardfs {

Status Status::FromErrno(int err, std::string_view what) {
  Status s(Code::kIoError, fmt::format("{}: {}", what, std::strerror(err)));
  s.errno_ = err;
  return s;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  Status s(code_, fmt::format("{}: {}", prefix, message_));
  s.errno_ = errno_;
  s.fetch_failed_ = fetch_failed_;
  return s;
}

Status Status::AsFetchFailure() const {
  Status s = *this;
  s.fetch_failed_ = !ok();
  return s;
}

int ToErrno(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk:
      return 0;
    case Status::Code::kNotFound:
      return ENOENT;
    case Status::Code::kInvalidArgument:
      return EINVAL;
    case Status::Code::kNotADirectory:
      return ENOTDIR;
    case Status::Code::kIsADirectory:
      return EISDIR;
    case Status::Code::kTooManyLinks:
      return ELOOP;
    case Status::Code::kAlreadyExists:
      return EEXIST;
    // Bytes that cannot be served as indexed, for whatever reason (a bad or
    // missing shard, a checksum mismatch, no checksum to verify with, a
    // damaged index, the daemon out of descriptors): the read fails, it
    // never returns something else.
    case Status::Code::kCorruption:
    case Status::Code::kIoError:
    case Status::Code::kNotSupported:
      return EIO;
  }
  return EIO;
}

}  // namespace shardfs
