// Options of `shardfs mount`, from `-o` strings through libfuse's fuse_opt
// parser (fuse_opt.h, not the low-level API) into one struct. Options shardfs
// does not know are passed on to libfuse (e.g. allow_other, max_read,
// fsname). Every option is documented in man/shardfs-mount.1, the deprecated
// aliases too.
#ifndef SHARDFS_SRC_MOUNT_MOUNT_OPTIONS_H_
#define SHARDFS_SRC_MOUNT_MOUNT_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/storage.h"
#include "index/index_reader.h"
#include "src/mount/push_ahead.h"
#include "src/reader/filesystem.h"
#include "src/reader/shard_fetcher.h"

namespace shardfs::mount {

// -o kernel: who serves the mount (src/mount/kernel_mount.h).
enum class KernelMode {
  kOff,   // FUSE (the default).
  kOn,    // The kernel's EROFS driver, or no mount and the reason why not.
  kAuto,  // The kernel's EROFS driver where it can serve, else FUSE and one line why.
};

// -o kernel_devices: how a kernel mount gives the kernel its image and shards.
enum class KernelDevices {
  kAuto,   // Files on 6.12+, loop devices on 6.4 to 6.11.
  kFiles,  // The files themselves (EROFS mounts files from 6.12).
  kLoop,   // A read-only loop device per file, detached at unmount.
};

struct MountOptions {
  // -o kernel[=on|auto|off], also `mount --kernel[=auto]`.
  KernelMode kernel = KernelMode::kOff;
  KernelDevices kernel_devices = KernelDevices::kAuto;
  // -o kernel_directio: the kernel reads shards with direct I/O (files only,
  // not loop devices, which use it anyway where they can).
  bool kernel_directio = false;
  // -o unsafe_shard_paths: a kernel mount of an index fetched by URL or not
  // owned by the user or root may name shards anywhere (src/mount/kernel_mount.h).
  bool unsafe_shard_paths = false;
  // Kernel cache lifetimes, in seconds. The content is immutable.
  double entry_timeout = 1e6;
  double attr_timeout = 1e6;
  // Worker threads of the multi-threaded loop, at most; and idle ones kept
  // (0: all of them, so that no worker is ended and started again).
  unsigned threads = 16;
  unsigned idle_threads = 0;
  // One /dev/fuse descriptor per worker thread.
  bool clone_fd = true;
  // Let the kernel serve open/flush itself where it can (answers open and
  // flush with ENOSYS; FUSE_CAP_NO_OPEN_SUPPORT).
  bool kernel_open = true;
  // Splice read replies from the shard descriptor into the kernel.
  bool splice = true;
  // The index reader's options (index/index_reader.h), whole:
  //  -o block_cache: block_cache_bytes, the RocksDB block cache (0 or
  //     auto: sized to the index);
  //  -o preload_index: preload (on for a mount): start reading the index
  //     into the page cache at mount, not waited for;
  //  -o view=SPEC: the view and version to show ("" = the full tree);
  //  -o rank=K,world=N[,seed=S][,rank_dirs=prune|keep]: rank K's share of
  //     the view (index/rank_partition.h).
  index::ReaderOptions reader = [] {
    index::ReaderOptions r;
    r.preload = true;
    return r;
  }();
  bool rank_set = false;  // -o rank was given (it goes with -o world).
  // List a directory in the background once two names in it were looked up
  // (kernel dentry-cache misses): the kernel then holds all of its entries
  // and later lookups in it need no round trip.
  bool prefill_dirs = true;
  // -o prefill_entries: how many entries the prefill lists over the mount's
  // life; 0: DefaultPrefillEntries() (from the machine's memory).
  uint64_t prefill_entries = 0;
  // push_random=auto: push.random_bytes is kAutoPushRandom at most, as much
  // of it as the available memory allows (src/mount/push_budget.h).
  bool push_random_auto = true;
  static constexpr uint64_t kAutoPushRandom = 4 << 20;
  // Pass -o nonempty semantics: allow a mountpoint that is not empty.
  bool nonempty = false;
  bool debug = false;
  // Remote shards and the chunk cache (src/reader/shard_fetcher.h): -o cache_dir
  // keeps chunks on disk (and puts local shards behind the cache too);
  // without it remote shards' chunks are kept in memory.
  std::string cache_dir;
  // -o storage=auto|local|network: local shards on network storage are read
  // through the chunk cache, node-local by default (src/reader/storage_plan.h).
  StorageMode storage = StorageMode::kAuto;
  // -o cache_size; 0: the default (src/reader/volume.h).
  uint64_t cache_size = 0;
  // -o decode_cache: bytes of decoded blocks kept in memory (inflated zip
  // members, decoded intervals of compressed tars; src/reader/decoded_cache.h).
  uint64_t decode_cache = kDefaultDecodeCache;
  static constexpr uint64_t kDefaultDecodeCache = 256ull << 20;
  // -o max_index_size: bytes of an index fetched by URL (or unpacked from a
  // bundle) at most (src/indexref/index_cache.h).
  uint64_t max_index_size = uint64_t{64} << 30;
  // Includes -o trust_responses_without_etag (fetch.fetch).
  reader::FetcherOptions fetch;
  reader::FilesystemOptions fs;
  mount::PushOptions push;
  // Options for libfuse, in "-o a,b" form.
  std::vector<std::string> fuse_args;
  // One line per deprecated alias used ("-o readahead is deprecated; use
  // shard_readahead"), for the caller to log.
  std::vector<std::string> warnings;
};

// One -o option as `shardfs mount --help` lists it.
struct MountOptionDoc {
  const char* name;   // "entry_timeout"
  const char* value;  // What follows the name: "=SECONDS", "[=0|1]", "" for a flag.
  const char* help;   // One line; man shardfs-mount(1) has the whole story.
};

// Every -o option shardfs takes, in the order of man shardfs-mount(1), the
// deprecated aliases last. ParseMountOptions takes exactly these names (and
// rw, to refuse it): any other goes to libfuse, so an option left out of
// this list is not parsed at all.
const std::vector<MountOptionDoc>& MountOptionDocs();

// Parses the comma-separated lists given with -o into `out`, which holds the
// defaults (or earlier values) for options not given. Returns InvalidArgument
// naming the option and what was expected for a bad value, and for rw.
// Deprecated aliases: readahead (shard_readahead), prefetch_index
// (preload_index).
Status ParseMountOptions(const std::vector<std::string>& o_lists, MountOptions* out);

}  // namespace shardfs::mount

#endif  // SHARDFS_SRC_MOUNT_MOUNT_OPTIONS_H_
