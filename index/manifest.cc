#include "index/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <string>

#include "base/coding.h"
#include "base/fd.h"
#include "base/io.h"
#include "index/inode_set.h"

namespace shardfs::index {
namespace {

constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

void PutString(std::string* out, std::string_view s) {
  PutVarint64(out, s.size());
  out->append(s);
}

// Reads the body back; the first failure is kept and every later read
// returns zeros, so a decoder checks once at the end of each part.
class BodyReader {
 public:
  BodyReader(std::string_view body, const std::string& path) : in_(body), path_(path) {}

  uint64_t Number(std::string_view what) {
    uint64_t v = 0;
    if (ok() && !GetVarint64(&in_, &v)) Fail(what);
    return ok() ? v : 0;
  }
  // A count of items that each take at least one byte: no more than the bytes left.
  uint64_t Count(std::string_view what) {
    uint64_t n = Number(what);
    if (ok() && n > in_.size()) Fail(what);
    return ok() ? n : 0;
  }
  std::string String(std::string_view what) {
    uint64_t n = Number(what);
    if (ok() && n > in_.size()) Fail(what);
    if (!ok()) return {};
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  bool ok() const { return status_.ok(); }
  bool done() const { return in_.empty(); }
  void Fail(std::string_view what) {
    if (ok()) {
      status_ =
          Status::Corruption(fmt::format("manifest {}: {} is cut short or malformed", path_, what));
    }
  }
  void Fail(Status s) {
    if (ok()) status_ = std::move(s);
  }
  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  std::string_view in_;
  const std::string& path_;
  Status status_;
};

void EncodeTree(const ManifestTree& t, std::string* out) {
  PutString(out, t.name);
  PutVarint64(out, t.version);
  PutVarint64(out, static_cast<uint64_t>(t.created_ns));
  PutString(out, t.from);
  PutString(out, t.message);
  for (size_t p = 0; p < t.part_views.size(); ++p) {
    PutString(out, t.part_views[p]);
    PutVarint64(out, t.part_max_inode[p]);
    PutVarint64(out, t.shard_bytes[p].size());
    for (uint64_t b : t.shard_bytes[p]) PutVarint64(out, b);
    PutString(out, t.hidden[p]);
  }
  PutVarint64(out, t.files);
  PutVarint64(out, t.dirs);
  PutVarint64(out, t.symlinks);
  PutVarint64(out, t.bytes);
  PutVarint64(out, t.union_dirs.size());
  std::string rec;
  for (const UnionDir& d : t.union_dirs) {
    rec.clear();
    EncodeEntry(d.record, &rec);
    PutString(out, rec);
    PutVarint64(out, d.copies.size());
    for (const auto& [p, inode] : d.copies) {
      PutVarint64(out, p);
      PutVarint64(out, inode);
    }
  }
  PutVarint64(out, t.nlinks.size());
  for (const NlinkOverride& n : t.nlinks) {
    PutVarint64(out, n.partition);
    PutVarint64(out, n.inode);
    PutVarint64(out, n.nlink);
  }
  PutVarint64(out, t.dropped);
  PutVarint64(out, t.dropped_examples.size());
  for (const std::string& e : t.dropped_examples) PutString(out, e);
}

ManifestTree DecodeTree(BodyReader& in, size_t partitions) {
  ManifestTree t;
  t.name = in.String("a tree's name");
  t.version = static_cast<uint32_t>(in.Number("a tree's version"));
  t.created_ns = static_cast<int64_t>(in.Number("a tree's time"));
  t.from = in.String("a tree's source");
  t.message = in.String("a tree's message");
  for (size_t p = 0; p < partitions && in.ok(); ++p) {
    t.part_views.push_back(in.String("a partition's version"));
    t.part_max_inode.push_back(in.Number("a partition's max_inode"));
    uint64_t n = in.Count("a partition's shard bytes");
    std::vector<uint64_t>& bytes = t.shard_bytes.emplace_back();
    for (uint64_t i = 0; i < n && in.ok(); ++i) bytes.push_back(in.Number("a shard's bytes"));
    t.hidden.push_back(in.String("a partition's hidden set"));
  }
  t.files = in.Number("files");
  t.dirs = in.Number("dirs");
  t.symlinks = in.Number("symlinks");
  t.bytes = in.Number("bytes");
  uint64_t dirs = in.Count("union directories");
  for (uint64_t i = 0; i < dirs && in.ok(); ++i) {
    UnionDir& d = t.union_dirs.emplace_back();
    std::string rec = in.String("a union directory's record");
    if (!in.ok()) break;
    // The record is copied into `rec`'s storage only for its fixed fields:
    // a directory record points into nothing.
    if (Status s = DecodeEntry(rec, &d.record);
        !s.ok() || d.record.type != EntryType::kDir || !d.record.target.empty()) {
      in.Fail("a union directory's record");
      break;
    }
    uint64_t copies = in.Count("a union directory's copies");
    for (uint64_t c = 0; c < copies && in.ok(); ++c) {
      uint64_t p = in.Number("a copy's partition");
      uint64_t inode = in.Number("a copy's inode");
      if (p >= partitions) in.Fail("a copy's partition");
      d.copies.emplace_back(static_cast<uint32_t>(p), inode);
    }
  }
  uint64_t nlinks = in.Count("link counts");
  for (uint64_t i = 0; i < nlinks && in.ok(); ++i) {
    NlinkOverride& n = t.nlinks.emplace_back();
    uint64_t p = in.Number("a link count's partition");
    if (p >= partitions) in.Fail("a link count's partition");
    n.partition = static_cast<uint32_t>(p);
    n.inode = in.Number("a link count's inode");
    n.nlink = static_cast<uint32_t>(in.Number("a link count"));
  }
  t.dropped = in.Number("dropped entries");
  uint64_t examples = in.Count("dropped examples");
  for (uint64_t i = 0; i < examples && in.ok(); ++i) {
    t.dropped_examples.push_back(in.String("a dropped example"));
  }
  return t;
}

}  // namespace

VersionRecord TreeRecord(const ManifestTree& t, uint32_t view) {
  VersionRecord r;
  r.view = ViewId{view};
  r.files = t.files;
  r.dirs = t.dirs;
  r.symlinks = t.symlinks;
  r.bytes = t.bytes;
  r.created_ns = t.created_ns;
  r.kind = view == 0 ? VersionKind::kAdd : VersionKind::kCreate;
  r.from = t.from;
  r.message = t.message;
  for (uint64_t m : t.part_max_inode) r.max_inode += m;
  r.base_max_inode = r.max_inode;
  return r;
}

std::string ManifestTree::label() const { return fmt::format("{}@{}", name, version); }

bool IsManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return false;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::string head(kManifestMagic.size(), '\0');
  ssize_t n = pread(fd.get(), head.data(), head.size(), 0);
  return n == static_cast<ssize_t>(head.size()) && head == kManifestMagic;
}

std::string EncodeManifest(const Manifest& m) {
  std::string body;
  PutVarint64(&body, m.partitions.size());
  for (const ManifestPartition& p : m.partitions) {
    PutString(&body, p.ref);
    PutString(&body, p.db_identity);
    PutVarint64(&body, p.shard_count);
    PutString(&body, p.part);
  }
  PutVarint64(&body, m.trees.size());
  for (const ManifestTree& t : m.trees) EncodeTree(t, &body);
  std::string out(kManifestMagic);
  out += body;
  PutFixed64(&out, XXH3_64bits(body.data(), body.size()));
  return out;
}

Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& path) {
  if (!bytes.starts_with(kManifestMagic)) {
    return Status::InvalidArgument(fmt::format("manifest {}: not a shardfs manifest", path));
  }
  bytes.remove_prefix(kManifestMagic.size());
  if (bytes.size() < 8) return Status::Corruption(fmt::format("manifest {}: cut short", path));
  std::string_view body = bytes.substr(0, bytes.size() - 8);
  if (XXH3_64bits(body.data(), body.size()) != DecodeFixed64(bytes.data() + body.size())) {
    return Status::Corruption(
        fmt::format("manifest {}: checksum mismatch (damaged or cut short)", path));
  }
  BodyReader in(body, path);
  Manifest m;
  uint64_t partitions = in.Count("the partition count");
  if (in.ok() && (partitions == 0 || partitions > kMaxPartitions)) in.Fail("the partition count");
  for (uint64_t i = 0; i < partitions && in.ok(); ++i) {
    ManifestPartition& p = m.partitions.emplace_back();
    p.ref = in.String("a partition's reference");
    p.db_identity = in.String("a partition's identity");
    p.shard_count = static_cast<uint32_t>(in.Number("a partition's shard count"));
    p.part = in.String("a partition's part");
    if (in.ok() && p.ref.empty()) in.Fail("a partition's reference");
  }
  uint64_t trees = in.Count("the tree count");
  if (in.ok() && trees == 0) in.Fail("the tree count");
  for (uint64_t i = 0; i < trees && in.ok(); ++i) {
    ManifestTree t = DecodeTree(in, m.partitions.size());
    for (size_t p = 0; p < m.partitions.size() && in.ok(); ++p) {
      if (t.shard_bytes[p].size() > m.partitions[p].shard_count) {
        in.Fail(Status::Corruption(
            fmt::format("manifest {}: {}: partition {} has bytes for {} shards, but {} shards",
                        path, t.label(), p, t.shard_bytes[p].size(), m.partitions[p].shard_count)));
      }
      if (Result<InodeSet> set = InodeSet::Decode(t.hidden[p]); !set.ok()) {
        in.Fail(set.status().WithContext(
            fmt::format("manifest {}: {}: partition {}'s hidden set", path, t.label(), p)));
      }
    }
    m.trees.push_back(std::move(t));
  }
  if (in.ok() && !in.done()) in.Fail("the end (trailing bytes)");
  if (!in.ok()) return in.status();
  return m;
}

Result<Manifest> ReadManifest(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno(errno, fmt::format("manifest {}", path));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, fmt::format("manifest {}", path));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("manifest {}: not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes) {
    return Status::InvalidArgument(
        fmt::format("manifest {}: {} bytes, larger than a manifest can be", path, st.st_size));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  SHARDFS_RETURN_IF_ERROR(PreadExact(fd.get(), bytes.data(), bytes.size(), 0)
                              .WithContext(fmt::format("manifest {}", path)));
  return DecodeManifest(bytes, path);
}

}  // namespace shardfs::index
