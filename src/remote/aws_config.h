// Where S3 requests go and how they are signed, from the usual AWS places.
#ifndef SHARDFS_SRC_REMOTE_AWS_CONFIG_H_
#define SHARDFS_SRC_REMOTE_AWS_CONFIG_H_

#include <string>

#include "base/status.h"

namespace shardfs::remote {

struct AwsConfig {
  // Empty when requests go unsigned (sign == false).
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // Sent as x-amz-security-token when not empty.
  std::string region = "us-east-1";
  // "http(s)://host[:port]" of an S3-compatible server: path-style requests
  // (ENDPOINT/BUCKET/KEY). Empty: AWS itself, virtual-hosted
  // (https://BUCKET.s3.REGION.amazonaws.com/KEY).
  std::string endpoint_url;
  // Whether requests carry a SigV4 signature. False for public buckets.
  bool sign = false;
};

// Loads the configuration the AWS CLI would use. Each value is taken from the
// first place that has it:
//   credentials: env AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
//     AWS_SESSION_TOKEN); else the profile's aws_access_key_id /
//     aws_secret_access_key / aws_session_token in the shared credentials file
//     (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials, section
//     [NAME]); else the same keys in the config file.
//   region: env AWS_REGION, AWS_DEFAULT_REGION; else `region` in the config
//     file (AWS_CONFIG_FILE, default ~/.aws/config, section [profile NAME], or
//     [default] for the default profile); else us-east-1.
//   endpoint: env AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL; else `endpoint_url`
//     in the config file's profile; else none (AWS).
// The profile NAME is env AWS_PROFILE, else "default". Requests are unsigned
// when AWS_NO_SIGN_REQUEST is "true" (any case) or no credentials are found.
// Missing files are fine. Errors: InvalidArgument naming FILE:LINE for a
// malformed line; NotFound when AWS_PROFILE names a profile neither file has;
// InvalidArgument when only one of the key id and the secret is found, or
// the endpoint is not http(s)://, or is http:// (clear text: the signed
// requests and the session token could be read and replayed) and env
// SHARDFS_S3_ALLOW_HTTP is not "1".
Result<AwsConfig> LoadAwsConfig();

// The environment variable that accepts a plain-http S3 endpoint.
inline constexpr char kS3AllowHttpEnv[] = "SHARDFS_S3_ALLOW_HTTP";

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_AWS_CONFIG_H_
