"""Python API of shardmill's native (C++) extension.

The extension links the Arrow and Parquet libraries shipped inside the pinned
pyarrow wheel, so it runs only with exactly that pyarrow: the version is
checked first (from the build's facts, plain Python), then pyarrow is
imported, which loads exactly those shared libraries into the process before
the extension needs them.
"""

import pyarrow as _pyarrow

from shardmill.native_ext._build_info import BUILT_AGAINST_PYARROW

__all__ = ["BUILT_AGAINST_PYARROW", "CacheOptions", "Lc0Tensors", "MegatronSamples", "NativeError", "OrderOptions", "OutputError",
           "ReadOptions", "RemoteOptions", "ShardOptions", "ShardReader", "cached_memory_bytes", "check_pyarrow_match", "load_manifest",
           "release_cached_memory", "self_check"]


def check_pyarrow_match(installed: str | None = None) -> None:
    """Raises ImportError if the running pyarrow differs from the one the extension was built against."""
    installed = installed or _pyarrow.__version__
    if installed != BUILT_AGAINST_PYARROW:
        raise ImportError(
            f"shardmill's native reader was built against pyarrow {BUILT_AGAINST_PYARROW}, whose Arrow "
            f"libraries it links, but pyarrow {installed} is installed: "
            f"pip install pyarrow=={BUILT_AGAINST_PYARROW}"
        )


check_pyarrow_match()

from shardmill.native_ext._native import (NativeError, cached_memory_bytes, release_cached_memory,  # noqa: E402
                                          self_check)
from shardmill.native_ext.converters import Lc0Tensors, MegatronSamples  # noqa: E402
from shardmill.native_ext.options import CacheOptions, OrderOptions, ReadOptions, ShardOptions  # noqa: E402
from shardmill.native_ext.reader import OutputError, ShardReader, load_manifest  # noqa: E402
from shardmill.native_ext.remote import RemoteOptions  # noqa: E402
