// Shard paths to filesystems: local paths as they are, and a remote store that never answers failing
// within the bounds (an S3 endpoint that accepts connections and is silent).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <arrow/filesystem/s3fs.h>
#include <gtest/gtest.h>

#include "remote_filesystem.h"

namespace {

using shardmill::OpenFileSystem;
using shardmill::RemoteOptions;

// Finalizes Arrow's S3 subsystem once the tests are done, as Arrow asks of a process that used it.
class S3Environment : public ::testing::Environment {
 public:
  void TearDown() override { (void)arrow::fs::FinalizeS3(); }
};
const auto* const kS3Environment = ::testing::AddGlobalTestEnvironment(new S3Environment);

// A listening socket on loopback that never accepts: connections complete, requests get no answer.
class SilentServer {
 public:
  SilentServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      port_ = -1;
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~SilentServer() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_;
};

TEST(RemoteFilesystem, LocalPathsAndFileUrisAreArrowsLocalFilesystem) {
  std::string path;
  auto fs = OpenFileSystem("/tmp/some/shard.parquet", RemoteOptions{}, &path);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  EXPECT_EQ((*fs)->type_name(), "local");
  EXPECT_EQ(path, "/tmp/some/shard.parquet");
  ASSERT_TRUE(OpenFileSystem("file:///tmp/x.parquet", RemoteOptions{}, &path).ok());
  EXPECT_EQ(path, "/tmp/x.parquet");
}

TEST(RemoteFilesystem, BoundsThatBoundNothingAreRefused) {
  std::string path;
  for (const auto& bad : {RemoteOptions{0, 1, 1}, RemoteOptions{1, -1, 1}, RemoteOptions{1, 1, 0}}) {
    auto fs = OpenFileSystem("s3://bucket/out", bad, &path);
    ASSERT_FALSE(fs.ok());
    EXPECT_TRUE(fs.status().IsInvalid()) << fs.status().ToString();
  }
}

TEST(RemoteFilesystem, ASilentS3StoreFailsWithinTheBounds) {
  SilentServer server;
  ASSERT_GT(server.port(), 0);
  setenv("AWS_ACCESS_KEY_ID", "testing", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  std::string path;
  auto fs = OpenFileSystem("s3://bucket/out?region=us-east-1&scheme=http&endpoint_override=127.0.0.1:" +
                               std::to_string(server.port()),
                           RemoteOptions{1, 1, 2}, &path);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  EXPECT_EQ((*fs)->type_name(), "s3");
  EXPECT_EQ(path, "bucket/out");
  const auto start = std::chrono::steady_clock::now();
  auto info = (*fs)->GetFileInfo(path + "/shard.parquet");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(info.ok());
  EXPECT_LT(seconds, 20) << "two attempts stalled for 1 s each should not take " << seconds << " s";
}

}  // namespace
