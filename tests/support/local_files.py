"""Local files as the index kernels take them: an opener and a directory's sources."""

import os


def local_open(path):
    """The opener of a local path, in place of Beam's FileSystems."""
    return open(path, "rb")


def sources_of(directory):
    """Every file of directory, by name, as paths."""
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))]
