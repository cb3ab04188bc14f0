#include "src/remote/url.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "base/strings.h"

namespace shardfs::remote {
namespace {

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

}  // namespace

bool IsRemoteUrl(std::string_view s) {
  return StartsWithNoCase(s, "http://") || StartsWithNoCase(s, "https://") ||
         StartsWithNoCase(s, "s3://");
}

std::string RemoteUrl::ToString() const {
  if (scheme == Scheme::kS3) return fmt::format("s3://{}/{}", bucket, key);
  return url;
}

std::string RemoteUrl::Redacted() const { return RedactLocation(ToString()); }

Result<RemoteUrl> ParseRemoteUrl(std::string_view s) {
  const std::string shown = RedactLocation(s);
  RemoteUrl out;
  std::string_view rest;
  size_t scheme_len = 0;
  if (StartsWithNoCase(s, "s3://")) {
    scheme_len = 5;
  } else if (StartsWithNoCase(s, "http://")) {
    scheme_len = 7;
  } else if (StartsWithNoCase(s, "https://")) {
    scheme_len = 8;
  } else {
    return Status::InvalidArgument(fmt::format("{}: not an http://, https:// or s3:// URL", shown));
  }
  rest = s.substr(scheme_len);
  const bool s3 = scheme_len == 5;
  if (rest.substr(0, rest.find_first_of(s3 ? "/" : "/?#")).find('@') != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format(
        "URL {}: a user name or password in a URL is not supported (the index would store it "
        "and messages print it); {}",
        shown,
        s3 ? "s3:// credentials come from the AWS configuration: AWS_ACCESS_KEY_ID, "
             "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or AWS_PROFILE and ~/.aws/credentials"
           : "for a private http(s) server use a presigned URL (its query is stored for "
             "fetching, never printed), or s3:// with the AWS configuration "
             "(AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials)"));
  }
  if (s3) {
    out.scheme = RemoteUrl::Scheme::kS3;
    size_t slash = rest.find('/');
    std::string_view bucket = rest.substr(0, slash);
    if (bucket.empty()) {
      return Status::InvalidArgument(fmt::format("URL {}: no bucket after s3://", shown));
    }
    for (unsigned char c : bucket) {
      if (!std::isalnum(c) && c != '.' && c != '-' && c != '_') {
        return Status::InvalidArgument(fmt::format(
            "URL {}: bucket name \"{}\" has a character S3 does not allow", shown, bucket));
      }
    }
    out.bucket = std::string(bucket);
    if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
    return out;
  }
  if (scheme_len == 7) {
    out.scheme = RemoteUrl::Scheme::kHttp;
    out.url = "http://";
  } else {
    out.scheme = RemoteUrl::Scheme::kHttps;
    out.url = "https://";
  }
  std::string_view host = rest.substr(0, rest.find_first_of("/?#"));
  if (host.empty() || host.front() == ':') {
    return Status::InvalidArgument(fmt::format("URL {}: no host", shown));
  }
  for (unsigned char c : rest) {
    // libcurl would refuse these later with a vaguer message.
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument(
          fmt::format("URL {}: a space or control character must be percent-encoded", shown));
    }
  }
  out.url.append(rest);
  return out;
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string S3RequestUrl(std::string_view endpoint, std::string_view region,
                         std::string_view bucket, std::string_view key, std::string_view query) {
  std::string out;
  if (endpoint.empty()) {
    out = fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket, region,
                      UriEncode(key, /*keep_slash=*/true));
  } else {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.remove_suffix(1);
    out = fmt::format("{}/{}", endpoint, bucket);
    if (!key.empty()) {
      out.push_back('/');
      out.append(UriEncode(key, /*keep_slash=*/true));
    }
  }
  if (!query.empty()) {
    out.push_back('?');
    out.append(query);
  }
  return out;
}

std::string S3Query(std::vector<std::pair<std::string, std::string>> params) {
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& p : params) {
    if (!out.empty()) out.push_back('&');
    out.append(UriEncode(p.first, /*keep_slash=*/false));
    out.push_back('=');
    out.append(UriEncode(p.second, /*keep_slash=*/false));
  }
  return out;
}

}  // namespace shardfs::remote
