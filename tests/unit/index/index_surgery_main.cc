// index_surgery INDEX NAME VALUE: sets meta key NAME of a built index to
// VALUE, bypassing every check. Test-only: the integration tests craft
// damaged indexes with it (Python has no RocksDB binding here).
#include <cstdio>
#include <string>

#include "index/schema.h"
#include "tests/unit/index/index_surgery.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: index_surgery INDEX META_NAME VALUE\n");
    return 2;
  }
  std::string err = shardfs::testing::EditIndex(
      argv[1], {{shardfs::index::EncodeMetaKey(argv[2]), std::string(argv[3])}});
  if (!err.empty()) {
    std::fprintf(stderr, "index_surgery: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
