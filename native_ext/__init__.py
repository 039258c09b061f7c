"""Python API of shardmill's native (C++) extension.

The extension links the Arrow and Parquet libraries shipped inside the pinned
pyarrow wheel, so pyarrow is imported first: that loads exactly those shared
libraries into the process before the extension needs them.
"""

import pyarrow as _pyarrow  # noqa: F401  (loads libarrow/libparquet first)

from shardmill.native_ext._native import (BUILT_AGAINST_PYARROW, NativeError, cached_memory_bytes, release_cached_memory,
                                          self_check)

__all__ = ["BUILT_AGAINST_PYARROW", "NativeError", "OutputError", "ShardReader", "cached_memory_bytes",
           "check_pyarrow_match", "load_manifest", "release_cached_memory", "self_check"]


def check_pyarrow_match() -> None:
    """Raises ImportError if the running pyarrow differs from the one built against."""
    if _pyarrow.__version__ != BUILT_AGAINST_PYARROW:
        raise ImportError(
            f"shardmill.native_ext was built against pyarrow {BUILT_AGAINST_PYARROW} "
            f"but pyarrow {_pyarrow.__version__} is installed; reinstall shardmill"
        )


check_pyarrow_match()

from shardmill.native_ext.reader import OutputError, ShardReader, load_manifest  # noqa: E402
