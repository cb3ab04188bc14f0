#include "index/external_sort.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <queue>

#include "base/coding.h"
#include "base/fd.h"
#include "base/io.h"
#include "base/log.h"

namespace shardfs::index {
namespace {

// The most a run holds, so that offsets fit 32 bits.
constexpr size_t kMaxRunBytes = size_t{1} << 31;

// Reads one run file's records in order through a buffer.
class RunReader {
 public:
  RunReader(std::string path, size_t buffer_bytes)
      : path_(std::move(path)), buf_(std::max<size_t>(buffer_bytes, 4096)) {}

  Status Open() {
    fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd_.valid()) return Status::FromErrno(errno, fmt::format("run file {}", path_));
    return Next();
  }

  bool done() const { return done_; }
  std::string_view key() const { return key_; }
  std::string_view value() const { return value_; }

  // Moves to the next record; done() after the last.
  Status Next() {
    for (;;) {
      std::string_view in(buf_.data() + pos_, end_ - pos_);
      uint64_t klen = 0, vlen = 0;
      std::string_view rest = in;
      if (GetVarint64(&rest, &klen) && GetVarint64(&rest, &vlen) && rest.size() >= klen + vlen) {
        key_ = rest.substr(0, klen);
        value_ = rest.substr(klen, vlen);
        pos_ = static_cast<size_t>(rest.data() + klen + vlen - buf_.data());
        return Status::Ok();
      }
      // Not a whole record in the buffer: keep the tail, read more.
      const size_t tail = end_ - pos_;
      if (eof_) {
        if (tail == 0) {
          done_ = true;
          return Status::Ok();
        }
        return Status::IoError(fmt::format("run file {}: truncated record", path_));
      }
      std::memmove(buf_.data(), buf_.data() + pos_, tail);
      pos_ = 0;
      end_ = tail;
      if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);  // A record larger than the buffer.
      const ssize_t n = ::read(fd_.get(), buf_.data() + end_, buf_.size() - end_);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, fmt::format("run file {}", path_));
      }
      if (n == 0) eof_ = true;
      end_ += static_cast<size_t>(n);
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false, done_ = false;
  std::string_view key_, value_;
};

// Merges `runs` (at most a fan-in's worth) into `fn`.
Status MergeOnce(const std::vector<std::string>& runs, const RecordFn& fn, size_t buffer_bytes) {
  std::vector<std::unique_ptr<RunReader>> readers;
  readers.reserve(runs.size());
  for (const std::string& run : runs) {
    readers.push_back(std::make_unique<RunReader>(run, buffer_bytes));
    SHARDFS_RETURN_IF_ERROR(readers.back()->Open());
  }
  // A min-heap of run numbers by current key, then run number.
  auto greater = [&](size_t a, size_t b) {
    const int c = readers[a]->key().compare(readers[b]->key());
    return c != 0 ? c > 0 : a > b;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(greater)> heap(greater);
  for (size_t i = 0; i < readers.size(); ++i) {
    if (!readers[i]->done()) heap.push(i);
  }
  while (!heap.empty()) {
    const size_t i = heap.top();
    heap.pop();
    RunReader& r = *readers[i];
    SHARDFS_RETURN_IF_ERROR(fn(r.key(), r.value()));
    SHARDFS_RETURN_IF_ERROR(r.Next());
    if (!r.done()) heap.push(i);
  }
  return Status::Ok();
}

void AppendRecord(std::string_view key, std::string_view value, std::string* out) {
  PutVarint64(out, key.size());
  PutVarint64(out, value.size());
  out->append(key);
  out->append(value);
}

}  // namespace

RunWriter::RunWriter(std::string dir, std::string prefix, size_t budget_bytes,
                     std::atomic<uint64_t>* counter)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      budget_(std::min(std::max<size_t>(budget_bytes, 4096), kMaxRunBytes)),
      counter_(counter) {}

Status RunWriter::Add(std::string_view key, std::string_view value) {
  // Each record costs its bytes plus its slot.
  if (!arena_.empty() &&
      arena_.size() + sizeof(Slot) * starts_.size() + key.size() + value.size() > budget_) {
    SHARDFS_RETURN_IF_ERROR(Flush());
  }
  if (arena_.capacity() == 0) {
    // Once, to the budget: growing by doubling would overshoot it.
    arena_.reserve(budget_ + 64);
    starts_.reserve(budget_ / (sizeof(Slot) + 32));
  }
  Slot slot;
  slot.start = static_cast<uint32_t>(arena_.size());
  PutVarint64(&arena_, key.size());
  PutVarint64(&arena_, value.size());
  slot.key_off = static_cast<uint32_t>(arena_.size() - slot.start);
  slot.key_len = static_cast<uint32_t>(key.size());
  arena_.append(key);
  arena_.append(value);
  slot.len = static_cast<uint32_t>(arena_.size() - slot.start);
  char prefix[8] = {};
  std::memcpy(prefix, key.data(), std::min<size_t>(8, key.size()));
  slot.prefix = DecodeBigEndian64(prefix);
  starts_.push_back(slot);
  ++records_;
  return Status::Ok();
}

Status RunWriter::Flush() {
  if (starts_.empty()) return Status::Ok();
  const char* base = arena_.data();
  // Equal keys keep the order they were added in (their starts). Input in
  // order already (shards written in tree order, inodes as numbered) costs
  // one comparison a record.
  auto less = [base](const Slot& a, const Slot& b) {
    if (a.prefix != b.prefix) return a.prefix < b.prefix;
    const int c = std::string_view(base + a.start + a.key_off, a.key_len)
                      .compare(std::string_view(base + b.start + b.key_off, b.key_len));
    return c != 0 ? c < 0 : a.start < b.start;
  };
  if (!std::is_sorted(starts_.begin(), starts_.end(), less)) {
    std::sort(starts_.begin(), starts_.end(), less);
  }
  const std::string path = fmt::format("{}/{}-{}", dir_, prefix_, counter_->fetch_add(1));
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, fmt::format("run file {}", path));
  runs_.push_back(path);
  // Records in key order through one write buffer.
  std::string out;
  out.reserve(1 << 20);
  for (size_t k = 0; k < starts_.size(); ++k) {
    out.append(base + starts_[k].start, starts_[k].len);
    if (out.size() >= (1 << 20) || k + 1 == starts_.size()) {
      if (!WriteFully(fd.get(), out.data(), out.size())) {
        return Status::FromErrno(errno, fmt::format("run file {}", path));
      }
      out.clear();
    }
  }
  // Give the memory back: a run's buffer is the writer's whole budget.
  std::string().swap(arena_);
  std::vector<Slot>().swap(starts_);
  return Status::Ok();
}

Status MergeRuns(std::vector<std::string> runs, const RecordFn& fn, size_t buffer_bytes,
                 const std::string& dir, const std::string& prefix, size_t max_fan_in) {
  max_fan_in = std::max<size_t>(max_fan_in, 2);
  uint64_t merged = 0;
  // Too many runs to open at once: merge the first groups into larger runs,
  // keeping their order (and so the order of equal keys).
  while (runs.size() > max_fan_in) {
    std::vector<std::string> next;
    for (size_t from = 0; from < runs.size(); from += max_fan_in) {
      const size_t to = std::min(runs.size(), from + max_fan_in);
      std::vector<std::string> group(runs.begin() + from, runs.begin() + to);
      if (group.size() == 1) {
        next.push_back(group[0]);
        continue;
      }
      const std::string path = fmt::format("{}/{}-merge-{}", dir, prefix, merged++);
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd.valid()) return Status::FromErrno(errno, fmt::format("run file {}", path));
      std::string out;
      Status s = MergeOnce(
          group,
          [&](std::string_view key, std::string_view value) -> Status {
            AppendRecord(key, value, &out);
            if (out.size() >= buffer_bytes && !WriteFully(fd.get(), out.data(), out.size())) {
              return Status::FromErrno(errno, fmt::format("run file {}", path));
            }
            if (out.size() >= buffer_bytes) out.clear();
            return Status::Ok();
          },
          buffer_bytes);
      SHARDFS_RETURN_IF_ERROR(s);
      if (!out.empty() && !WriteFully(fd.get(), out.data(), out.size())) {
        return Status::FromErrno(errno, fmt::format("run file {}", path));
      }
      for (const std::string& run : group) ::unlink(run.c_str());
      next.push_back(path);
    }
    runs = std::move(next);
  }
  return MergeOnce(runs, fn, buffer_bytes);
}

}  // namespace shardfs::index
