#include "blending.h"

#include <algorithm>
#include <vector>

namespace shardmill {

void BuildBlendingIndices(const double* weights, int32_t num_datasets, int64_t size, int16_t* dataset_index,
                          int64_t* dataset_sample_index) {
  std::vector<int64_t> taken(static_cast<size_t>(num_datasets), 0);
  for (int64_t i = 0; i < size; ++i) {
    // The same double arithmetic as Megatron's, so ties break the same way.
    const double position = std::max(static_cast<double>(i), 1.0);
    int32_t chosen = 0;
    double max_error = weights[0] * position - static_cast<double>(taken[0]);
    for (int32_t d = 1; d < num_datasets; ++d) {
      const double error = weights[d] * position - static_cast<double>(taken[static_cast<size_t>(d)]);
      if (error > max_error) {
        max_error = error;
        chosen = d;
      }
    }
    dataset_index[i] = static_cast<int16_t>(chosen);
    dataset_sample_index[i] = taken[static_cast<size_t>(chosen)]++;
  }
}

}  // namespace shardmill
