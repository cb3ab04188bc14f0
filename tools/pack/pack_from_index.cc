#include "tools/pack/pack_from_index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "base/io.h"
#include "base/strings.h"
#include "index/fingerprint.h"
#include "index/member_path.h"
#include "src/codec/decoded_shard.h"
#include "tools/pack/verify.h"

namespace shardfs::pack {
namespace {

SourceEntry EntryOf(std::string path, const index::EntryRecord& rec) {
  SourceEntry e;
  e.path = std::move(path);
  switch (rec.type) {
    case index::EntryType::kDir:
      e.kind = SourceKind::kDir;
      break;
    case index::EntryType::kSymlink:
      e.kind = SourceKind::kSymlink;
      break;
    default:
      e.kind = SourceKind::kFile;
      break;
  }
  e.mode = rec.mode;
  e.uid = rec.uid;
  e.gid = rec.gid;
  e.mtime_ns = rec.mtime_ns;
  e.size = rec.size;
  // One "device" for the whole index: names of one inode are hard links.
  e.dev = 0;
  e.ino = rec.inode.value;
  e.nlink = rec.nlink;
  e.link_target = std::string(rec.target);
  if (e.kind == SourceKind::kFile) {
    auto d = std::make_shared<StoredData>();
    d->shard = rec.shard.value;
    d->sparse = rec.sparse();
    if (d->sparse) {
      for (size_t i = 0; i < index::ExtentCount(rec); ++i)
        d->ranges.push_back(index::GetExtent(rec, i));
    } else if (rec.size > 0) {
      d->ranges.push_back(index::Extent{0, rec.size, rec.offset});
    }
    d->has_xxh3 = rec.has_checksum();
    d->xxh3 = rec.xxh3;
    e.stored = std::move(d);
  }
  return e;
}

// The view's tree, in tree order, every file's range checked to lie inside
// its shard as indexed.
Status ListTree(const index::IndexReader& r, TreeScan* scan) {
  index::EntryRecord root;
  index::RecordHolder holder;
  SHARDFS_RETURN_IF_ERROR(r.GetInode(index::kRootInode, &root, &holder));
  scan->entries.push_back(EntryOf("", root));
  std::vector<std::pair<std::string, index::InodeId>> dirs = {{"", index::kRootInode}};
  Status bad;
  while (!dirs.empty() && bad.ok()) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const std::string dir = std::move(dirs.back().first);
    const index::InodeId inode = dirs.back().second;
    dirs.pop_back();
    SHARDFS_RETURN_IF_ERROR(
        r.ForEachChild(inode, "", [&](std::string_view name, const index::EntryRecord& rec) {
          std::string path = JoinPath(dir, name);
          if (Status s = r.CheckFileRange(rec); !s.ok()) {
            bad = s.WithContext(ShownPath(path));
            return false;
          }
          if (rec.encoded()) {
            bad = Status::NotSupported(fmt::format(
                "{}: a deflated member of the zip archive {}: pack --from-index copies stored "
                "bytes only",
                ShownPath(path), r.ShardPath(rec.shard)));
            return false;
          }
          if (rec.type == index::EntryType::kDir) dirs.emplace_back(path, rec.inode);
          scan->entries.push_back(EntryOf(std::move(path), rec));
          return true;
        }));
  }
  SHARDFS_RETURN_IF_ERROR(bad);
  std::sort(scan->entries.begin(), scan->entries.end(),
            [](const SourceEntry& a, const SourceEntry& b) {
              return index::TreeOrderLess(a.path, b.path);
            });
  return Status::Ok();
}

// Opens every shard a file of `src` uses and checks it is the shard the
// index describes.
Status OpenShards(IndexSource* src) {
  const auto& metas = src->reader->shards();
  std::vector<bool> used(metas.size(), false);
  for (const SourceEntry& e : src->scan.entries) {
    if (e.stored && !e.stored->ranges.empty()) used[e.stored->shard] = true;
  }
  src->shard_fds.resize(metas.size());
  src->shards.fds.assign(metas.size(), -1);
  src->shards.paths.resize(metas.size());
  for (uint32_t i = 0; i < metas.size(); ++i) {
    const std::string& path = src->reader->ShardPath(index::ShardId{i});
    src->shards.paths[i] = path;
    if (!used[i]) continue;
    if (metas[i].remote()) {
      return Status::NotSupported(fmt::format(
          "shard {}: a remote shard; pack --from-index reads local shard files (mount the index "
          "and pack the mounted tree instead)",
          RedactLocation(path)));
    }
    // Opened as base/open_file.h does (a FIFO or a device is never opened)
    // and checked on that descriptor: size and fingerprint.
    Result<UniqueFd> opened = index::OpenCheckedShard(path, metas[i]);
    if (!opened.ok()) return opened.status();
    UniqueFd fd = std::move(opened).value();
    if (metas[i].codec() != index::Codec::kNone) {
      // A compressed tar shard: files are ranges of its decoded stream,
      // decoded here once (each interval as the mount decodes it).
      Result<UniqueFd> dec = codec::DecodeShardToTemp(*src->reader, index::ShardId{i}, fd.get());
      if (!dec.ok()) return dec.status().WithContext("pack --from-index");
      fd = std::move(dec).value();
    }
    src->shards.fds[i] = fd.get();
    src->shard_fds[i] = std::move(fd);
  }
  return Status::Ok();
}

// Names per file inode in a listing, and the first of them in tree order.
std::map<uint64_t, std::pair<std::string_view, uint64_t>> LinkGroups(const TreeScan& scan) {
  std::map<uint64_t, std::pair<std::string_view, uint64_t>> groups;
  for (const SourceEntry& e : scan.entries) {
    if (e.kind != SourceKind::kFile) continue;
    auto [it, fresh] = groups.try_emplace(e.ino, e.path, 0);
    ++it->second.second;
  }
  return groups;
}

struct ContentJob {
  const SourceEntry* src;
  const SourceEntry* packed;
};

class PackedVerifier {
 public:
  PackedVerifier(const IndexSource& source, const IndexSource& packed,
                 std::vector<std::string>* differences)
      : src_(source), packed_(packed), differences_(differences) {}

  void Run(int jobs) {
    std::vector<ContentJob> content = CompareListings();
    std::atomic<size_t> next{0};
    auto worker = [&] {
      std::unique_ptr<char[]> a(new char[kIoChunk]), b(new char[kIoChunk]);
      for (size_t k; (k = next.fetch_add(1)) < content.size();) {
        Compare(content[k], a.get(), b.get());
      }
    };
    std::vector<std::thread> pool;
    jobs = std::max(1, std::min<int>(jobs, static_cast<int>(content.size())));
    for (int t = 1; t < jobs; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    std::sort(found_.begin(), found_.end());
    for (auto& [order, line] : found_) differences_->push_back(std::move(line));
  }

 private:
  void Add(size_t order, std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    found_.emplace_back(order, std::move(line));
  }

  std::vector<ContentJob> CompareListings() {
    const auto src_groups = LinkGroups(src_.scan);
    const auto packed_groups = LinkGroups(packed_.scan);
    const auto& S = src_.scan.entries;
    const auto& P = packed_.scan.entries;
    std::vector<ContentJob> jobs;
    std::map<uint64_t, bool> queued;  // Packed inodes whose content is compared.
    size_t i = 0, j = 0, order = 0;
    while (i < S.size() || j < P.size()) {
      ++order;
      if (j == P.size() || (i < S.size() && index::TreeOrderLess(S[i].path, P[j].path))) {
        Add(order, fmt::format("missing: {}", EscapePath(S[i++].path)));
        continue;
      }
      if (i == S.size() || index::TreeOrderLess(P[j].path, S[i].path)) {
        Add(order, fmt::format("extra: {}", EscapePath(P[j++].path)));
        continue;
      }
      const SourceEntry& s = S[i++];
      const SourceEntry& p = P[j++];
      const std::string path = EscapePath(s.path);
      if (s.kind != p.kind || (s.mode & S_IFMT) != (p.mode & S_IFMT)) {
        Add(order, fmt::format("type differs: {}", path));
        continue;
      }
      if ((s.mode & 07777) != (p.mode & 07777)) {
        Add(order, fmt::format("mode differs: {}: {:04o} vs {:04o}", path, s.mode & 07777,
                               p.mode & 07777));
      }
      if (s.uid != p.uid || s.gid != p.gid) {
        Add(order,
            fmt::format("owner differs: {}: {}:{} vs {}:{}", path, s.uid, s.gid, p.uid, p.gid));
      }
      if (s.mtime_ns != p.mtime_ns) {
        Add(order, fmt::format("mtime differs: {}: {} vs {}", path, s.mtime_ns, p.mtime_ns));
      }
      if (s.kind == SourceKind::kDir) continue;
      if (s.size != p.size) {
        Add(order, fmt::format("size differs: {}: {} vs {}", path, s.size, p.size));
        continue;
      }
      if (s.kind == SourceKind::kSymlink) {
        if (s.link_target != p.link_target) {
          Add(order, fmt::format("target differs: {}: {} vs {}", path, EscapePath(s.link_target),
                                 EscapePath(p.link_target)));
        }
        continue;
      }
      const auto& sg = src_groups.at(s.ino);
      const auto& pg = packed_groups.at(p.ino);
      if (sg.second != pg.second || sg.first != pg.first) {
        Add(order,
            fmt::format("hard link differs: {}: {} name(s), first {} vs {} name(s), first {}", path,
                        sg.second, EscapePath(sg.first), pg.second, EscapePath(pg.first)));
      }
      if (queued.emplace(p.ino, true).second) {
        order_of_[&p] = order;
        jobs.push_back(ContentJob{&s, &p});
      }
    }
    return jobs;
  }

  // Every byte of the packed file against the source's, and the packed
  // index's checksum against the packed bytes.
  void Compare(const ContentJob& job, char* a, char* b) {
    const SourceEntry& s = *job.src;
    const SourceEntry& p = *job.packed;
    const size_t order = order_of_.at(&p);
    const std::string path = EscapePath(s.path);
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    for (uint64_t pos = 0; pos < s.size;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, s.size - pos));
      if (Status r = ReadStoredAt(src_.shards, s, pos, a, n); !r.ok()) {
        Add(order, fmt::format("unreadable: {}: {}", path, r.message()));
        XXH3_freeState(h);
        return;
      }
      if (Status r = ReadStoredAt(packed_.shards, p, pos, b, n); !r.ok()) {
        Add(order, fmt::format("unreadable: {} (packed): {}", path, r.message()));
        XXH3_freeState(h);
        return;
      }
      if (std::memcmp(a, b, n) != 0) {
        size_t at = 0;
        while (a[at] == b[at]) ++at;
        Add(order, fmt::format("content differs: {}: at byte {}", path, pos + at));
        XXH3_freeState(h);
        return;
      }
      XXH3_64bits_update(h, b, n);
      pos += n;
    }
    const uint64_t got = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    const StoredData& d = *p.stored;
    if (!d.sparse && (!d.has_xxh3 || got != d.xxh3)) {
      Add(order, fmt::format("checksum differs: {}: packed index says {:016x}, packed shard has "
                             "{:016x}",
                             path, d.xxh3, got));
    }
  }

  const IndexSource& src_;
  const IndexSource& packed_;
  std::vector<std::string>* const differences_;
  std::map<const SourceEntry*, size_t> order_of_;  // Filled before the workers start.
  std::mutex mu_;
  std::vector<std::pair<size_t, std::string>> found_;  // Guarded by mu_.
};

}  // namespace

Result<std::unique_ptr<IndexSource>> OpenIndexSource(const std::string& index_path,
                                                     const std::string& view,
                                                     const index::PartitionResolver& resolve) {
  auto src = std::make_unique<IndexSource>();
  index::ReaderOptions ro;
  ro.view = view;
  ro.resolve_partition = resolve;
  SHARDFS_ASSIGN_OR_RETURN(src->reader, index::IndexReader::Open(index_path, ro));
  char* rp = ::realpath(index_path.c_str(), nullptr);
  if (!rp) return Status::FromErrno(errno, index_path);
  src->index_real = rp;
  std::free(rp);
  src->scan.root = src->index_real;
  if (Status s = ListTree(*src->reader, &src->scan); !s.ok()) {
    return s.WithContext(fmt::format("index {}", index_path));
  }
  SHARDFS_RETURN_IF_ERROR(OpenShards(src.get()));
  return src;
}

Status VerifyPacked(const IndexSource& source, const std::string& packed_index, int jobs,
                    std::vector<std::string>* differences) {
  SHARDFS_ASSIGN_OR_RETURN(std::unique_ptr<IndexSource> packed, OpenIndexSource(packed_index, ""));
  PackedVerifier v(source, *packed, differences);
  v.Run(jobs);
  return Status::Ok();
}

}  // namespace shardfs::pack
