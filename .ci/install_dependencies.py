"""Install the third-party dependencies of shardmill and of the named extras into this interpreter.

    python .ci/install_dependencies.py job,plot,test

CI runs it in the background while the AddressSanitizer build compiles: downloading and unpacking the test
extras (torch, Dask, Grain, ...) waits on the network and the disk, compiling on the CPU, so the two overlap and
`bash dev.sh test` then finds them installed. It reads pyproject.toml, so the list cannot drift from it.
"""

import subprocess
import sys
from pathlib import Path


def requirements(extras: list[str]) -> list[str]:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"no such extra in pyproject.toml: {', '.join(unknown)}")
    return [*project["dependencies"], *(r for extra in extras for r in optional[extra])]


def main() -> int:
    try:
        import tomllib  # noqa: F401
    except ImportError:  # Python 3.10: no TOML reader; `dev.sh test` installs them all the same, only later
        print("Python < 3.11 reads no pyproject.toml: leaving the dependencies to dev.sh", file=sys.stderr)
        return 0
    extras = [e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e]
    return subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            *requirements(extras)])


if __name__ == "__main__":
    sys.exit(main())
