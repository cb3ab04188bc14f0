#include "src/remote/aws_config.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>

#include "base/strings.h"

namespace shardfs::remote {
namespace {

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// section name -> key -> value.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;

// The INI dialect of ~/.aws files: [section], key = value, comments with '#'
// or ';'. Indented lines continue a nested setting ("s3 =" followed by
// "  endpoint_url = ..."): they belong to the service, not the profile, and
// are skipped.
Result<std::optional<IniFile>> ReadIni(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::optional<IniFile>();  // A missing file is fine.
  IniFile out;
  std::string line;
  std::string section;
  bool in_section = false;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    std::string_view t = Trim(line);
    if (t.empty() || t.front() == '#' || t.front() == ';') continue;
    if (std::isspace(static_cast<unsigned char>(line.front())) && in_section) continue;
    if (t.front() == '[') {
      if (t.back() != ']' || Trim(t.substr(1, t.size() - 2)).empty()) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: expected a section header like [name]", path, lineno));
      }
      section = std::string(Trim(t.substr(1, t.size() - 2)));
      in_section = true;
      out[section];
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string_view::npos || Trim(t.substr(0, eq)).empty()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: expected \"key = value\" or [section]", path, lineno));
    }
    if (!in_section) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: a setting before the first [section]", path, lineno));
    }
    out[section][std::string(Trim(t.substr(0, eq)))] = std::string(Trim(t.substr(eq + 1)));
  }
  return std::optional<IniFile>(std::move(out));
}

const std::map<std::string, std::string>* Section(const std::optional<IniFile>& f,
                                                  const std::string& name) {
  if (!f) return nullptr;
  auto it = f->find(name);
  return it == f->end() ? nullptr : &it->second;
}

std::optional<std::string> Get(const std::map<std::string, std::string>* s, const char* key) {
  if (s == nullptr) return std::nullopt;
  auto it = s->find(key);
  if (it == s->end() || it->second.empty()) return std::nullopt;
  return it->second;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// Sets cfg->endpoint_url from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
// profile's endpoint_url (`conf_sec`, of `profile` in `config_path`): an
// https URL, or http with kS3AllowHttpEnv=1, without trailing slashes.
Status SetEndpoint(const std::map<std::string, std::string>* conf_sec, const std::string& profile,
                   const std::string& config_path, AwsConfig* cfg) {
  std::string endpoint_source = "AWS_ENDPOINT_URL_S3";
  std::optional<std::string> endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (!endpoint) {
    endpoint = Env("AWS_ENDPOINT_URL");
    endpoint_source = "AWS_ENDPOINT_URL";
  }
  if (!endpoint) {
    endpoint = Get(conf_sec, "endpoint_url");
    endpoint_source = fmt::format("endpoint_url of profile {} in {}", profile, config_path);
  }
  if (endpoint) {
    std::string_view e = *endpoint;
    if (e.substr(0, 7) != "http://" && e.substr(0, 8) != "https://") {
      return Status::InvalidArgument(fmt::format("{} = {}: expected an http:// or https:// URL",
                                                 endpoint_source, RedactLocation(e)));
    }
    if (e.substr(0, 7) == "http://" && Env(kS3AllowHttpEnv) != "1") {
      return Status::InvalidArgument(fmt::format(
          "{} = {}: an S3 endpoint over plain http would send the signed requests and the "
          "session token in clear text; use https://, or set {}=1 to accept it (a test "
          "server, a trusted network)",
          endpoint_source, RedactLocation(e), kS3AllowHttpEnv));
    }
    while (e.back() == '/') e.remove_suffix(1);
    cfg->endpoint_url = std::string(e);
  }
  return Status::Ok();
}

}  // namespace

Result<AwsConfig> LoadAwsConfig() {
  AwsConfig cfg;
  const std::string home = Env("HOME").value_or("");
  const std::string cred_path =
      Env("AWS_SHARED_CREDENTIALS_FILE").value_or(home + "/.aws/credentials");
  const std::string config_path = Env("AWS_CONFIG_FILE").value_or(home + "/.aws/config");
  const std::optional<std::string> env_profile = Env("AWS_PROFILE");
  const std::string profile = env_profile.value_or("default");

  SHARDFS_ASSIGN_OR_RETURN(std::optional<IniFile> creds, ReadIni(cred_path));
  SHARDFS_ASSIGN_OR_RETURN(std::optional<IniFile> config, ReadIni(config_path));
  const auto* cred_sec = Section(creds, profile);
  // The config file names profiles "[profile NAME]", except [default].
  const auto* conf_sec = Section(config, "profile " + profile);
  if (conf_sec == nullptr && profile == "default") conf_sec = Section(config, "default");
  if (env_profile && cred_sec == nullptr && conf_sec == nullptr) {
    return Status::NotFound(fmt::format("AWS_PROFILE={}: no [{}] in {} and no [profile {}] in {}",
                                        profile, profile, cred_path, profile, config_path));
  }

  std::optional<std::string> key = Env("AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = Env("AWS_SECRET_ACCESS_KEY");
  std::optional<std::string> token;
  std::string source = "the environment";
  if (key || secret) {
    token = Env("AWS_SESSION_TOKEN");
  } else {
    using Place = std::pair<const std::map<std::string, std::string>*, const std::string*>;
    for (const Place& place : {Place{cred_sec, &cred_path}, Place{conf_sec, &config_path}}) {
      const auto* sec = place.first;
      const std::string* path = place.second;
      key = Get(sec, "aws_access_key_id");
      secret = Get(sec, "aws_secret_access_key");
      token = Get(sec, "aws_session_token");
      source = fmt::format("profile {} in {}", profile, *path);
      if (key || secret) break;
    }
  }
  if (key.has_value() != secret.has_value()) {
    return Status::InvalidArgument(fmt::format("AWS credentials from {}: {} without {}", source,
                                               key ? "an access key id" : "a secret access key",
                                               key ? "a secret access key" : "an access key id"));
  }
  const std::optional<std::string> no_sign = Env("AWS_NO_SIGN_REQUEST");
  if (key && !(no_sign && EqualsNoCase(*no_sign, "true"))) {
    cfg.access_key_id = *key;
    cfg.secret_access_key = *secret;
    cfg.session_token = token.value_or("");
    cfg.sign = true;
  }

  if (auto r = Env("AWS_REGION")) {
    cfg.region = *r;
  } else if (auto d = Env("AWS_DEFAULT_REGION")) {
    cfg.region = *d;
  } else if (auto c = Get(conf_sec, "region")) {
    cfg.region = *c;
  }

  SHARDFS_RETURN_IF_ERROR(SetEndpoint(conf_sec, profile, config_path, &cfg));
  return cfg;
}

}  // namespace shardfs::remote
