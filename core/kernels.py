"""The job kernels in native code: what the Beam jobs call for their inner loops.

Plain functions over numpy arrays; each releases the GIL for its work and
raises NativeError (or ValueError for bad arguments), never aborts.

- pack_chunk_records: one lc0 chunk inflated, checked, its planned records packed back to back;
- pack_records, unpack_records, max_packed_bytes: fixed-size records as runs of repeated words (~6x smaller
  for lc0), while the shuffle holds them, and back into a shard's rows;
- sample_labels, reservoir_sample: one-pass label sampling of a partition (Algorithm L reservoirs);
- build_blending_indices, build_exhaustive_blending_indices: Megatron's BlendedDataset indices (by
  normalised weights for a size; every sample of each dataset once);
- crc32: gzip's CRC-32 of a buffer (libdeflate, ~10x zlib's speed here), for the shuffle's files;
- copy_runs: byte runs of a mapped token file copied back to back (Megatron samples);
- lc0_tensors: lc0 records in memory to training tensors (the reader converts on its own threads).
"""

from shardmill.core.native_build import check_pyarrow_match

check_pyarrow_match()  # before the compiled module loads the Arrow libraries it links

from shardmill.core._kernels import (build_blending_indices, build_exhaustive_blending_indices,  # noqa: E402
                                     copy_runs, crc32, lc0_tensors, max_packed_bytes, pack_chunk_records,
                                     pack_records, reservoir_sample, sample_labels, unpack_records)
from shardmill.core.errors import NativeError  # noqa: E402

__all__ = ["NativeError", "build_blending_indices", "build_exhaustive_blending_indices", "copy_runs", "crc32", "lc0_tensors",
           "max_packed_bytes", "pack_chunk_records", "pack_records", "reservoir_sample", "sample_labels",
           "unpack_records"]
