"""What importing some of shardmill's modules loads, in a fresh interpreter without Beam or protobuf: the tests of
the import layers that a training machine (numpy and pyarrow only) relies on. And every module a `shardmill`
command's own process imports, for the tests of what its start-up leaves out."""

import json
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


def modules_loaded_by_command(*args: object, timeout: float = 300) -> tuple[set[str], subprocess.CompletedProcess]:
    """Every module loaded in the process of `shardmill args...` when it exits (its entry(), as the console script
    runs it), and the finished command; AssertionError with its stderr if the command fails."""
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: print('MODULES ' + json.dumps([m for m, v in sys.modules.items() if v]), "
            "file=sys.stderr))\n"
            "from shardmill.pipelines.cli import entry\n"
            "sys.argv[0] = 'shardmill'\n"
            "entry()\n")
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    result.stderr, modules = result.stderr.rsplit("MODULES ", 1)
    return set(json.loads(modules)), result
