"""matplotlib for `inspect --plot`, drawing to files only."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend; ValueError naming the extra to install when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'shardmill[plot]'") from None
    return plt
