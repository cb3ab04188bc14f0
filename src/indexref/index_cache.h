// Indexes by URL: fetched once into a cache directory, checked by their
// ETag, and reused while the server says they are unchanged.
//
// What a URL names. One object: an index bundle (src/indexref/bundle_unpack.h, a tar
// of the index directory's files) or a manifest (index/manifest.h, a file
// beginning with index::kManifestMagic). A local bundle file (a .tar) is
// unpacked into the same cache, checked by its inode, size, mtime and ctime.
//
// Layout, under CACHE (-o cache_dir / --cache-dir, else /var/cache/shardfs):
//   CACHE/shardfs-index-v1/            0700, with the marker file shardfs-cache
//     <XXH3-128 of the URL, hex>/      one entry per URL (or bundle path)
//       lock                           flock'd LOCK_EX while the entry changes
//       state                          "copy NAME", "etag E", "length N",
//                                      "url U" (redacted: no query is stored)
//       copy-<random>/                 a checked copy: the index's files, or
//                                      the file "manifest"
//       copy-<random>.lock             flock'd LOCK_SH by each process using it
// Every directory is checked as the chunk cache's are (owned by this user,
// not writable by group or others, no symbolic link).
//
// Each use, under the entry's lock: a copy with an ETag is revalidated with
// a HEAD carrying If-None-Match (within revalidate_budget); 304, or a 200
// with the same strong ETag and size, reuses it. Otherwise the object is
// fetched (GET, resumed on faults, held to its Content-Length and ETag, at
// most max_index_size bytes) into an unnamed temporary file, unpacked into
// tmp-<random>/, checked (index::IsShardfsIndex, and no shard path relative
// to the index's own directory, which a copy does not have), renamed to a new
// copy-<random>/ and recorded in state; a copy is never changed once made, so
// a running mount keeps the one it opened. Copies other than the current one
// that no process holds are deleted then (and leftover tmp-* directories).
// A reply without a strong ETag is used for this run only: recorded without
// one, fetched again next time, never used offline. If the server cannot be
// reached (IoError after the budget) and a copy with an ETag is cached, it is
// used with a warning naming the URL and the ETag. Secrets: only redacted
// URLs are stored or printed.
//
// Thread safety: all methods may be called from any thread (one mutex).
#ifndef SHARDFS_SRC_INDEXREF_INDEX_CACHE_H_
#define SHARDFS_SRC_INDEXREF_INDEX_CACHE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "src/remote/http_client.h"

namespace shardfs::indexref {

inline constexpr char kIndexCacheSubdir[] = "shardfs-index-v1";
inline constexpr char kDefaultIndexCache[] = "/var/cache/shardfs";

struct IndexCacheOptions {
  // The cache directory; "" for kDefaultIndexCache.
  std::string cache_dir;
  // Retry budget, timeouts and CA file of the fetch (-o retry_budget, ...).
  remote::FetchOptions fetch;
  // Bytes of one bundle, fetched and unpacked (--max-index-size).
  uint64_t max_index_size = uint64_t{64} << 30;
  // The revalidation's retry budget, at most (the fetch's if shorter).
  std::chrono::milliseconds revalidate_budget{10'000};
};

class IndexCache {
 public:
  explicit IndexCache(IndexCacheOptions options);
  ~IndexCache();
  IndexCache(const IndexCache&) = delete;
  IndexCache& operator=(const IndexCache&) = delete;

  // The local path of a checked copy of what `url` names (an http(s):// or
  // s3:// URL): an index directory, or a manifest file. The copy stays
  // usable (is not pruned) while this object lives. Errors name the URL
  // (redacted): InvalidArgument for a bundle refused (see the top), a
  // non-index, a cache directory refused; NotFound, IoError and Corruption
  // as the fetch gave them.
  Result<std::string> Fetch(const std::string& url);

  // The local path of a checked copy of the bundle file at `path` (unpacked
  // again when the file changed).
  Result<std::string> Unpack(const std::string& path);

  // If `local` is the directory of a manifest copy (with or without a
  // trailing '/'), the URL base it was fetched from (up to and including
  // the last '/'); else "".
  std::string UrlBaseOf(const std::string& local) const;

 private:
  struct Entry;
  struct State;
  class Source;
  class UrlSource;
  class FileSource;

  Status OpenRoot();  // REQUIRES: mu_ held.
  Result<std::string> Obtain(const std::string& key, Source& source);
  Result<Entry> LockEntry(const std::string& key);
  // The entry's recorded copy; nullopt if none, or if it is not whole.
  static std::optional<State> ReadState(const Entry& entry);
  Result<std::string> Install(Entry& entry, Source& source, int body_fd, const std::string& etag,
                              uint64_t length, State* state);
  Result<std::string> Adopt(Entry& entry, const State& state);
  void Prune(Entry& entry, const std::string& keep);

  const IndexCacheOptions options_;
  mutable std::mutex mu_;
  std::string root_shown_;                    // Guarded by mu_.
  UniqueFd root_fd_;                          // Guarded by mu_: CACHE/shardfs-index-v1.
  std::vector<UniqueFd> held_;                // Guarded by mu_: LOCK_SH on copies in use.
  std::map<std::string, std::string> bases_;  // Guarded by mu_: manifest copy dir -> URL base.
};

}  // namespace shardfs::indexref

#endif  // SHARDFS_SRC_INDEXREF_INDEX_CACHE_H_
