"""shardmill.core.errors: one NativeError class whichever compiled module raises it, and the reader's OutputError
a ShardmillError that stays the ValueError it was."""

import numpy as np
import pytest

import shardmill.native_ext
from shardmill.core import _kernels, kernels
from shardmill.core.errors import EXIT_BAD_INVOCATION, NativeError, OutputError, ShardmillError
from shardmill.native_ext import _native


def test_both_compiled_modules_name_the_one_native_error_class():
    assert _native.NativeError is NativeError
    assert _kernels.NativeError is NativeError
    assert kernels.NativeError is NativeError and shardmill.native_ext.NativeError is NativeError
    assert issubclass(NativeError, ShardmillError) and issubclass(NativeError, RuntimeError)


def test_the_reader_module_raises_the_core_native_error():
    with pytest.raises(NativeError, match="num_rows must be >= 0") as raised:
        _native.self_check(-1)
    assert type(raised.value) is NativeError


def test_the_kernels_module_raises_the_core_native_error():
    out, offsets = np.zeros(64, np.uint8), np.zeros(2, np.int64)
    with pytest.raises(NativeError, match="num_records and record_size must be > 0") as raised:
        kernels.pack_chunk_records(b"\0" * 8, 0, 8, 6, np.zeros(1, np.int64), out, offsets)
    assert type(raised.value) is NativeError


def test_the_readers_output_error_is_a_shardmill_error_and_still_a_value_error(tmp_path):
    assert shardmill.native_ext.OutputError is OutputError
    assert issubclass(OutputError, ShardmillError) and issubclass(OutputError, ValueError)
    assert OutputError.exit_code == EXIT_BAD_INVOCATION
    with pytest.raises(ValueError, match="manifest") as raised:
        shardmill.native_ext.load_manifest(str(tmp_path))
    assert type(raised.value) is OutputError


def test_an_output_error_is_one_line():
    assert str(OutputError("a\n  b\tc")) == "a b c"
