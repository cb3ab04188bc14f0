#include "tools/builder/remote_shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "base/io.h"
#include "base/progress.h"
#include "base/strings.h"
#include "src/remote/aws_config.h"
#include "src/remote/s3_list.h"
#include "src/remote/url.h"

namespace shardfs::builder {

namespace {

// The AWS configuration, loaded once (environment and files do not change
// during a build). Only loaded when an s3:// URL is seen.
Result<remote::AwsConfig> AwsConfigFor(const remote::RemoteUrl& url) {
  if (!url.is_s3()) return remote::AwsConfig{};
  static std::once_flag once;
  static Result<remote::AwsConfig> config = Status::IoError("not loaded");
  std::call_once(once, [] { config = remote::LoadAwsConfig(); });
  return config;
}

}  // namespace

bool IsRemoteInput(const std::string& input) { return remote::IsRemoteUrl(input); }

Status ExpandRemoteInput(const std::string& input, const RemoteLimits& limits,
                         std::vector<std::string>* out) {
  SHARDFS_ASSIGN_OR_RETURN(remote::RemoteUrl url, remote::ParseRemoteUrl(input));
  if (!input.ends_with("/")) {
    out->push_back(url.ToString());
    return Status::Ok();
  }
  if (!url.is_s3()) {
    return Status::InvalidArgument(fmt::format(
        "{}: an HTTP URL ending in '/' cannot be listed; give the shards' names in a list file "
        "(--from-list FILE --url-prefix {})",
        url.Redacted(), url.Redacted()));
  }
  SHARDFS_ASSIGN_OR_RETURN(remote::AwsConfig config, AwsConfigFor(url));
  remote::HttpClient client(remote::FetchOptions{}, config, nullptr);
  SHARDFS_ASSIGN_OR_RETURN(std::vector<remote::ListedObject> objects,
                           remote::ListS3(client, url.bucket, url.key, limits.max_list_pages));
  size_t found = 0;
  for (const remote::ListedObject& o : objects) {
    if (!o.key.ends_with(".tar")) continue;
    out->push_back(fmt::format("s3://{}/{}", url.bucket, o.key));
    ++found;
  }
  if (found == 0) {
    return Status::InvalidArgument(
        fmt::format("{}: no *.tar objects under this prefix", url.Redacted()));
  }
  return Status::Ok();
}

Result<UniqueFd> DownloadShard(const std::string& url_text, uint64_t max_size,
                               remote::ObjectInfo* info) {
  SHARDFS_ASSIGN_OR_RETURN(remote::RemoteUrl url, remote::ParseRemoteUrl(url_text));
  SHARDFS_ASSIGN_OR_RETURN(remote::AwsConfig config, AwsConfigFor(url));
  const std::string shown = url.Redacted();
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/var/tmp";
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return Status::FromErrno(errno, fmt::format("shard {}: a temporary file in {}", shown, dir));
  }
  remote::HttpClient client(remote::FetchOptions{}, config, nullptr);
  const int out = fd.get();
  uint64_t written = 0;
  Result<remote::ObjectInfo> got = client.GetStream(url, [&](const char* data, size_t len) {
    if (len > max_size - written) {
      return Status::IoError(fmt::format(
          "longer than the {} ({} bytes) a remote shard may have; --max-shard-size SIZE "
          "raises the limit",
          HumanBytes(static_cast<double>(max_size)), max_size));
    }
    written += len;
    if (WriteFully(out, data, len)) return Status::Ok();
    return Status::FromErrno(errno, fmt::format("shard {}: writing the temporary copy", shown));
  });
  // On an error `fd` closes here, and with it goes the partial copy.
  if (!got.ok()) return got.status().WithContext(fmt::format("shard {}", shown));
  if (got->etag.size() > 0xffff) {
    return Status::InvalidArgument(
        fmt::format("shard {}: an ETag of {} bytes (at most 65535)", shown, got->etag.size()));
  }
  *info = std::move(got).value();
  return fd;
}

}  // namespace shardfs::builder
