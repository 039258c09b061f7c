"""Megatron's train/valid/test splits and weighted blends, as Megatron-LM's builder computes them.

Facts from Megatron-LM's BlendedMegatronDatasetBuilder, BlendedDataset and
helpers.cpp, restated here (tests/support/reference_megatron.py restates them again,
independently, for the tests):

- **Split string** (`--split 969,30,1`): the numbers in it, padded with
  zeros to three, normalised to sum 1; the split matrix has the book-ends
  (sum of the previous shares, that plus its own) of each split, None for a
  split of share 0. A corpus of N sequences gives split i the sequences
  [int(round(lo * N)), int(round(hi * N))).
- **Blend** (`--data-path 0.3 A 0.7 B`): weights normalised to sum 1. For a
  requested size S of a split, corpus k contributes
  ceil(ceil(S * w_k) * (1 + surplus)) samples to its GPTDataset (surplus
  0.005, Megatron's `mid_level_dataset_surplus`, so the blend never runs
  short), and the blended dataset has sum_k ceil(S * w_k) samples.
- **Blending index**: blended sample i comes from the dataset whose share
  lags its weight the most (see native_ext/src/blending.h), as that
  dataset's next sample (an index into its GPTDataset, which applies its own
  shuffle).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import numpy as np

SPLITS = ("train", "valid", "test")
MID_LEVEL_DATASET_SURPLUS = 0.005


class SplitError(ValueError):
    """A split string or a split choice Megatron would refuse."""


def normalize(weights: list[float]) -> list[float]:
    """Megatron's non-exponentiated normalisation (float64 division, as lists)."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


# One to three non-negative decimal numbers separated by commas, slashes or spaces (Megatron's --split).
_SPLIT_STRING = re.compile(r"\s*(\d+\.?\d*|\.\d+)((\s*[,/]\s*|\s+)(\d+\.?\d*|\.\d+)){0,2}\s*")


def parse_split(split: str) -> list[float]:
    """`"969,30,1"` → [0.969, 0.03, 0.001] (Megatron's parse_and_normalize_split).

    Megatron pulls every run of digits and dots out of the string, so `"-1,2"` reads as 1, 2 and `"nan,1"`
    as 1: a string that is not numbers and separators is refused instead.
    """
    if not _SPLIT_STRING.fullmatch(split):
        raise SplitError(f"split {split!r}: one to three non-negative numbers separated by commas or spaces "
                         "(train, valid, test), e.g. \"969,30,1\"")
    values = [float(v) for v in re.findall(r"[.0-9]+", split)]
    if len(values) > len(SPLITS) or not values:
        raise SplitError(f"split {split!r}: one to three non-negative numbers (train, valid, test)")
    values += [0.0] * (len(SPLITS) - len(values))
    if sum(values) <= 0:
        raise SplitError(f"split {split!r}: the shares sum to 0")
    return normalize(values)


def split_matrix(shares: list[float]) -> list[tuple[float, float] | None]:
    """Book-ends per split, None for an empty one (convert_split_vector_to_split_matrix)."""
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *shares])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if hi <= lo else (lo, hi) for lo, hi in bookends]


def split_range(num_sequences: int, bookends: tuple[float, float]) -> tuple[int, int]:
    """The sequences [begin, end) of a corpus that a split's book-ends select."""
    lo, hi = bookends
    return int(round(lo * float(num_sequences))), int(round(hi * float(num_sequences)))


def sizes_per_dataset(weights: list[float], size: int, surplus: float = 0.0) -> list[int]:
    """Samples each corpus contributes to a blended split of `size` (normalised weights)."""
    return [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in weights]


@dataclasses.dataclass
class BlendPlan:
    weights: list[float]            # normalised
    corpus_samples: list[int]       # each corpus' GPTDataset num_samples (with the surplus)
    size: int                       # samples of the blended dataset
    dataset_index: np.ndarray       # int16 [size]: the corpus of blended sample i
    dataset_sample_index: np.ndarray  # int64 [size]: its index into that corpus' GPTDataset


def plan_blend(weights: list[float], size: int) -> BlendPlan:
    """Megatron's blended dataset of `size` requested samples over corpora of these weights."""
    from shardmill.native_ext.kernels import build_blending_indices

    if not weights or any(not (w > 0) or not math.isfinite(w) for w in weights):
        raise SplitError(f"blend weights must be finite and > 0, got {weights}")
    if len(weights) >= 32767:
        raise SplitError(f"a blend holds at most 32766 corpora, got {len(weights)}")
    normalized = normalize(weights)
    targets = sizes_per_dataset(normalized, size)
    buffered = sizes_per_dataset(normalized, size, MID_LEVEL_DATASET_SURPLUS)
    blended = sum(targets)
    dataset_index, dataset_sample_index = build_blending_indices(np.asarray(normalized, np.float64), blended)
    return BlendPlan(normalized, buffered, blended, dataset_index, dataset_sample_index)
