"""shardmill.core is the lowest layer: it imports nothing else of shardmill, and needs neither Beam nor protobuf."""

import subprocess
import sys

CORE_MODULES = ["shardmill.core", "shardmill.core.errors", "shardmill.core.output_contract",
                "shardmill.core.native_build", "shardmill.core.kernels"]


def test_core_imports_nothing_else_of_shardmill_nor_beam_nor_protobuf():
    code = ("import sys\n"
            "sys.modules['apache_beam'] = sys.modules['google.protobuf'] = None  # as if not installed\n"
            f"for name in {CORE_MODULES!r}:\n"
            "    __import__(name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('shardmill.') and not m.startswith('shardmill.core')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
