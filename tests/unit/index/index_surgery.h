// Test-only surgery on a finished index: writes or deletes raw keys with
// RocksDB directly, the way damage or a hand edit would, so that tests can
// see what the reader and the CLI make of it. Used by the unit tests and by
// the `index_surgery` helper the integration tests run.
#ifndef SHARDFS_TESTS_UNIT_INDEX_INDEX_SURGERY_H_
#define SHARDFS_TESTS_UNIT_INDEX_INDEX_SURGERY_H_

#include <optional>
#include <string>
#include <vector>

namespace shardfs::testing {

struct KeyEdit {
  std::string key;
  std::optional<std::string> value;  // std::nullopt: delete the key.
};

// Applies `edits` to the index at `index_path` in one batch and flushes them
// into a table file. Returns "" on success, else what RocksDB said.
std::string EditIndex(const std::string& index_path, const std::vector<KeyEdit>& edits);

}  // namespace shardfs::testing

#endif  // SHARDFS_TESTS_UNIT_INDEX_INDEX_SURGERY_H_
