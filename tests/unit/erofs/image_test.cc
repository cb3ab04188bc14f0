// The EROFS image writer against the independent checker: random trees read
// back entry for entry, hand-made edge cases, the format's limits, and the
// checker itself catching damage (so that agreement means something).
#include <gtest/gtest.h>

#include <random>

#include "base/coding.h"
#include "tests/fuzz/erofs_tree_gen.h"

namespace shardfs::erofs {
namespace {

using erofs_test::ByteSource;
using index::EntryType;

std::vector<uint64_t> DeviceBytes(const ErofsTree& t) {
  std::vector<uint64_t> out;
  for (uint32_t b : t.device_blocks) out.push_back(uint64_t{b} * 512);
  return out;
}

// Writes, checks and compares; returns the image.
std::string RoundTrip(const ErofsTree& t) {
  Result<std::string> image = erofs_test::WriteImage(t);
  EXPECT_TRUE(image.ok()) << image.status().message();
  if (!image.ok()) return "";
  Result<std::vector<ErofsEntry>> read = CheckErofsImage(*image, DeviceBytes(t));
  EXPECT_TRUE(read.ok()) << read.status().message();
  if (read.ok()) {
    EXPECT_EQ(erofs_test::CompareTree(t, *read, *image), "");
  }
  return *image;
}

TEST(ErofsImageTest, RandomTreesReadBackAsWritten) {
  std::mt19937_64 rng(42);
  size_t nodes = 0, composed = 0, aligned_sparse = 0, inline_links = 0, long_links = 0, links = 0,
         big_ids = 0;
  for (int seed = 0; seed < 80; ++seed) {
    std::string bytes(6000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    ByteSource src(bytes);
    ErofsTree t = erofs_test::MakeTree(src, 400);
    RoundTrip(t);
    nodes += t.nodes.size();
    for (const ErofsNode& n : t.nodes) {
      composed += !n.copied.empty();
      aligned_sparse += n.sparse && n.copied.empty() && !n.extents.empty();
      inline_links += n.type == EntryType::kSymlink && n.target.size() <= 448;
      long_links += n.type == EntryType::kSymlink && n.target.size() > 448;
      links += n.type != EntryType::kDir && n.nlink > 1;
      big_ids += n.uid > 65535;
    }
  }
  std::printf(
      "%zu nodes, %zu composed, %zu aligned sparse, %zu/%zu symlinks inline/not, %zu links, %zu "
      "big ids\n",
      nodes, composed, aligned_sparse, inline_links, long_links, links, big_ids);
  // The trees had every kind of entry the writer handles.
  EXPECT_GT(nodes, 80u * 100);
  EXPECT_GT(composed, 200u);
  EXPECT_GT(aligned_sparse, 200u);
  EXPECT_GT(inline_links, 100u);
  EXPECT_GT(long_links, 300u);
  EXPECT_GT(links, 300u);
  EXPECT_GT(big_ids, 500u);
}

ErofsNode Dir() {
  ErofsNode n;
  n.type = EntryType::kDir;
  n.mode = S_IFDIR | 0755;
  n.nlink = 2;
  return n;
}

ErofsNode File(uint64_t size, uint32_t device, uint64_t offset) {
  ErofsNode n;
  n.mode = S_IFREG | 0644;
  n.size = size;
  n.device = device;
  n.offset = offset;
  return n;
}

uint32_t Add(ErofsTree* t, uint32_t parent, std::string name, ErofsNode n) {
  n.parent = parent;
  n.ino = t->nodes.size() + 1;
  t->nodes.push_back(std::move(n));
  uint32_t id = static_cast<uint32_t>(t->nodes.size() - 1);
  t->nodes[parent].children.emplace_back(std::move(name), id);
  return id;
}

ErofsTree OneDevice() {
  ErofsTree t;
  t.nodes.push_back(Dir());
  t.device_blocks.push_back(1u << 20);
  t.device_shards.push_back(index::ShardId{7});
  return t;
}

TEST(ErofsImageTest, LayoutOfASmallTree) {
  ErofsTree t = OneDevice();
  // Names around "." and ".." in byte order, and enough of them for several
  // directory blocks.
  Add(&t, 0, "-dash", File(10, 1, 512));
  Add(&t, 0, ".hidden", File(0, 0, 0));
  Add(&t, 0, "a", File(512, 1, 4096));
  uint32_t d = Add(&t, 0, "d", Dir());
  for (int i = 0; i < 100; ++i)
    Add(&t, d, std::string(40, 'a' + i % 26) + std::to_string(i), File(1, 1, 0));
  for (ErofsNode& n : t.nodes) std::sort(n.children.begin(), n.children.end());
  std::string image = RoundTrip(t);
  ASSERT_GT(image.size(), 1152u);
  EXPECT_EQ(DecodeFixed32(image.data() + 1024), 0xE0F5E1E2u);
  EXPECT_EQ(image[1024 + 12], 9);                          // 512-byte blocks
  EXPECT_EQ(DecodeFixed16(image.data() + 1024 + 14), 36);  // root nid: byte 1152
  EXPECT_EQ(DecodeFixed16(image.data() + 1024 + 86), 1);   // one extra device
  EXPECT_EQ(DecodeFixed32(image.data() + 1024 + 80), 0xCu);
  EXPECT_EQ(image.size() % 512, 0u);
}

TEST(ErofsImageTest, TheFormatsLimitsAreRefused) {
  ErofsTree t = OneDevice();
  t.device_blocks.assign(kErofsMaxDevices + 1, 1);
  Result<std::string> image = erofs_test::WriteImage(t);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), Status::Code::kInvalidArgument);

  ErofsTree u = OneDevice();
  Add(&u, 0, "odd", File(100, 1, 1000));  // Not at a 512-byte block.
  image = erofs_test::WriteImage(u);
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("not a 512-byte block"), std::string::npos);
}

TEST(ErofsImageTest, TheCheckerSeesDamage) {
  ErofsTree t = OneDevice();
  Add(&t, 0, "a", File(10, 1, 0));
  Add(&t, 0, "b", File(10, 1, 512));
  Add(&t, 0, "c", File(10, 1, 1024));
  std::string good = RoundTrip(t);
  ASSERT_FALSE(good.empty());
  auto check = [&](std::string image) {
    return CheckErofsImage(image, DeviceBytes(t)).status().message();
  };
  std::string bad = good;
  bad[1024] ^= 1;
  EXPECT_NE(check(bad).find("no EROFS magic"), std::string::npos);
  // The root's entries: ".", "..", "a", "b", "c"; "b" and "c" swapped.
  size_t at = good.find("..abc");
  ASSERT_NE(at, std::string::npos);
  bad = good;
  bad[at + 3] = 'c';
  bad[at + 4] = 'b';
  EXPECT_NE(check(bad).find("out of order"), std::string::npos);
  // A file's chunk pointing past its device.
  EXPECT_NE(CheckErofsImage(good, {100}).status().message().find("blocks or address"),
            std::string::npos);
}

}  // namespace
}  // namespace shardfs::erofs
