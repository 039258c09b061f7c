"""What the compiled modules (`shardmill.native_ext._native`, `shardmill.core._kernels`) were built against,
checked before either loads.

They link the Arrow and Parquet libraries shipped inside the pinned pyarrow wheel, so they run only with
exactly that pyarrow: the version is checked first (from the build's facts, plain Python), then pyarrow is
imported, which loads exactly those shared libraries into the process before a compiled module needs them
(its import would otherwise fail first, with the dynamic loader's message about a missing libarrow).
"""

import pyarrow as _pyarrow

from shardmill.core._build_info import BUILT_AGAINST_PYARROW

__all__ = ["BUILT_AGAINST_PYARROW", "check_pyarrow_match"]


def check_pyarrow_match(installed: str | None = None) -> None:
    """Raises ImportError if the running pyarrow differs from the one the extension was built against."""
    installed = installed or _pyarrow.__version__
    if installed != BUILT_AGAINST_PYARROW:
        raise ImportError(
            f"shardmill's native reader was built against pyarrow {BUILT_AGAINST_PYARROW}, whose Arrow "
            f"libraries it links, but pyarrow {installed} is installed: "
            f"pip install pyarrow=={BUILT_AGAINST_PYARROW}"
        )
