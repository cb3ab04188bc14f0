#include "src/python/shardfs/handle.h"

#include <cstdio>
#include <cstdlib>
#include <set>

namespace shardfs::python {

thread_local std::string current_index;

[[noreturn]] void Throw(const Status& s, std::string filename) {
  throw StatusError{s, std::move(filename), current_index};
}

std::atomic<uint64_t> fork_generation{0};
std::atomic<bool> opened_any{false};

void ExitAtOnce(int status, void*) {
  std::fflush(nullptr);
  ::_exit(status);
}

std::mutex registry_mu;
std::set<Handle*>* registry = new std::set<Handle*>();

// db_mu is held around every open and every close of a volume's RocksDB
// database, and taken by fork() last (pthread_atfork): RocksDB's process-wide periodic
// task scheduler takes a mutex of its own in each open and close, and a
// fork() while another thread held it would leave it locked for ever in the
// child (a DataLoader worker forked while a thread opened a validation set
// blocked in its first open). Lock order: registry_mu, a handle's mu_, then
// db_mu.
std::mutex db_mu;

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

}  // namespace shardfs::python
