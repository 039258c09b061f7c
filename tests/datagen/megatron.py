"""Writes Megatron indexed datasets (`.idx`/`.bin`) for tests."""

from __future__ import annotations

import numpy as np

from shardmill.transforms.tokens.megatron_index import DTYPES, MAGIC

CODES = {np.dtype(v): k for k, v in DTYPES.items()}


def write_indexed_dataset(prefix: str, sequences: list[np.ndarray], dtype, documents: list[int] | None = None):
    """Writes prefix.bin and prefix.idx; returns (idx bytes, bin bytes)."""
    dtype = np.dtype(dtype)
    lengths = np.array([len(s) for s in sequences], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * dtype.itemsize)[:-1]]).astype(np.int64)
    documents = np.array(documents if documents is not None else range(len(sequences) + 1), dtype=np.int64)
    idx = (MAGIC + (1).to_bytes(8, "little") + bytes([CODES[dtype]]) + len(sequences).to_bytes(8, "little")
           + len(documents).to_bytes(8, "little") + lengths.tobytes() + pointers.tobytes() + documents.tobytes())
    data = b"".join(np.asarray(s, dtype=dtype).tobytes() for s in sequences)
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    with open(prefix + ".bin", "wb") as f:
        f.write(data)
    return idx, data
