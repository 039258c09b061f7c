"""The reader package: every name users import from it keeps importing, and it imports with numpy and pyarrow
alone, never the job's packages (shardmill.transforms, shardmill.pipelines)."""

import glob
import importlib
import os
import re

import pytest

from tests.support.imported_modules import shardmill_modules_loaded
from tests.support.paths import REPO

# The modules a training machine imports (the adapters need torch / grain, which a reader may not have).
READER_MODULES = ["shardmill.native_ext", "shardmill.native_ext.reader", "shardmill.native_ext.checkpoint",
                  "shardmill.native_ext.elastic", "shardmill.native_ext.generations",
                  "shardmill.native_ext.row_groups", "shardmill.native_ext.arrow_columns",
                  "shardmill.native_ext.dataset", "shardmill.native_ext.converters", "shardmill.native_ext.options",
                  "shardmill.native_ext.remote"]


def test_the_reader_imports_without_beam_protobuf_or_the_jobs_packages():
    packages = {".".join(m.split(".")[:2]) for m in shardmill_modules_loaded(READER_MODULES)}
    assert packages == {"shardmill.core", "shardmill.native_ext"}


def test_every_name_the_docs_import_from_the_reader_imports():
    """Every `from shardmill.native_ext[.module] import ...` line of README.md and docs/*.md."""
    imports = set()
    for page in [os.path.join(REPO, "README.md"), *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]:
        with open(page) as f:
            text = f.read()
        for module, names in re.findall(r"^from (shardmill\.native_ext[\w.]*) import ([\w, ]+)$", text, re.M):
            imports |= {(module, name.strip()) for name in names.split(",")}
    assert ("shardmill.native_ext", "ShardReader") in imports
    adapters_need = {"shardmill.native_ext.torch_dataset": "torch", "shardmill.native_ext.grain_dataset": "grain"}
    for module, name in sorted(imports):
        if module in adapters_need:
            pytest.importorskip(adapters_need[module])
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
