"""Values known when the graph is built, as PCollections, in as few Beam transforms as they can be.

Beam's fixed cost is per transform (~20 ms of CPU each across construction, serialisation and the runner's
stages), and `beam.Create` of one value is 4 transforms (Impulse, FlatMap, MaybeReshuffle, decode). A job
starts one Impulse (`once`) and maps it to each value it knows: 1 transform per value.
"""

from __future__ import annotations

import apache_beam as beam


def _value(_, value):
    return value


def _values(_, values):
    return values


def known_value(value) -> beam.PTransform:
    """Applied to `once` (an Impulse's one element): a PCollection of one element, `value`."""
    return beam.Map(_value, value)


def known_values(values: list) -> beam.PTransform:
    """Applied to `once`: a PCollection of the values, on one worker (spread them with a GroupByKey or a
    Reshuffle where their work is heavy)."""
    return beam.FlatMap(_values, list(values))
