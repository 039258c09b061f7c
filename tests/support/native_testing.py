"""The native parts' test hooks (`_native_testing`), built with the C++ unit tests, not shipped in the wheel.

`bash dev.sh test` builds them into build/native-tests (`dev.sh asan` into build/native-tests-asan and
sets SHARDMILL_NATIVE_TESTS_DIR); tests needing them are skipped, saying how to build them, where
they were not built.
"""

import glob
import importlib
import os
import sys

import pytest

from tests.support.paths import REPO


@pytest.fixture(scope="session")
def native_testing():
    build = os.environ.get("SHARDMILL_NATIVE_TESTS_DIR") or os.path.join(REPO, "build", "native-tests")
    if not glob.glob(os.path.join(build, "_native_testing*")):
        pytest.skip(f"the native test hooks are not built in {build}: bash dev.sh test builds them")
    import shardmill.native_ext  # noqa: F401  (loads pyarrow's Arrow libraries first)

    sys.path.insert(0, build)
    try:
        return importlib.import_module("_native_testing")
    finally:
        sys.path.remove(build)
