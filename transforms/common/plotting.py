"""matplotlib for `inspect --plot`, drawing to files only."""

from __future__ import annotations

from shardmill.core.errors import UsageError


def pyplot():
    """matplotlib.pyplot on the Agg backend; UsageError naming the extra to install when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'shardmill[plot]'") from None
    return plt
