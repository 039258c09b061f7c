// Megatron's blending of several datasets by weight (BlendedDataset's
// dataset index and dataset sample index), the greedy rule of Megatron-LM's
// helpers.cpp build_blending_indices: sample i goes to the dataset whose
// share falls furthest behind its weight, weight[d] * max(i, 1) -
// taken[d] (the first such dataset on ties), and is that dataset's next
// sample. Linear in size x datasets; a loop, so native.
#pragma once

#include <cstdint>

namespace shardmill {

// Fills dataset_index[i] and dataset_sample_index[i] for i in [0, size).
// `weights` are Megatron's normalised weights (num_datasets of them).
void BuildBlendingIndices(const double* weights, int32_t num_datasets, int64_t size, int16_t* dataset_index,
                          int64_t* dataset_sample_index);

// Megatron's exhaustive blending (helpers.cpp build_exhaustive_blending_indices,
// a blend without weights or size): exactly sizes[d] samples of each dataset,
// sum(sizes) in all, interleaved by the same greedy rule over the weights
// sizes[d] / sum(sizes) among the datasets not yet spent. Every sizes[d] > 0.
void BuildExhaustiveBlendingIndices(const int64_t* sizes, int32_t num_datasets, int16_t* dataset_index,
                                    int64_t* dataset_sample_index);

}  // namespace shardmill
