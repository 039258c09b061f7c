"""An independent re-statement of Megatron-LM's split, blend-size and blending-index rules, for the tests.

Written from Megatron-LM's public source (megatron/core/datasets:
blended_megatron_dataset_config.py parse_and_normalize_split and
convert_split_vector_to_split_matrix, blended_megatron_dataset_builder.py
_build_megatron_dataset_splits and _get_size_per_split_per_dataset,
helpers.cpp build_blending_indices), in the plainest Python, without the
product's code.
"""

import functools
import math
import re

import numpy


def split_sequences(split: str, num_elements: int) -> list:
    """Per split (train, valid, test): the sequence ids Megatron gives it, or None."""
    vector = list(map(float, re.findall(r"[.0-9]+", split)))
    vector = vector + [0.0 for _ in range(3 - len(vector))]
    w = numpy.array(vector, dtype=numpy.float64)
    vector = (w / numpy.sum(w)).tolist()
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    matrix = []
    for lo, hi in zip(expansion[:-1], expansion[1:]):
        matrix.append(None if hi <= lo else (lo, hi))
    out = []
    for bookends in matrix:
        if bookends is None:
            out.append(None)
            continue
        beg = int(round(bookends[0] * float(num_elements)))
        end = int(round(bookends[1] * float(num_elements)))
        out.append(numpy.arange(start=beg, stop=end, step=1, dtype=numpy.int32))
    return out


def normalized(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def sizes_per_dataset(normalized_weights, target_size, surplus):
    return [int(math.ceil(math.ceil(target_size * weight) * (1 + surplus))) for weight in normalized_weights]


def blending_indices(weights, size):
    """helpers.cpp build_blending_indices, statement by statement."""
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current_samples = [0] * len(weights)
    for sample_idx in range(size):
        sample_idx_double = max(float(sample_idx), 1.0)
        max_error_index = 0
        max_error = weights[0] * sample_idx_double - float(current_samples[0])
        for dataset_idx in range(1, len(weights)):
            error = weights[dataset_idx] * sample_idx_double - float(current_samples[dataset_idx])
            if error > max_error:
                max_error = error
                max_error_index = dataset_idx
        dataset_index[sample_idx] = max_error_index
        dataset_sample_index[sample_idx] = current_samples[max_error_index]
        current_samples[max_error_index] += 1
    return dataset_index, dataset_sample_index
