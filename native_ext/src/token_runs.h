// Copies runs of bytes from a mapped token file into consecutive places: the
// pieces of Megatron samples (the rest of a document, whole documents, the
// head of the last one), each one memcpy, instead of a gather through a
// position per token.
#pragma once

#include <cstdint>

#include <arrow/status.h>

namespace shardmill {

// Copies src[starts[i], starts[i] + lengths[i]) for i in [0, n) back to back
// into dest (sum of lengths bytes). Invalid (a run outside src, a negative
// length, more bytes than dest holds) before anything is copied.
arrow::Status CopyRuns(const uint8_t* src, int64_t src_size, const int64_t* starts, const int64_t* lengths,
                     int64_t n, uint8_t* dest, int64_t dest_size);

}  // namespace shardmill
