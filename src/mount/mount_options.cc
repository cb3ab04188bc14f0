#include "src/mount/mount_options.h"

#include <fuse_opt.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/parse.h"
#include "index/view_store.h"

namespace shardfs::mount {
namespace {

struct ParseState {
  MountOptions* out;
  Status status;
};

bool ParseNumber(std::string_view v, double* out) {
  std::string s(v);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0' && *out >= 0;
}

bool ParseBool(std::string_view v, bool* out) {
  if (v == "1" || v == "yes" || v == "on" || v == "true") {
    *out = true;
  } else if (v == "0" || v == "no" || v == "off" || v == "false") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

// `value` as one of `choices` (its spelling, its value) into *out; false if
// it is none of them.
template <typename T>
bool ParseChoice(std::string_view value,
                 std::initializer_list<std::pair<std::string_view, T>> choices, T* out) {
  for (const auto& [spelling, choice] : choices) {
    if (value == spelling) {
      *out = choice;
      return true;
    }
  }
  return false;
}

// What one name=value was to a group of options below.
struct Parsed {
  bool known = true;               // `name` is one of the group's options.
  const char* expected = nullptr;  // A bad value: what the option takes.
};
constexpr Parsed kUnknown{false, nullptr};
constexpr Parsed kTaken{true, nullptr};
Parsed Bad(const char* expected) { return {true, expected}; }

// The session loop and the FUSE connection.
Parsed ParseSessionOption(std::string_view name, std::string_view value, MountOptions& o) {
  uint64_t n = 0;
  if (name == "entry_timeout") {
    if (!ParseNumber(value, &o.entry_timeout)) return Bad("seconds");
  } else if (name == "attr_timeout") {
    if (!ParseNumber(value, &o.attr_timeout)) return Bad("seconds");
  } else if (name == "threads") {
    if (!ParseCount(value, 1, 1024, &n)) return Bad("a thread count 1..1024");
    o.threads = static_cast<unsigned>(n);
  } else if (name == "idle_threads") {
    if (!ParseCount(value, 1, 1024, &n)) return Bad("a thread count 1..1024");
    o.idle_threads = static_cast<unsigned>(n);
  } else if (name == "clone_fd") {
    if (!ParseBool(value, &o.clone_fd)) return Bad("0 or 1");
  } else if (name == "kernel_open") {
    if (!ParseBool(value, &o.kernel_open)) return Bad("0 or 1");
  } else if (name == "splice") {
    if (!ParseBool(value, &o.splice)) return Bad("0 or 1");
  } else {
    return kUnknown;
  }
  return kTaken;
}

// What the mount does ahead of a program: preload, prefill, shard readahead,
// pushes. Old names are kept so that existing fstab lines mount.
Parsed ParseAheadOption(std::string_view name, std::string_view value, MountOptions& o) {
  auto deprecated = [&](std::string_view new_name) {
    o.warnings.push_back(fmt::format("-o {} is deprecated; use {}", name, new_name));
  };
  uint64_t n = 0;
  if (name == "preload_index" || name == "prefetch_index") {
    if (name != "preload_index") deprecated("preload_index");
    if (!ParseBool(value, &o.reader.preload)) return Bad("0 or 1");
  } else if (name == "prefill_dirs") {
    if (!ParseBool(value, &o.prefill_dirs)) return Bad("0 or 1");
  } else if (name == "prefill_entries") {
    double n = 0;
    // At most 2^53: every such count is exact as a double, and the cast below
    // is defined.
    if (!ParseNumber(value, &n) || n > 9007199254740992.0 ||
        n != static_cast<double>(static_cast<uint64_t>(n))) {
      return Bad("a whole number of entries, or 0 for the default");
    }
    o.prefill_entries = static_cast<uint64_t>(n);
  } else if (name == "shard_readahead" || name == "readahead") {
    if (name != "shard_readahead") deprecated("shard_readahead");
    if (!ParseSize(value, &o.push.shard_readahead)) return Bad("a size such as 8M, or 0");
  } else if (name == "drop_behind") {
    if (!ParseBool(value, &o.push.drop_behind)) return Bad("0 or 1");
  } else if (name == "push_ahead") {
    if (!ParseSize(value, &o.push.sequential_bytes)) return Bad("a size such as 4M, or 0");
  } else if (name == "push_random") {
    if (value == "auto") {
      o.push_random_auto = true;
    } else if (ParseSize(value, &o.push.random_bytes)) {
      o.push_random_auto = false;
    } else {
      return Bad("a size such as 1M, 0, or auto");
    }
  } else if (name == "push_threads") {
    if (!ParseCount(value, 1, 64, &n)) return Bad("a thread count 1..64");
    o.push.threads = static_cast<unsigned>(n);
  } else {
    return kUnknown;
  }
  return kTaken;
}

// The index, the shards and what entries look like.
Parsed ParseFilesOption(std::string_view name, std::string_view value, MountOptions& o) {
  uint64_t n = 0;
  if (name == "block_cache") {
    if (value == "auto") value = "0";
    if (!ParseSize(value, &n)) return Bad("a size such as 16M, or auto");
    o.reader.block_cache_bytes = static_cast<size_t>(n);
  } else if (name == "max_open_shards") {
    if (!ParseCount(value, 1, 1u << 20, &n)) return Bad("a count 1..1048576");
    o.fs.max_open_shards = static_cast<size_t>(n);
  } else if (name == "verify") {
    using reader::VerifyMode;
    if (!ParseChoice(value,
                     {{"off", VerifyMode::kOff},
                      {"first", VerifyMode::kFirst},
                      {"always", VerifyMode::kAlways}},
                     &o.fs.verify)) {
      return Bad("off, first or always");
    }
  } else if (name == "uid" || name == "gid") {
    if (!ParseCount(value, 0, UINT32_MAX - 1, &n)) return Bad("a number");
    (name == "uid" ? o.fs.uid : o.fs.gid) = static_cast<int64_t>(n);
  } else if (name == "umask") {
    char* end = nullptr;
    std::string s(value);
    long m = std::strtol(s.c_str(), &end, 8);
    if (s.empty() || *end || m < 0 || m > 07777) return Bad("an octal mask");
    o.fs.umask = m;
  } else if (name == "nonempty") {
    o.nonempty = true;
  } else {
    return kUnknown;
  }
  return kTaken;
}

// Who serves the mount: the kernel's EROFS driver or FUSE (src/mount/kernel_mount.h).
Parsed ParseKernelOption(std::string_view name, std::string_view value, MountOptions& o) {
  if (name == "kernel") {
    if (!ParseChoice(value,
                     {{"", KernelMode::kOn},
                      {"on", KernelMode::kOn},
                      {"auto", KernelMode::kAuto},
                      {"off", KernelMode::kOff}},
                     &o.kernel)) {
      return Bad("on, auto or off");
    }
  } else if (name == "kernel_devices") {
    if (!ParseChoice(value,
                     {{"auto", KernelDevices::kAuto},
                      {"files", KernelDevices::kFiles},
                      {"loop", KernelDevices::kLoop}},
                     &o.kernel_devices)) {
      return Bad("auto, files or loop");
    }
  } else if (name == "kernel_directio") {
    o.kernel_directio = true;
  } else if (name == "unsafe_shard_paths") {
    o.unsafe_shard_paths = true;
  } else {
    return kUnknown;
  }
  return kTaken;
}

// Which view, and which rank's share of it.
Parsed ParseViewOption(std::string_view name, std::string_view value, MountOptions& o) {
  uint64_t n = 0;
  if (name == "view") {
    if (value.empty() || !index::ParseViewSpec(value).ok()) return Bad("NAME, NAME@N or NAME@TAG");
    o.reader.view = value;
  } else if (name == "rank") {
    if (!ParseCount(value, 0, 1u << 20, &n)) return Bad("a rank 0..1048576");
    o.reader.rank = static_cast<uint32_t>(n);
    o.rank_set = true;
  } else if (name == "world") {
    if (!ParseCount(value, 1, 1u << 20, &n)) return Bad("a world size 1..1048576");
    o.reader.world = static_cast<uint32_t>(n);
  } else if (name == "seed") {
    if (!ParseCount(value, 0, UINT64_MAX, &n)) return Bad("a number");
    o.reader.seed = n;
  } else if (name == "rank_dirs") {
    if (value == "prune") {
      o.reader.rank_keep_dirs = false;
    } else if (value == "keep") {
      o.reader.rank_keep_dirs = true;
    } else {
      return Bad("prune or keep");
    }
  } else {
    return kUnknown;
  }
  return kTaken;
}

// "30", "30s", "500ms", "2m": a duration; false if not one.
bool ParseDuration(std::string_view v, std::chrono::milliseconds* out) {
  double scale = 1000;
  if (v.ends_with("ms")) {
    scale = 1;
    v.remove_suffix(2);
  } else if (v.ends_with("s")) {
    v.remove_suffix(1);
  } else if (v.ends_with("m")) {
    scale = 60000;
    v.remove_suffix(1);
  }
  double n = 0;
  if (!ParseNumber(v, &n) || n * scale > 86400e3) return false;
  *out = std::chrono::milliseconds(static_cast<int64_t>(n * scale));
  return true;
}

// Remote shards, fetching and the chunk cache.
Parsed ParseRemoteOption(std::string_view name, std::string_view value, MountOptions& o) {
  uint64_t n = 0;
  remote::FetchOptions& f = o.fetch.fetch;
  if (name == "cache_dir") {
    if (value.empty()) return Bad("a directory");
    o.cache_dir = value;
  } else if (name == "storage") {
    if (!ParseStorageMode(value, &o.storage)) return Bad("auto, local or network");
  } else if (name == "max_index_size") {
    if (!ParseSize(value, &o.max_index_size) || o.max_index_size == 0) {
      return Bad("a size such as 64G");
    }
  } else if (name == "cache_size") {
    if (!ParseSize(value, &o.cache_size) || o.cache_size == 0) return Bad("a size such as 20G");
  } else if (name == "decode_cache") {
    if (!ParseSize(value, &o.decode_cache)) return Bad("a size such as 256M (0: keep nothing)");
  } else if (name == "chunk_size") {
    if (!ParseSize(value, &n) || n < 4096 || n > (256u << 20)) return Bad("a size 4K..256M");
    o.fetch.chunk_size = n;
  } else if (name == "fetch_threads") {
    if (!ParseCount(value, 1, 256, &n)) return Bad("a thread count 1..256");
    o.fetch.threads = static_cast<unsigned>(n);
  } else if (name == "fetch_ahead") {
    if (!ParseCount(value, 0, 1024, &n)) return Bad("a chunk count 0..1024");
    o.fetch.max_ahead = static_cast<unsigned>(n);
  } else if (name == "retry_budget") {
    if (!ParseDuration(value, &f.retry_budget) || f.retry_budget.count() == 0) {
      return Bad("a duration such as 30s");
    }
  } else if (name == "connect_timeout") {
    if (!ParseDuration(value, &f.connect_timeout) || f.connect_timeout.count() == 0) {
      return Bad("a duration such as 5s");
    }
  } else if (name == "stall_timeout") {
    if (!ParseDuration(value, &f.stall_timeout) || f.stall_timeout.count() == 0) {
      return Bad("a duration such as 10s");
    }
  } else if (name == "ca_file") {
    if (value.empty()) return Bad("a file of CA certificates");
    f.ca_file = value;
  } else if (name == "trust_responses_without_etag") {
    // Named for what it risks; given bare, it means 1.
    if (value.empty()) {
      f.trust_responses_without_etag = true;
    } else if (!ParseBool(value, &f.trust_responses_without_etag)) {
      return Bad("0 or 1");
    }
  } else {
    return kUnknown;
  }
  return kTaken;
}

bool IsMountOption(std::string_view name) {
  const std::vector<MountOptionDoc>& docs = MountOptionDocs();
  return std::any_of(docs.begin(), docs.end(),
                     [&](const MountOptionDoc& d) { return name == d.name; });
}

// fuse_opt hands every option here (FUSE_OPT_KEY_OPT); returns 0 to consume
// ours, 1 to keep the rest for libfuse.
int OptProc(void* data, const char* arg, int key, struct fuse_args*) {
  auto* st = static_cast<ParseState*>(data);
  if (key != FUSE_OPT_KEY_OPT || !st->status.ok()) return 1;
  std::string_view a(arg);
  size_t eq = a.find('=');
  std::string_view name = a.substr(0, eq);
  std::string_view value = eq == std::string_view::npos ? "" : a.substr(eq + 1);
  MountOptions& o = *st->out;
  if (name == "debug") {
    o.debug = true;
    return 1;  // libfuse's too.
  }
  if (name == "rw") {
    st->status = Status::InvalidArgument("-o rw: shardfs is read-only");
    return 0;
  }
  if (name == "ro") return 0;  // Always read-only.
  if (!IsMountOption(name)) return 1;
  Parsed p = ParseSessionOption(name, value, o);
  if (!p.known) p = ParseAheadOption(name, value, o);
  if (!p.known) p = ParseFilesOption(name, value, o);
  if (!p.known) p = ParseViewOption(name, value, o);
  if (!p.known) p = ParseRemoteOption(name, value, o);
  if (!p.known) p = ParseKernelOption(name, value, o);
  if (!p.known) return 1;
  if (p.expected) {
    st->status = Status::InvalidArgument(fmt::format("-o {}: expected {}", arg, p.expected));
  }
  return 0;
}

}  // namespace

const std::vector<MountOptionDoc>& MountOptionDocs() {
  static const std::vector<MountOptionDoc> kDocs = {
      {"kernel", "[=on|auto|off]", "serve with the kernel's EROFS driver (default off)"},
      {"kernel_devices", "=auto|files|loop", "how a kernel mount is given its files"},
      {"kernel_directio", "", "a kernel mount reads shard files with direct I/O"},
      {"unsafe_shard_paths", "", "a kernel mount may name shards anywhere"},
      {"entry_timeout", "=SECONDS", "how long the kernel caches names (default 1e6)"},
      {"attr_timeout", "=SECONDS", "how long the kernel caches attributes (1e6)"},
      {"threads", "=N", "worker threads at most (default 16)"},
      {"idle_threads", "=N", "idle worker threads kept (default: all)"},
      {"clone_fd", "=0|1", "a /dev/fuse descriptor per worker (default 1)"},
      {"kernel_open", "=0|1", "the kernel serves opens itself (default 1)"},
      {"splice", "=0|1", "reads spliced from the shard file (default 1)"},
      {"block_cache", "=SIZE|auto", "the index's block cache (default auto)"},
      {"preload_index", "=0|1", "read the index into the page cache (default 1)"},
      {"max_open_shards", "=N", "shard files kept open at most (default 128)"},
      {"shard_readahead", "=SIZE", "readahead of a shard read in order (default 8M)"},
      {"push_ahead", "=SIZE", "push files after an in-order read (default 4M)"},
      {"push_random", "=SIZE|auto", "push files after a random read (default auto)"},
      {"push_threads", "=N", "threads doing the pushes (default 8)"},
      {"drop_behind", "=0|1", "drop shard pages already served (default 1)"},
      {"prefill_dirs", "=0|1", "list a directory once 2 names were looked up (1)"},
      {"prefill_entries", "=N", "entries the prefill lists at most (0: by memory)"},
      {"verify", "=off|first|always", "check contents against checksums (default off)"},
      {"view", "=SPEC", "the view shown: NAME, NAME@N or NAME@TAG"},
      {"rank", "=K", "show rank K's share of the view (with world)"},
      {"world", "=N", "the number of ranks (with rank)"},
      {"seed", "=S", "the seed of the ranks' shard shuffle (default 0)"},
      {"rank_dirs", "=prune|keep", "directories with nothing in the rank (prune)"},
      {"max_index_size", "=SIZE", "an index by URL or bundle at most (default 64G)"},
      {"cache_dir", "=DIR", "keep chunks on disk, shared per node and user"},
      {"storage", "=auto|local|network", "whether shards are on network storage"},
      {"cache_size", "=SIZE", "the chunk cache's bound (1G in memory, 16G disk)"},
      {"decode_cache", "=SIZE", "memory for decoded blocks (default 256M)"},
      {"chunk_size", "=SIZE", "remote shards fetched in chunks of SIZE (4M)"},
      {"fetch_threads", "=N", "fetches in flight at most (default 8)"},
      {"fetch_ahead", "=N", "chunks fetched ahead of a reader (default 8)"},
      {"retry_budget", "=DURATION", "how long one fetch may retry (default 30s)"},
      {"connect_timeout", "=DURATION", "wait for a connection (default 5s)"},
      {"stall_timeout", "=DURATION", "wait for a response's next byte (default 10s)"},
      {"ca_file", "=FILE", "certificates to trust for https"},
      {"trust_responses_without_etag", "[=0|1]", "accept responses without an ETag (0)"},
      {"uid", "=N", "the owner shown for every entry"},
      {"gid", "=N", "the group shown for every entry"},
      {"umask", "=OCTAL", "permission bits cleared on every entry"},
      {"nonempty", "", "allow a mountpoint that is not empty"},
      {"ro", "", "accepted: always read-only (rw is refused)"},
      {"debug", "", "log every request (also libfuse's); see -d"},
      {"prefetch_index", "=0|1", "deprecated: preload_index"},
      {"readahead", "=SIZE", "deprecated: shard_readahead"},
  };
  return kDocs;
}

Status ParseMountOptions(const std::vector<std::string>& o_lists, MountOptions* out) {
  std::vector<std::string> argv_store = {"shardfs"};
  for (const std::string& l : o_lists) {
    argv_store.push_back("-o");
    argv_store.push_back(l);
  }
  std::vector<char*> argv;
  for (auto& s : argv_store) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const struct fuse_opt kOpts[] = {FUSE_OPT_END};
  ParseState st{out, Status::Ok()};
  if (fuse_opt_parse(&args, &st, kOpts, &OptProc) != 0) {
    fuse_opt_free_args(&args);
    return Status::InvalidArgument("cannot parse -o options");
  }
  // What is left is "shardfs" and possibly "-o<list>" for libfuse.
  for (int i = 1; i < args.argc; ++i) out->fuse_args.push_back(args.argv[i]);
  fuse_opt_free_args(&args);
  SHARDFS_RETURN_IF_ERROR(st.status);
  const index::ReaderOptions& r = out->reader;
  if (out->rank_set != (r.world != 0)) {
    return Status::InvalidArgument("-o rank=K and -o world=N go together");
  }
  if (r.world != 0 && r.rank >= r.world) {
    return Status::InvalidArgument(
        fmt::format("-o rank={}: expected a rank below world={}", r.rank, r.world));
  }
  return Status::Ok();
}

}  // namespace shardfs::mount
