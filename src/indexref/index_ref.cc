#include "src/indexref/index_ref.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "base/strings.h"
#include "index/manifest.h"
#include "src/remote/url.h"

namespace shardfs::indexref {

bool IsIndexUrl(std::string_view arg) { return remote::IsRemoteUrl(arg); }

bool IsBundleFile(const std::string& path) {
  static constexpr std::string_view kSuffixes[] = {".tar", ".tar.gz", ".tgz", ".tar.zst"};
  bool named = false;
  for (std::string_view s : kSuffixes) named |= path.ends_with(s);
  struct stat st;
  return named && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         !index::IsManifestFile(path);
}

index::PartitionResolver MakePartitionResolver(std::shared_ptr<IndexCache> cache) {
  return [cache](const std::string& base, const std::string& ref) -> Result<std::string> {
    if (IsIndexUrl(ref)) return cache->Fetch(ref);
    const std::string url_base = IsIndexUrl(base) ? base : cache->UrlBaseOf(base);
    if (!url_base.empty()) {
      if (ref.starts_with('/')) {
        return Status::InvalidArgument(fmt::format(
            "manifest {}: partition {}: a local path in a manifest fetched by URL, refused",
            RedactLocation(url_base), ref));
      }
      return cache->Fetch(url_base + ref);
    }
    const std::string path = ref.starts_with('/') || base.empty() ? ref
                             : base.ends_with('/')                ? base + ref
                                                                  : JoinPath(base, ref);
    if (IsBundleFile(path)) return cache->Unpack(path);
    return path;
  };
}

Result<IndexRef> ResolveIndex(const std::string& arg, const IndexCacheOptions& options,
                              index::ReaderOptions* ro) {
  IndexRef out;
  out.cache = std::make_shared<IndexCache>(options);
  ro->resolve_partition = MakePartitionResolver(out.cache);
  if (IsIndexUrl(arg)) {
    out.shown = RedactLocation(arg);
    SHARDFS_ASSIGN_OR_RETURN(out.path, out.cache->Fetch(arg));
    out.cached = true;
  } else if (IsBundleFile(arg)) {
    out.shown = arg;
    SHARDFS_ASSIGN_OR_RETURN(out.path, out.cache->Unpack(arg));
    out.cached = true;
  } else {
    out.shown = arg;
    out.path = arg;
  }
  return out;
}

Status RefuseFetchedIndex(const std::string& arg, std::string_view command) {
  if (IsIndexUrl(arg)) {
    return Status::InvalidArgument(fmt::format(
        "{}: {}: an index by URL is read-only here (only a copy of it is cached); run {} on "
        "the index itself and publish it again",
        command, RedactLocation(arg), command));
  }
  if (IsBundleFile(arg)) {
    return Status::InvalidArgument(
        fmt::format("{}: {}: an index bundle is read-only here; run {} on the index directory and "
                    "bundle it again",
                    command, arg, command));
  }
  return Status::Ok();
}

Result<IndexRef> ResolveForVolume(const std::string& arg, reader::VolumeOptions* options) {
  IndexCacheOptions co;
  co.cache_dir = options->cache_dir;
  co.fetch = options->fetch.fetch;
  co.max_index_size = options->max_index_size;
  return ResolveIndex(arg, co, &options->reader);
}

reader::IndexLocation LocationOf(const IndexRef& ref) {
  return reader::IndexLocation{ref.path, ref.shown, ref.cached, ref.cache};
}

}  // namespace shardfs::indexref
