// src/remote/aws_config.h: AWS configuration from the environment and from
// ~/.aws files.
#include "src/remote/aws_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <string_view>

#include "tests/unit/remote/remote_test_util.h"
#include "tests/unit/test_util.h"

namespace shardfs::remote {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class AwsConfigTest : public ::testing::Test {
 protected:
  AwsConfigTest() {
    env_.Set("HOME", dir_.path());
    // Most tests here name plain-http endpoints; PlainHttpEndpointNeedsConsent
    // shows the refusal without this.
    env_.Set("SHARDFS_S3_ALLOW_HTTP", "1");
    ::mkdir((dir_ / ".aws").c_str(), 0700);
  }
  void WriteCredentials(std::string_view text) {
    testing::WriteFile(dir_ / ".aws/credentials", text);
  }
  void WriteConfig(std::string_view text) { testing::WriteFile(dir_ / ".aws/config", text); }

  testing::TempDir dir_;
  EnvGuard env_;
};

TEST_F(AwsConfigTest, NothingAnywhereMeansUnsignedAwsDefaults) {
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->sign);
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(c->endpoint_url, "");
}

TEST_F(AwsConfigTest, FilesGiveTheDefaultProfile) {
  WriteCredentials(
      "# comment\n[default]\naws_access_key_id = AKFILE\naws_secret_access_key=SFILE\n"
      "aws_session_token = TFILE\n\n[other]\naws_access_key_id=AKO\naws_secret_access_key=SO\n");
  WriteConfig(
      "[default]\nregion = eu-central-1\n; c\nendpoint_url = http://127.0.0.1:9000/\n"
      "s3 =\n  addressing_style = path\n");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->sign);
  EXPECT_EQ(c->access_key_id, "AKFILE");
  EXPECT_EQ(c->secret_access_key, "SFILE");
  EXPECT_EQ(c->session_token, "TFILE");
  EXPECT_EQ(c->region, "eu-central-1");
  EXPECT_EQ(c->endpoint_url, "http://127.0.0.1:9000");
}

TEST_F(AwsConfigTest, NamedProfileReadsProfileSections) {
  WriteCredentials(
      "[default]\naws_access_key_id=AKD\naws_secret_access_key=SD\n"
      "[train]\naws_access_key_id=AKT\naws_secret_access_key=ST\n");
  WriteConfig(
      "[default]\nregion=us-west-2\n[profile train]\nregion = ap-south-1\n"
      "endpoint_url = https://minio.internal:9000\n");
  env_.Set("AWS_PROFILE", "train");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AKT");
  EXPECT_EQ(c->session_token, "");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint_url, "https://minio.internal:9000");
}

TEST_F(AwsConfigTest, EnvironmentWinsOverFiles) {
  WriteCredentials("[default]\naws_access_key_id=AKD\naws_secret_access_key=SD\n");
  WriteConfig("[default]\nregion=us-west-2\nendpoint_url=http://file:1\n");
  env_.Set("AWS_ACCESS_KEY_ID", "AKENV");
  env_.Set("AWS_SECRET_ACCESS_KEY", "SENV");
  env_.Set("AWS_SESSION_TOKEN", "TENV");
  env_.Set("AWS_DEFAULT_REGION", "eu-north-1");
  env_.Set("AWS_ENDPOINT_URL", "http://generic:2");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AKENV");
  EXPECT_EQ(c->secret_access_key, "SENV");
  EXPECT_EQ(c->session_token, "TENV");
  EXPECT_EQ(c->region, "eu-north-1");
  EXPECT_EQ(c->endpoint_url, "http://generic:2");
  env_.Set("AWS_REGION", "sa-east-1");
  env_.Set("AWS_ENDPOINT_URL_S3", "http://s3only:3");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->region, "sa-east-1");
  EXPECT_EQ(c->endpoint_url, "http://s3only:3");
}

TEST_F(AwsConfigTest, FileLocationsFromEnvironment) {
  testing::WriteFile(dir_ / "creds", "[default]\naws_access_key_id=AK\naws_secret_access_key=S\n");
  testing::WriteFile(dir_ / "conf", "[default]\nregion=r1\n");
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", dir_ / "creds");
  env_.Set("AWS_CONFIG_FILE", dir_ / "conf");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "AK");
  EXPECT_EQ(c->region, "r1");
}

TEST_F(AwsConfigTest, NoSignRequestOverridesCredentials) {
  env_.Set("AWS_ACCESS_KEY_ID", "AK");
  env_.Set("AWS_SECRET_ACCESS_KEY", "S");
  env_.Set("AWS_NO_SIGN_REQUEST", "TRUE");
  auto c = LoadAwsConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->sign);
  EXPECT_EQ(c->access_key_id, "");
}

TEST_F(AwsConfigTest, ClearErrors) {
  WriteCredentials("[default]\naws_access_key_id = AK\nthis line is wrong\n");
  auto c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(dir_ / ".aws/credentials:3:"));

  WriteCredentials("key = value\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("credentials:1:"));

  WriteCredentials("[default\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("credentials:1:"));

  WriteCredentials("[default]\naws_access_key_id = AK\n");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("without a secret access key"));

  WriteCredentials("");
  env_.Set("AWS_PROFILE", "nope");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("nope"));

  unsetenv("AWS_PROFILE");
  env_.Set("AWS_ENDPOINT_URL", "minio:9000");
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_ENDPOINT_URL"));
}

TEST_F(AwsConfigTest, PlainHttpEndpointNeedsConsent) {
  unsetenv("SHARDFS_S3_ALLOW_HTTP");
  env_.Set("AWS_ENDPOINT_URL_S3", "http://user:hunter2@127.0.0.1:9000/");
  auto c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_ENDPOINT_URL_S3 = http://<redacted>@127.0.0.1"));
  EXPECT_THAT(c.status().message(), HasSubstr("clear text"));
  EXPECT_THAT(c.status().message(), HasSubstr("SHARDFS_S3_ALLOW_HTTP=1"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("hunter2")));

  unsetenv("AWS_ENDPOINT_URL_S3");
  WriteConfig("[default]\nendpoint_url = http://minio:9000\n");
  env_.Set("SHARDFS_S3_ALLOW_HTTP", "0");  // Only "1" says yes.
  c = LoadAwsConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("endpoint_url of profile default"));

  env_.Set("SHARDFS_S3_ALLOW_HTTP", "1");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->endpoint_url, "http://minio:9000");

  unsetenv("SHARDFS_S3_ALLOW_HTTP");
  WriteConfig("[default]\nendpoint_url = https://minio:9000\n");
  c = LoadAwsConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->endpoint_url, "https://minio:9000");
}

}  // namespace
}  // namespace shardfs::remote
