"""Beam PTransforms of shardmill and the plain numpy/pyarrow kernels under them.

Kernels (no Beam pipeline code): lc0_format, gzip_chunks, chunk_index,
index_summary, keyed_hash, chunk_sampling, job_plan, chunk_loading,
shard_writer, manifest, spill, output_contract, label_sampling,
event_sources, label_partition. Transforms: index_transforms. I/O helper:
atomic_io (Beam FileSystems).
"""
