#include "blending.h"

#include <algorithm>
#include <cstddef>
#include <limits>
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

void BuildExhaustiveBlendingIndices(const int64_t* sizes, int32_t num_datasets, int16_t* dataset_index,
                                    int64_t* dataset_sample_index) {
  const auto n = static_cast<size_t>(num_datasets);
  int64_t total = 0;
  for (size_t d = 0; d < n; ++d) total += sizes[d];
  std::vector<double> weights(n);
  for (size_t d = 0; d < n; ++d) weights[d] = static_cast<double>(sizes[d]) / static_cast<double>(total);
  std::vector<int64_t> taken(n, 0);
  // Unspent datasets in ascending order, as Megatron's std::set iterates them (ties to the lowest).
  std::vector<int32_t> unspent(n);
  for (size_t d = 0; d < n; ++d) unspent[d] = static_cast<int32_t>(d);
  for (int64_t i = 0; !unspent.empty(); ++i) {
    const double position = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double max_error = std::numeric_limits<double>::lowest();
    for (size_t u = 0; u < unspent.size(); ++u) {
      const auto d = static_cast<size_t>(unspent[u]);
      const double error = weights[d] * position - static_cast<double>(taken[d]);
      if (error > max_error) {
        max_error = error;
        best = u;
      }
    }
    const auto chosen = static_cast<size_t>(unspent[best]);
    dataset_index[i] = static_cast<int16_t>(chosen);
    dataset_sample_index[i] = taken[chosen]++;
    if (taken[chosen] == sizes[chosen]) unspent.erase(unspent.begin() + static_cast<std::ptrdiff_t>(best));
  }
}

}  // namespace shardmill
