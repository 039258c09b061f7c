#include "token_runs.h"

#include <cstring>

namespace shardmill {

arrow::Status CopyRuns(const uint8_t* src, int64_t src_size, const int64_t* starts, const int64_t* lengths,
                     int64_t n, uint8_t* dest, int64_t dest_size) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Without forming starts[i] + lengths[i], which could overflow.
    if (starts[i] < 0 || lengths[i] < 0 || starts[i] > src_size || lengths[i] > src_size - starts[i]) {
      return arrow::Status::Invalid("run ", i, " [", starts[i], ", +", lengths[i], ") is outside the ", src_size,
                                    "-byte source");
    }
    if (lengths[i] > dest_size - total) return arrow::Status::Invalid("the runs hold more bytes than the destination");
    total += lengths[i];
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dest, src + starts[i], static_cast<size_t>(lengths[i]));
    dest += lengths[i];
  }
  return arrow::Status::OK();
}

}  // namespace shardmill
