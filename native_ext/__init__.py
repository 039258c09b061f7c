"""Python API of shardmill's native reader: ShardReader and its options, the converters, the errors it raises.

The compiled module links the Arrow and Parquet libraries shipped inside the
pinned pyarrow wheel, so it runs only with exactly that pyarrow: the version
is checked first (core/native_build.py), then the module is loaded. Imports
nothing of the Beam job (numpy and pyarrow suffice).
"""

from shardmill.core.native_build import BUILT_AGAINST_PYARROW, check_pyarrow_match

__all__ = ["BUILT_AGAINST_PYARROW", "CacheOptions", "Lc0Tensors", "MegatronDataset", "MegatronSamples", "NativeError", "OrderOptions", "OutputError",
           "ReadOptions", "RemoteOptions", "ShardOptions", "ShardReader", "cached_memory_bytes", "check_pyarrow_match", "load_manifest",
           "release_cached_memory", "self_check"]

check_pyarrow_match()

from shardmill.core.errors import NativeError, OutputError  # noqa: E402
from shardmill.native_ext._native import cached_memory_bytes, release_cached_memory, self_check  # noqa: E402
from shardmill.native_ext.converters import Lc0Tensors, MegatronSamples  # noqa: E402
from shardmill.native_ext.dataset import load_manifest  # noqa: E402
from shardmill.native_ext.megatron_dataset import MegatronDataset  # noqa: E402
from shardmill.native_ext.options import CacheOptions, OrderOptions, ReadOptions, ShardOptions  # noqa: E402
from shardmill.native_ext.reader import ShardReader  # noqa: E402
from shardmill.native_ext.remote import RemoteOptions  # noqa: E402
