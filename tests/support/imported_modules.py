"""What importing some of shardmill's modules loads, in a fresh interpreter without Beam or protobuf: the tests of
the import layers that a training machine (numpy and pyarrow only) relies on."""

import subprocess
import sys


def shardmill_modules_loaded(modules: list[str]) -> list[str]:
    """The shardmill.* modules loaded after importing `modules` with apache_beam and protobuf made unimportable
    (as if not installed); AssertionError with the child's stderr if an import fails."""
    code = ("import sys\n"
            "sys.modules['apache_beam'] = sys.modules['google.protobuf'] = None  # as if not installed\n"
            f"for name in {modules!r}:\n"
            "    __import__(name)\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('shardmill.'))))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()
