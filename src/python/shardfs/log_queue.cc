#include "src/python/shardfs/log_queue.h"

#include <pthread.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "base/log.h"

namespace py = pybind11;

namespace shardfs::python {

namespace {

struct Message {
  log::Level level;
  std::string text, shard, path, reason;
};

// Enough for every shard of an index to fail once between two calls; a
// flood beyond it is counted, not kept.
constexpr size_t kMaxQueued = 4096;

std::mutex queue_mu;
std::deque<Message>* queue = new std::deque<Message>;  // Guarded by queue_mu. Never freed.
uint64_t dropped = 0;                                  // Guarded by queue_mu.

void Enqueue(log::Level level, std::string_view text, const log::Fields& f) {
  std::lock_guard<std::mutex> l(queue_mu);
  if (queue->size() >= kMaxQueued) {
    ++dropped;
    return;
  }
  queue->push_back(Message{level, std::string(text), std::string(f.shard), std::string(f.path),
                           std::string(f.reason)});
}

void LockQueue() { queue_mu.lock(); }
void UnlockQueue() { queue_mu.unlock(); }
void ClearQueueInChild() {
  queue->clear();
  dropped = 0;
  queue_mu.unlock();
}

// Text of the core (paths are bytes) as Python's os functions decode it.
py::object FsText(const std::string& s) {
  PyObject* o = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// Python's logging levels.
int PyLevel(log::Level level) {
  switch (level) {
    case log::Level::kDebug:
      return 10;
    case log::Level::kInfo:
      return 20;
    case log::Level::kWarning:
      return 30;
    default:
      return 40;
  }
}

}  // namespace

void InstallLogQueue() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(&LockQueue, &UnlockQueue, &ClearQueueInChild);
    log::SetSink(&Enqueue);
  });
}

void DrainLog() noexcept {
  std::deque<Message> taken;
  uint64_t lost;
  {
    std::lock_guard<std::mutex> l(queue_mu);
    if (queue->empty() && dropped == 0) return;
    taken.swap(*queue);
    lost = std::exchange(dropped, 0);
  }
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  try {
    py::list records;
    for (const Message& m : taken) {
      records.append(py::make_tuple(PyLevel(m.level), FsText(m.text), FsText(m.shard),
                                    FsText(m.path), FsText(m.reason)));
    }
    py::module_::import("shardfs._errors").attr("_emit")(records, lost);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("shardfs: handing the core's messages to logging");
  } catch (...) {
  }
  PyErr_Restore(type, value, trace);
}

void SetStatusError(const Status& status, const std::string& filename, const std::string& index) {
  const char* kind = status.code() == Status::Code::kCorruption ? "corrupt"
                     : status.fetch_failed()                    ? "fetch"
                                                                : "";
  try {
    py::object make = py::module_::import("shardfs._errors").attr("_from_status");
    py::object exc =
        make(ToErrno(status), kind, FsText(status.message()), FsText(filename), FsText(index));
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  }
}

}  // namespace shardfs::python
