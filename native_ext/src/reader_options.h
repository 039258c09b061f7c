// The shard reader's options, one struct: what the binding fills and every
// part of the reader reads (the facade checks them in ShardReader::Make).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "record_converter.h"

#include "shard_cache.h"
#include "shard_file.h"

namespace shardmill {

struct ReaderOptions {
  std::vector<ShardFile> shards;       // in manifest order (global row-group numbering follows it)
  RemoteOptions remote;                // given to every shard by ShardReader::Make
  CacheOptions cache;                  // a local copy of the shards (shard_cache.h); directory empty: none
  std::vector<std::string> columns;    // fixed_size_binary or fixed-width numeric
  int64_t batch_size = 256;
  bool drop_remainder = false;         // drop each epoch's last partial batch
  int64_t shard_index = 0;             // this rank
  int64_t shard_count = 1;             // number of ranks
  // Instead of the rank's slice: epoch positions [slice_begin, slice_end) of
  // every epoch (both >= 0; an elastic resume reads what remains of an epoch
  // as such pieces). -1: the rank's slice.
  int64_t slice_begin = -1;
  int64_t slice_end = -1;
  int64_t num_epochs = 1;              // 0: unbounded
  uint64_t seed = 0;
  bool shuffle = true;                 // false: row groups and rows in manifest order
  int64_t window_row_groups = 8;       // row groups whose rows are shuffled together
  int num_threads = 2;                 // decode threads
  int64_t prefetch_windows = 2;        // windows decoded ahead of the one being served
  int64_t start_epoch = 0;             // resume point: epoch ...
  int64_t start_position = 0;          // ... and rows of this rank's slice already delivered
  // Training tensors converted from a column on the decode threads once a
  // window's rows are in epoch order (record_converter.h); kind kNone: none.
  ConverterOptions converter;
};

}  // namespace shardmill
