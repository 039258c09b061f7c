// The filesystem of a shard path: a local path or an Arrow filesystem URI, with every remote call bounded.
//
// An object store that does not answer must become an error within seconds, never a silent hang: S3 gets
// a connect timeout, a request timeout and a number of attempts; GCS a retry time limit. Any other URI is
// opened by Arrow's FileSystemFromUriOrPath as it is.
#pragma once

#include <memory>
#include <string>

#include <arrow/filesystem/filesystem.h>
#include <arrow/result.h>

namespace shardmill {

struct RemoteOptions {
  double connect_timeout_seconds = 5;   // establishing a connection
  double request_timeout_seconds = 10;  // a request that transfers nothing for this long fails (a stall)
  int max_attempts = 3;                 // tries of a failing request, backing off between them (>= 1)
};

// The filesystem `uri_or_path` is on; `path` receives the path within it.
arrow::Result<std::shared_ptr<arrow::fs::FileSystem>> OpenFileSystem(const std::string& uri_or_path,
                                                                     const RemoteOptions& remote, std::string* path);

}  // namespace shardmill
