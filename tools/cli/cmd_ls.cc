// `shardfs ls` and `shardfs stat`: the indexed tree without mounting it.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <iterator>

#include "base/json_writer.h"
#include "base/log.h"
#include "base/strings.h"
#include "index/index_reader.h"
#include "index/walk_guard.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

using cli::CommandLine;
using cli::Operands;
using cli::Option;
using cli::SetFlag;
using cli::SetString;

namespace {

using index::EntryRecord;
using index::EntryType;
using index::IndexReader;

std::string ModeString(uint32_t mode) {
  std::string s = "?---------";
  s[0] = S_ISDIR(mode) ? 'd' : S_ISLNK(mode) ? 'l' : '-';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (mode & (0400 >> i)) s[1 + i] = rwx[i];
  }
  if (mode & S_ISUID) s[3] = (mode & 0100) ? 's' : 'S';
  if (mode & S_ISGID) s[6] = (mode & 0010) ? 's' : 'S';
  if (mode & S_ISVTX) s[9] = (mode & 0001) ? 't' : 'T';
  return s;
}

std::string TimeString(int64_t mtime_ns) {
  time_t secs = static_cast<time_t>(mtime_ns / 1000000000);
  if (mtime_ns < 0 && mtime_ns % 1000000000) --secs;
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Joined(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  return fmt::format("{}/{}", dir, name);
}

std::string EntryJson(const IndexReader& r, std::string_view path, const EntryRecord& e) {
  JsonObject o;
  o.Str("path", path)
      .Str("type", index::EntryTypeName(e.type))
      .UNum("size", e.size)
      .UNum("mode", e.mode & 07777)
      .UNum("uid", e.uid)
      .UNum("gid", e.gid)
      .Num("mtime_ns", e.mtime_ns)
      .UNum("nlink", e.nlink)
      .UNum("inode", e.inode.value);
  if (e.type == EntryType::kFile) {
    o.Str("shard", RedactLocation(r.ShardPath(e.shard)))
        .UNum("shard_id", e.shard.value)
        .UNum("offset", e.offset);
    // A compressed tar shard: offset is in the decoded stream.
    const index::Codec codec = r.shards()[e.shard.value].codec();
    if (codec != index::Codec::kNone) o.Str("codec", index::CodecName(codec));
    // A slice shard (a compressed tar inside the shard): its bytes in the file.
    if (const index::ShardMeta& m = r.shards()[e.shard.value]; m.slice()) {
      o.UNum("slice_base", m.base).UNum("slice_length", m.length);
    }
    if (e.sparse()) {
      // [logical, length, shard offset] per extent; holes between read as zeros.
      std::string extents = "[";
      for (size_t i = 0; i < index::ExtentCount(e); ++i) {
        index::Extent x = index::GetExtent(e, i);
        extents += fmt::format("{}[{},{},{}]", i ? "," : "", x.logical, x.length, x.physical);
      }
      extents += "]";
      o.Bool("sparse", true)
          .UNum("extent_count", index::ExtentCount(e))
          .UNum("data_bytes", index::StoredBytes(e))
          .Raw("extents", extents);
    }
    if (e.encoded()) {
      // A deflated zip member: offset is where its compressed bytes start.
      o.Str("method", "deflate")
          .UNum("compressed_offset", e.encoding.comp_offset)
          .UNum("compressed_size", e.encoding.comp_size)
          .Str("crc32", fmt::format("{:08x}", e.encoding.crc32));
    } else if (r.shards()[e.shard.value].flags & index::kShardZip) {
      o.Str("method", "stored");
    }
    if (e.has_checksum()) {
      o.Str("xxh3", fmt::format("{:016x}", e.xxh3));
    } else {
      o.Null("xxh3");
    }
  }
  if (e.type == EntryType::kSymlink) o.Str("target", e.target);
  return o.Finish();
}

std::string EntryLine(std::string_view name, const EntryRecord& e) {
  std::string line = fmt::format("{} {:>3} {:>5} {:>5} {:>10} {} {}", ModeString(e.mode), e.nlink,
                                 e.uid, e.gid, e.size, TimeString(e.mtime_ns), name);
  if (e.type == EntryType::kSymlink) line += fmt::format(" -> {}", e.target);
  return line;
}

Status ListDir(const IndexReader& r, std::string_view dir_path, const EntryRecord& dir,
               bool recursive, bool json, index::WalkGuard& met) {
  std::vector<std::pair<std::string, index::InodeId>> subdirs;
  if (!json && recursive) fmt::print("{}:\n", dir_path.empty() ? "." : dir_path);
  Status bad;
  SHARDFS_RETURN_IF_ERROR(
      r.ForEachChild(dir.inode, "", [&](std::string_view name, const EntryRecord& e) {
        std::string path = Joined(dir_path, name);
        // Records from a listing are not range-checked (index_reader.h).
        bad = r.CheckFileRange(e);
        if (!bad.ok()) return false;
        if (json) {
          fmt::print("{}\n", EntryJson(r, path, e));
        } else {
          fmt::print("{}\n", EntryLine(name, e));
        }
        if (recursive && e.type == EntryType::kDir) {
          bad = met.Meet(r, dir.inode, name, e.inode);  // A damaged index's loop ends here.
          if (!bad.ok()) return false;
          subdirs.emplace_back(path, e.inode);
        }
        return true;
      }));
  SHARDFS_RETURN_IF_ERROR(bad);
  for (const auto& [path, inode] : subdirs) {
    if (!json) fmt::print("\n");
    EntryRecord sub;
    index::RecordHolder holder;
    SHARDFS_RETURN_IF_ERROR(r.GetInode(inode, &sub, &holder));
    SHARDFS_RETURN_IF_ERROR(ListDir(r, path, sub, recursive, json, met));
  }
  return Status::Ok();
}

std::string NormalizeArgPath(std::string p) {
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p == ".") p.clear();
  return p;
}

// Prints one entry of `r` as `shardfs stat` does; false (and a message
// naming the path) if it cannot.
bool PrintStat(const IndexReader& r, const std::string& path, bool json, bool first) {
  EntryRecord e;
  index::RecordHolder holder;
  Status s = r.LookupPath(path, &e, &holder);
  if (s.ok()) s = r.CheckFileRange(e);
  if (!s.ok()) {
    log::Error("stat {}: {}", path.empty() ? "/" : path, s.message());
    return false;
  }
  if (json) {
    fmt::print("{}\n", EntryJson(r, path, e));
    return true;
  }
  if (!first) fmt::print("\n");
  fmt::print("  path: {}\n", path.empty() ? "/" : path);
  fmt::print("  type: {}\n", index::EntryTypeName(e.type));
  fmt::print("  size: {}\n", e.size);
  fmt::print("  mode: {:04o} ({})\n", e.mode & 07777, ModeString(e.mode));
  fmt::print("   uid: {}  gid: {}\n", e.uid, e.gid);
  fmt::print(" mtime: {}.{:09d} UTC ({} ns)\n", TimeString(e.mtime_ns),
             ((e.mtime_ns % 1000000000) + 1000000000) % 1000000000, e.mtime_ns);
  fmt::print(" nlink: {}\n", e.nlink);
  fmt::print(" inode: {}\n", e.inode.value);
  if (e.type == EntryType::kFile) {
    fmt::print(" shard: {}\n", RedactLocation(r.ShardPath(e.shard)));
    const index::Codec codec = r.shards()[e.shard.value].codec();
    if (codec == index::Codec::kNone) {
      fmt::print("offset: {}\n", e.offset);
    } else {
      const index::ShardMeta& m = r.shards()[e.shard.value];
      fmt::print("offset: {} (in the decoded stream)\n", e.offset);
      fmt::print(" codec: {}\n", index::CodecName(codec));
      if (m.slice()) {
        fmt::print(" slice: bytes {}..{} of the shard (a compressed tar inside it)\n", m.base,
                   m.base + m.length);
      }
      // The compressed bytes a read of it decodes: from the seek point at
      // or before its first byte to the one after its last.
      std::string value;
      index::SeekTable t;
      if (r.GetSeekValue(e.shard, false, 0, &value).ok() &&
          index::DecodeSeekTable(value, &t).ok() && !t.points.empty()) {
        const size_t first = t.Find(e.offset);
        const size_t last = t.Find(e.size ? e.offset + e.size - 1 : e.offset);
        // A slice's points are from its base.
        const uint64_t end =
            last + 1 < t.points.size() ? t.points[last + 1].compressed : m.data_size();
        fmt::print("compressed: bytes {}..{} of the shard (seek points {}..{} of {})\n",
                   m.data_base() + t.points[first].compressed, m.data_base() + end, first, last,
                   t.points.size());
      }
    }
    if (e.sparse()) {
      fmt::print("sparse: {} extents, {} bytes of data\n", index::ExtentCount(e),
                 index::StoredBytes(e));
    }
    if (e.encoded()) {
      fmt::print("method: deflate, {} compressed bytes at byte {}, crc32 {:08x}\n",
                 e.encoding.comp_size, e.encoding.comp_offset, e.encoding.crc32);
    }
    fmt::print("  xxh3: {}\n", e.has_checksum() ? fmt::format("{:016x}", e.xxh3) : "(none)");
  }
  if (e.type == EntryType::kSymlink) fmt::print("target: {}\n", e.target);
  return true;
}

}  // namespace

Option ViewOption(std::string* view) {
  return {"view", 0, "VIEW", "a view or version instead of default", SetString(view)};
}

std::vector<Option> IndexCacheOptions(indexref::IndexCacheOptions* o) {
  return {{"cache-dir", 0, "DIR", "where an index by URL is cached (default /var/cache/shardfs)",
           SetString(&o->cache_dir)},
          {"max-index-size", 0, "SIZE", "an index by URL is at most SIZE (default 64G)",
           cli::SetNonZeroSize(&o->max_index_size, "--max-index-size needs a size such as 64G")}};
}

bool ResolveIndexArg(const char* command, std::string* index, const indexref::IndexCacheOptions& o,
                     index::ReaderOptions* ro, indexref::IndexRef* ref) {
  index::ReaderOptions unused;
  Result<indexref::IndexRef> r = indexref::ResolveIndex(*index, o, ro ? ro : &unused);
  if (!r.ok()) {
    log::Error("{}: {}", command, r.status().message());
    return false;
  }
  *ref = std::move(r).value();
  *index = ref->path;
  return true;
}

bool WritableIndexArg(const char* command, const std::string& index) {
  Status s = indexref::RefuseFetchedIndex(index, command);
  if (!s.ok()) log::Error("{}", s.message());
  return s.ok();
}

int RunLs(int argc, char** argv) {
  bool json = false, recursive = false;
  index::ReaderOptions ro;
  indexref::IndexCacheOptions co;
  CommandLine cl{"ls",
                 "INDEX [PATH]",
                 {{"recursive", 'R', nullptr, "the whole subtree", SetFlag(&recursive)},
                  {"json", 0, nullptr, "one JSON object per entry", SetFlag(&json)},
                  ViewOption(&ro.view)},
                 Operands::kAfterOptions};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.empty() || args.size() > 2) return UsageError("ls", "expected INDEX [PATH]");
  indexref::IndexRef ref;
  if (!ResolveIndexArg("ls", &args[0], co, &ro, &ref)) return kExitFailure;
  auto reader = IndexReader::Open(args[0], ro);
  if (!reader.ok()) {
    log::Error("{}", reader.status().message());
    return kExitFailure;
  }
  std::string path = NormalizeArgPath(args.size() == 2 ? args[1] : "");
  EntryRecord e;
  index::RecordHolder holder;
  Status s = (*reader)->LookupPath(path, &e, &holder);
  if (s.ok()) s = (*reader)->CheckFileRange(e);
  if (!s.ok()) {
    log::Error("ls {}: {}", path.empty() ? "/" : path, s.message());
    return kExitFailure;
  }
  if (e.type != EntryType::kDir) {
    fmt::print("{}\n", json ? EntryJson(**reader, path, e) : EntryLine(path, e));
    return kExitOk;
  }
  index::WalkGuard met(e.inode);
  s = ListDir(**reader, path, e, recursive, json, met);
  if (!s.ok()) {
    log::Error("ls {}: {}", path, s.message());
    return kExitFailure;
  }
  return kExitOk;
}

int RunStat(int argc, char** argv) {
  bool json = false;
  index::ReaderOptions ro;
  indexref::IndexCacheOptions co;
  CommandLine cl{
      "stat",
      "INDEX PATH [PATH...]",
      {{"json", 0, nullptr, "one JSON object per path", SetFlag(&json)}, ViewOption(&ro.view)},
      Operands::kAfterOptions};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() < 2) return UsageError("stat", "expected INDEX PATH...");
  indexref::IndexRef ref;
  if (!ResolveIndexArg("stat", &args[0], co, &ro, &ref)) return kExitFailure;
  auto reader = IndexReader::Open(args[0], ro);
  if (!reader.ok()) {
    log::Error("{}", reader.status().message());
    return kExitFailure;
  }
  // Like stat(1): every path is answered, a missing one is named, and the
  // exit status says whether any failed.
  int rc = kExitOk;
  for (size_t i = 1; i < args.size(); ++i) {
    if (!PrintStat(**reader, NormalizeArgPath(args[i]), json, i == 1)) rc = kExitFailure;
  }
  return rc;
}

}  // namespace shardfs::cli
