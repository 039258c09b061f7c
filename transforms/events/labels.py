"""Label columns: which types are labels, and which labels are targets.

Labels compare as strings with the configured target values: numbers by
their shortest form (1.0 is "1"); booleans match "true"/"1" when true and
"false"/"0" when false (any case).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def is_label_type(t: pa.DataType) -> bool:
    """Labels are scalars that compare as strings: integers, floats, booleans, strings (dictionary-encoded too)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def target_mask(labels, target_values) -> pa.Array:
    """Which labels are targets (see the module doc for how types compare)."""
    if pa.types.is_dictionary(labels.type):
        labels = labels.cast(labels.type.value_type)
    if pa.types.is_boolean(labels.type):
        wanted = {str(v).lower() for v in target_values}
        true_is, false_is = bool(wanted & {"true", "1"}), bool(wanted & {"false", "0"})
        mask = labels if true_is else pc.invert(labels)
        mask = mask if true_is != false_is else pa.array([true_is] * len(labels), pa.bool_())
    else:
        mask = pc.is_in(pc.cast(labels, pa.string()), value_set=pa.array([str(v) for v in target_values]))
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
