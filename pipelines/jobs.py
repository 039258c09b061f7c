"""The job kinds: one registry line each. `run`, `--dry-run`, `count`, `inspect` and help all use it.

A kind is a folder under transforms/ whose `kind.py` holds its JobKind
(transforms/job.py: the contract). A new kind is one folder, one line here, its config message in the proto's
`job` oneof and its name in pyproject.toml's import contracts (ARCHITECTURE.md, "The job contract").
"""

from __future__ import annotations

import importlib

from shardmill.core.errors import OutputError
from shardmill.transforms.job import JobKind

# job kind (the manifest's job_kind) -> the module holding its KIND
REGISTRY = {
    "lc0": "shardmill.transforms.lc0.kind",
    "labels": "shardmill.transforms.events.kind",
    "tokens": "shardmill.transforms.tokens.kind",
}
DEFAULT_KIND = "lc0"  # a config without a job section


def kinds() -> list[JobKind]:
    return [importlib.import_module(module).KIND for module in REGISTRY.values()]


def kind_named(name: str) -> JobKind:
    return importlib.import_module(REGISTRY[name]).KIND


def job_kind(config) -> JobKind:
    """The kind whose section the config sets (its `job` oneof); the lc0 job when none is set."""
    field = config.WhichOneof("job")
    for kind in kinds():
        if kind.config_field == field:
            return kind
    return kind_named(DEFAULT_KIND)


def job_kind_of_manifest(manifest: dict) -> JobKind:
    """The kind that wrote a manifest (format 1 manifests name none: only the lc0 job wrote them)."""
    name = manifest.get("job_kind", DEFAULT_KIND if manifest.get("format_version") == 1 else None)
    if name not in REGISTRY:
        raise OutputError(f"the manifest names job kind {name!r}, which this shardmill does not know "
                         f"({', '.join(REGISTRY)})")
    return kind_named(name)
