"""Check the import contracts of pyproject.toml ([tool.importlinter]) on the source tree.

    python .ci/lint_imports.py [--source DIR]     (DIR: a checkout; default: this one)

import-linter analyses the package its root name resolves to. The repository has no shardmill/ folder (each
top-level part becomes a subpackage in the wheel: pyproject's wheel.packages), and a venv's installed
shardmill may be a copy of another checkout, so this lays the wheel's layout out of symbolic links to the
checkout's parts in a temporary directory, puts it first on the path and runs lint-imports there. The config
schema's module is generated at build time (CMake runs protoc), so it stands in as an empty module: it
imports nothing of shardmill. Exits with lint-imports' status; its report goes to stdout.

The contracts name the job kinds one by one (import-linter has no "every subpackage" layer), so first every
folder of transforms/ holding a kind.py must be named in each contract that lists kinds: a fourth kind added
without them would otherwise import another kind unchecked.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GENERATED_MODULES = ["proto/shardmill_config_pb2.py"]


def wheel_packages(pyproject: Path) -> dict[str, str]:
    """pyproject's wheel.packages: {"shardmill/transforms": "transforms", ...}."""
    line = next(l for l in pyproject.read_text().splitlines() if l.startswith("wheel.packages"))
    return dict(re.findall(r'"([^"]+)"\s*=\s*"([^"]+)"', line))


def lay_out_package(source: Path, into: Path) -> None:
    """`into`/shardmill as the wheel lays it out, its parts symbolic links to `source`'s folders."""
    package = into / "shardmill"
    package.mkdir()
    # A regular package (the wheel's is a namespace package): first on the path, it hides an installed one.
    (package / "__init__.py").write_text("")
    for target, folder in wheel_packages(source / "pyproject.toml").items():
        (into / target).symlink_to(source / folder, target_is_directory=True)
    for module in GENERATED_MODULES:
        stand_in = package / module
        if not stand_in.exists():
            stand_in.parent.mkdir(exist_ok=True)
            (stand_in.parent / "__init__.py").touch()
            stand_in.write_text("")


KIND_CONTRACTS = ("layers", "kinds-independent")


def unlisted_kinds(source: Path) -> list[str]:
    """One line per job kind folder (transforms/<kind>/kind.py) that a contract listing kinds leaves out."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: import-linter's own dependency
        import tomli as tomllib

    contracts = {c["id"]: c for c in tomllib.loads((source / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}
    problems = []
    for kind_file in sorted((source / "transforms").glob("*/kind.py")):
        module = f"shardmill.transforms.{kind_file.parent.name}"
        for contract_id in KIND_CONTRACTS:
            contract = contracts[contract_id]
            named = " ".join([*contract.get("layers", []), *contract.get("modules", [])]).replace("|", " ").split()
            if module not in named:
                problems.append(f"{kind_file.parent.relative_to(source)} is a job kind (it has kind.py), but "
                                f"pyproject.toml's import contract {contract_id!r} does not name {module}: add it "
                                "beside the other kinds")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    source = parser.parse_args().source.resolve()
    problems = unlisted_kinds(source)
    if problems:
        print("\n".join(problems))
        return 1
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    with tempfile.TemporaryDirectory(prefix="shardmill-imports-") as tree:
        lay_out_package(source, Path(tree))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])]))
        return subprocess.run([lint_imports, "--no-cache", str(source / "pyproject.toml")], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
