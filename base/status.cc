#include "base/status.h"

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
  return s;
}

}  // namespace shardfs
