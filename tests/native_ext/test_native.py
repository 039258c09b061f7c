"""The native extension builds, links pyarrow's Arrow/Parquet, and raises instead of aborting."""

import pyarrow
import pytest

from shardmill import native_ext


def test_extension_round_trips_rows_through_parquet():
    report = native_ext.self_check(5000)
    assert report["rows_round_tripped"] == 5000
    assert report["arrow_version"] == pyarrow.__version__
    assert report["parquet_bytes"] > 0


def test_extension_was_built_against_the_running_pyarrow():
    assert native_ext.BUILT_AGAINST_PYARROW == pyarrow.__version__


def test_native_errors_become_python_exceptions():
    with pytest.raises(native_ext.NativeError, match="num_rows must be >= 0"):
        native_ext.self_check(-1)
