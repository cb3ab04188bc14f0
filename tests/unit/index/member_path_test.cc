// index/member_path.h: normalising hostile member names; tree order.
#include "index/member_path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "index/schema.h"

namespace shardfs::index {
namespace {

std::string Normalized(std::string_view raw) {
  Result<std::string> r = NormalizeMemberPath(raw);
  EXPECT_TRUE(r.ok()) << "'" << raw << "': " << r.status().message();
  return r.ok() ? r.value() : "<error>";
}

void ExpectRejected(std::string_view raw) {
  Result<std::string> r = NormalizeMemberPath(raw);
  ASSERT_FALSE(r.ok()) << "'" << raw << "' accepted as '" << r.value() << "'";
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << raw;
}

TEST(NormalizeMemberPathTest, StripsDotsSlashesAndAbsoluteRoots) {
  EXPECT_EQ(Normalized("a"), "a");
  EXPECT_EQ(Normalized("./a"), "a");
  EXPECT_EQ(Normalized("/etc/passwd"), "etc/passwd");
  EXPECT_EQ(Normalized("///etc//passwd"), "etc/passwd");
  EXPECT_EQ(Normalized("a//b/./c/"), "a/b/c");
  EXPECT_EQ(Normalized("./././a/./"), "a");
  EXPECT_EQ(Normalized("dir/"), "dir");
  EXPECT_EQ(Normalized("/"), "");
  EXPECT_EQ(Normalized(""), "");
  EXPECT_EQ(Normalized("."), "");
  EXPECT_EQ(Normalized("./"), "");
  EXPECT_EQ(Normalized("//./"), "");
  // Dots that are not whole components are names.
  EXPECT_EQ(Normalized("..."), "...");
  EXPECT_EQ(Normalized(".hidden/..x/x.."), ".hidden/..x/x..");
}

TEST(NormalizeMemberPathTest, RejectsDotDot) {
  ExpectRejected("..");
  ExpectRejected("../x");
  ExpectRejected("a/../b");
  ExpectRejected("a/b/..");
  ExpectRejected("/../etc/passwd");
  ExpectRejected("./..");
  ExpectRejected("a//..//b");
}

TEST(NormalizeMemberPathTest, KeepsOddBytesVerbatim) {
  for (std::string name :
       {std::string("with space"), std::string(" lead"), std::string("trail "),
        std::string("new\nline"), std::string("tab\tx"), std::string("back\\slash"),
        std::string("bad\xff\xfe"), std::string("latin1-\xe9t\xe9"),
        std::string("h\xc3\xa9llo \xe2\x9c\x93"), std::string("nul\0byte", 8), std::string("*?[x]"),
        std::string("-dash")}) {
    EXPECT_EQ(Normalized(name), name);
    EXPECT_EQ(Normalized("./d/" + name + "/"), "d/" + name);
  }
}

TEST(NormalizeMemberPathTest, ComponentLengthLimit) {
  std::string max(kMaxNameLength, 'x');
  EXPECT_EQ(Normalized(max), max);
  EXPECT_EQ(Normalized("a/" + max + "/b"), "a/" + max + "/b");
  ExpectRejected(std::string(kMaxNameLength + 1, 'x'));
  ExpectRejected("a/" + std::string(kMaxNameLength + 1, 'x') + "/b");
  // Long paths are fine as long as each component fits.
  std::string long_path;
  for (int i = 0; i < 40; ++i) long_path += std::string(200, 'a' + i % 26) + "/";
  long_path += "f";
  EXPECT_EQ(Normalized(long_path), long_path);
}

TEST(TreeOrderTest, DirectoryComesRightBeforeItsDescendants) {
  EXPECT_TRUE(TreeOrderLess("a", "a/b"));
  EXPECT_TRUE(TreeOrderLess("a/b", "a.b"));
  EXPECT_TRUE(TreeOrderLess("a.b", "a0"));
  EXPECT_TRUE(TreeOrderLess("a", "a0"));
  EXPECT_TRUE(TreeOrderLess("a/zzz", "a.b"));
  EXPECT_TRUE(TreeOrderLess("a/\xff", "a!"));
  EXPECT_TRUE(TreeOrderLess("", "a"));
  EXPECT_TRUE(TreeOrderLess("a0", "a\xff"));  // Bytes compare unsigned.
  EXPECT_FALSE(TreeOrderLess("a/b", "a"));
  EXPECT_FALSE(TreeOrderLess("a.b", "a/b"));
  EXPECT_FALSE(TreeOrderLess("a", "a"));
  EXPECT_FALSE(TreeOrderLess("", ""));
}

// Independent model: a tree of components, visited depth-first with
// children in bytewise (unsigned) name order. Sorting by TreeOrderLess must
// give exactly this preorder.
struct ModelNode {
  std::map<std::string, std::unique_ptr<ModelNode>> children;  // std::string compares unsigned.
};

void Preorder(const ModelNode& n, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& [name, child] : n.children) {
    std::string path = prefix.empty() ? name : prefix + "/" + name;
    out->push_back(path);
    Preorder(*child, path, out);
  }
}

TEST(TreeOrderTest, SortingGivesDepthFirstNameOrder) {
  std::mt19937 gen(12345);
  // Alphabet with the bytes that sit around '/' (0x2f) and high bytes.
  const std::string alphabet = std::string("\x01 !-./0aAz~", 11) + "\x7f\x80\xff";
  ModelNode root;
  std::vector<std::string> paths;
  for (int i = 0; i < 3000; ++i) {
    int depth = 1 + gen() % 4;
    std::string path;
    ModelNode* n = &root;
    for (int d = 0; d < depth; ++d) {
      std::string comp;
      int len = 1 + gen() % 3;
      for (int k = 0; k < len; ++k) {
        char c = alphabet[gen() % alphabet.size()];
        if (c == '/') c = '.';
        comp.push_back(c);
      }
      path += (d ? "/" : "") + comp;
      auto& slot = n->children[comp];
      if (!slot) slot = std::make_unique<ModelNode>();
      n = slot.get();
      paths.push_back(path);  // Every prefix is a path of the tree too.
    }
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::shuffle(paths.begin(), paths.end(), gen);
  std::sort(paths.begin(), paths.end(),
            [](const std::string& a, const std::string& b) { return TreeOrderLess(a, b); });
  std::vector<std::string> want;
  Preorder(root, "", &want);
  ASSERT_EQ(paths.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(paths[i], want[i]) << "position " << i;
  }
}

TEST(PathPartsTest, ParentAndBase) {
  EXPECT_EQ(ParentPath("a/b/c"), "a/b");
  EXPECT_EQ(BaseName("a/b/c"), "c");
  EXPECT_EQ(ParentPath("a"), "");
  EXPECT_EQ(BaseName("a"), "a");
  EXPECT_EQ(ParentPath(""), "");
  EXPECT_EQ(BaseName(""), "");
  EXPECT_EQ(ParentPath("dir with space/new\nline"), "dir with space");
  EXPECT_EQ(BaseName("dir with space/new\nline"), "new\nline");
}

}  // namespace
}  // namespace shardfs::index
