"""Beam PTransforms of shardmill and the plain numpy/pyarrow kernels under them.

Kernel modules (no Beam import): lc0_format, gzip_chunks, chunk_index.
Transform modules: index_transforms.
"""
