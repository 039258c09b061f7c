import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true",
                     help="run the slow tests too (jobs, subprocesses, large data): what CI and `bash dev.sh test` run")


def pytest_collection_modifyitems(config, items):
    """The default loop is the fast tests; --all, or naming a test by its node id, runs slow ones too."""
    if config.getoption("--all") or any("::" in arg for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]

from tests.datagen.lc0 import write_dataset

pytest_plugins = ["tests.support.native_testing"]  # the native_testing fixture


@pytest.fixture(scope="session", autouse=True)
def user_cache_dir(tmp_path_factory):
    """The tests' own user cache directory (XDG_CACHE_HOME, also for the CLIs they start): a local run keeps
    its index cache there by default, which must be neither the user's nor shared by parallel test workers."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield os.environ["XDG_CACHE_HOME"]
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(scope="session")
def lc0_dataset(tmp_path_factory):
    """A small mixed dataset: 3 hourly tars (GNU and pax), loose games, every bad kind."""
    out = str(tmp_path_factory.mktemp("lc0"))
    truth = write_dataset(out, num_archives=3, games_per_archive=8, loose_games=4, bad=True, seed=7)
    return out, truth


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server on loopback (moto), with the environment pointing AWS clients at it for the session."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.transforms.common.filesystem import use_pipeline_options
    from tests.support.s3_server import S3Server

    server = S3Server(str(tmp_path_factory.mktemp("s3") / "server.log"))
    saved = {key: os.environ.get(key) for key in server.env}
    os.environ.update(server.env)
    use_pipeline_options(PipelineOptions([]))  # as the CLI does: Beam's S3 filesystem needs options
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()
