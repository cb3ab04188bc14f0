// libFuzzer target: the EROFS image writer (src/erofs/image.h). Input bytes
// shape a tree (tests/fuzz/erofs_tree_gen.h): every kind of entry, names of
// any bytes, both inode forms, sparse files aligned or composed. The image
// written must pass the independent checker (src/erofs/check.h) and read
// back as the same tree, entry for entry; anything else aborts. The
// integration tests have the kernel mount such trees (test_kernel_mount.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/erofs_tree_gen.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardfs;
  erofs_test::ByteSource src(std::string_view(reinterpret_cast<const char*>(data), size));
  erofs::ErofsTree tree = erofs_test::MakeTree(src, 300);
  Result<std::string> image = erofs_test::WriteImage(tree);
  if (!image.ok()) {
    std::fprintf(stderr, "writer refused a valid tree: %s\n", image.status().message().c_str());
    std::abort();
  }
  std::vector<uint64_t> devices;
  for (uint32_t blocks : tree.device_blocks) devices.push_back(uint64_t{blocks} * 512);
  Result<std::vector<erofs::ErofsEntry>> read = erofs::CheckErofsImage(*image, devices);
  if (!read.ok()) {
    std::fprintf(stderr, "checker: %s\n", read.status().message().c_str());
    std::abort();
  }
  std::string diff = erofs_test::CompareTree(tree, *read, *image);
  if (!diff.empty()) {
    std::fprintf(stderr, "read back differently: %s\n", diff.c_str());
    std::abort();
  }
  return 0;
}
