"""shardmill.core is the lowest layer: it imports nothing else of shardmill, and needs neither Beam nor protobuf."""

import subprocess
import sys

import pytest

from tests.support.imported_modules import shardmill_modules_loaded

CORE_MODULES = ["shardmill.core", "shardmill.core.errors", "shardmill.core.output_contract",
                "shardmill.core.native_build", "shardmill.core.kernels"]


def test_core_imports_nothing_else_of_shardmill_nor_beam_nor_protobuf():
    loaded = shardmill_modules_loaded(CORE_MODULES)
    assert set(CORE_MODULES) <= set(loaded)
    assert [m for m in loaded if not m.startswith("shardmill.core")] == []


@pytest.mark.parametrize("package, compiled", [("shardmill.native_ext", "shardmill.native_ext._native"),
                                               ("shardmill.core.kernels", "shardmill.core._kernels")])
def test_another_pyarrow_is_named_before_a_compiled_module_is_loaded(package, compiled):
    code = ("import sys, pyarrow; pyarrow.__version__ = '99.0.0'\n"
            f"try:\n    import {package}\n"
            "except ImportError as err:\n"
            f"    print(err); print({compiled!r} in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    message, loaded = result.stdout.strip().splitlines()
    assert "built against pyarrow" in message and "99.0.0 is installed" in message
    assert "pip install pyarrow==" in message
    assert loaded == "False"
