#include "remote/url.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

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

Result<RemoteUrl> ParseRemoteUrl(std::string_view s) {
  RemoteUrl out;
  std::string_view rest;
  if (StartsWithNoCase(s, "s3://")) {
    out.scheme = RemoteUrl::Scheme::kS3;
    rest = s.substr(5);
    size_t slash = rest.find('/');
    std::string_view bucket = rest.substr(0, slash);
    if (bucket.empty()) {
      return Status::InvalidArgument(fmt::format("URL {}: no bucket after s3://", s));
    }
    for (unsigned char c : bucket) {
      if (!std::isalnum(c) && c != '.' && c != '-' && c != '_') {
        return Status::InvalidArgument(fmt::format(
            "URL {}: bucket name \"{}\" has a character S3 does not allow", s, bucket));
      }
    }
    out.bucket = std::string(bucket);
    if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
    return out;
  }
  if (StartsWithNoCase(s, "http://")) {
    out.scheme = RemoteUrl::Scheme::kHttp;
    rest = s.substr(7);
    out.url = "http://";
  } else if (StartsWithNoCase(s, "https://")) {
    out.scheme = RemoteUrl::Scheme::kHttps;
    rest = s.substr(8);
    out.url = "https://";
  } else {
    return Status::InvalidArgument(
        fmt::format("{}: not an http://, https:// or s3:// URL", s));
  }
  std::string_view host = rest.substr(0, rest.find_first_of("/?#"));
  if (host.empty() || host.front() == ':') {
    return Status::InvalidArgument(fmt::format("URL {}: no host", s));
  }
  for (unsigned char c : rest) {
    // libcurl would refuse these later with a vaguer message.
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument(fmt::format(
          "URL {}: a space or control character must be percent-encoded", s));
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
                         std::string_view bucket, std::string_view key,
                         std::string_view query) {
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
