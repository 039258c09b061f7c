"""shardmill.core is the lowest layer: it imports nothing else of shardmill, and needs neither Beam nor protobuf."""

from tests.support.imported_modules import shardmill_modules_loaded

CORE_MODULES = ["shardmill.core", "shardmill.core.errors", "shardmill.core.output_contract",
                "shardmill.core.native_build", "shardmill.core.kernels"]


def test_core_imports_nothing_else_of_shardmill_nor_beam_nor_protobuf():
    loaded = shardmill_modules_loaded(CORE_MODULES)
    assert set(CORE_MODULES) <= set(loaded)
    assert [m for m in loaded if not m.startswith("shardmill.core")] == []
