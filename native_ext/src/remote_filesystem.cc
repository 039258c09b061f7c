#include "remote_filesystem.h"

#include <arrow/filesystem/api.h>
#include <arrow/filesystem/gcsfs.h>
#include <arrow/filesystem/s3fs.h>

namespace shardmill {

namespace {

bool HasScheme(const std::string& uri, const char* scheme) { return uri.rfind(scheme, 0) == 0; }

}  // namespace

arrow::Result<std::shared_ptr<arrow::fs::FileSystem>> OpenFileSystem(const std::string& uri_or_path,
                                                                     const RemoteOptions& remote, std::string* path) {
  if (remote.max_attempts < 1 || !(remote.connect_timeout_seconds > 0) || !(remote.request_timeout_seconds > 0)) {
    return arrow::Status::Invalid("remote options: timeouts must be > 0 and max_attempts >= 1");
  }
  if (HasScheme(uri_or_path, "s3://")) {
    ARROW_RETURN_NOT_OK(arrow::fs::EnsureS3Initialized());  // before the options: they read the SDK's config
    ARROW_ASSIGN_OR_RAISE(auto options, arrow::fs::S3Options::FromUri(uri_or_path, path));
    options.connect_timeout = remote.connect_timeout_seconds;
    options.request_timeout = remote.request_timeout_seconds;
    options.retry_strategy = arrow::fs::S3RetryStrategy::GetAwsStandardRetryStrategy(remote.max_attempts);
    ARROW_ASSIGN_OR_RAISE(auto fs, arrow::fs::S3FileSystem::Make(options));
    return std::static_pointer_cast<arrow::fs::FileSystem>(fs);
  }
  if (HasScheme(uri_or_path, "gs://") || HasScheme(uri_or_path, "gcs://")) {
    ARROW_ASSIGN_OR_RAISE(auto options, arrow::fs::GcsOptions::FromUri(uri_or_path, path));
    options.retry_limit_seconds =
        remote.max_attempts * (remote.connect_timeout_seconds + remote.request_timeout_seconds);
    ARROW_ASSIGN_OR_RAISE(auto fs, arrow::fs::GcsFileSystem::Make(options));
    return std::static_pointer_cast<arrow::fs::FileSystem>(fs);
  }
  return arrow::fs::FileSystemFromUriOrPath(uri_or_path, path);
}

}  // namespace shardmill
