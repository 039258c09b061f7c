import os

import pytest

from tests.datagen.lc0 import write_dataset


@pytest.fixture(scope="session")
def lc0_dataset(tmp_path_factory):
    """A small mixed dataset: 3 hourly tars (GNU and pax), loose games, every bad kind."""
    out = str(tmp_path_factory.mktemp("lc0"))
    truth = write_dataset(out, num_archives=3, games_per_archive=8, loose_games=4, bad=True, seed=7)
    return out, truth


def local_open(path):
    return open(path, "rb")


def sources_of(directory):
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))]
