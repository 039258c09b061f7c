"""Megatron's train/valid/test splits and blends, as Megatron-LM's builder computes them.

Facts from Megatron-LM's BlendedMegatronDatasetBuilder, BlendedDataset and
helpers.cpp (tests/data/megatron holds arrays Megatron's own code produced,
which the tests compare against):

- **Split string** (`--split 969,30,1`): the numbers in it, padded with
  zeros to three, normalised to sum 1; the split matrix has the book-ends
  (sum of the previous shares, that plus its own) of each split, None for a
  split of share 0. A corpus of N sequences gives split i the sequences
  [int(round(lo * N)), int(round(hi * N))).
- **Blend with weights** (`--data-path 0.3 A 0.7 B`): the builder normalises
  the weights; for a requested size S corpus k builds
  ceil(ceil(S * w_k) * (1 + surplus)) samples (mid_level_dataset_surplus),
  and the BlendedDataset has sum_k ceil(S * w_k) samples. BlendedDataset
  normalises the already normalised weights once more before blending, and
  the rounding of that second division decides some samples.
- **Blend without weights** (`--data-path A B`): each corpus builds one
  epoch; the weights are those epochs' sample counts; a size S gives a
  blend of min(S, their sum) samples, no size the exhaustive blend of all.
- **Blending index**: blended sample i comes from the dataset whose share
  lags its weight the most (native_ext/src/blending.h), as that dataset's
  next sample (an index into its GPTDataset, which applies its own shuffle).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import numpy as np

from shardmill.core.errors import EXIT_BAD_INVOCATION, ShardmillError

SPLITS = ("train", "valid", "test")
MID_LEVEL_DATASET_SURPLUS = 0.005


class SplitError(ShardmillError, ValueError):
    """A split string or a split choice Megatron would refuse."""

    exit_code = EXIT_BAD_INVOCATION


def normalize(weights: list[float]) -> list[float]:
    """Megatron's non-exponentiated normalisation (float64 division, as lists)."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def blend_weight_sum(weights: list[float]) -> float:
    """The sum normalize divides by (numpy's pairwise float64 sum): inf when finite weights overflow it."""
    with np.errstate(over="ignore"):
        return float(np.sum(np.array(weights, dtype=np.float64)))


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


def _check_weights(weights: list[float]) -> None:
    if not weights or any(not (w > 0) or not math.isfinite(w) for w in weights):
        raise SplitError(f"blend weights must be finite and > 0, got {weights}")
    if not math.isfinite(blend_weight_sum(weights)):
        raise SplitError(f"blend weights must sum to a finite number, got {weights}")
    if len(weights) >= 32767:
        raise SplitError(f"a blend holds at most 32766 corpora, got {len(weights)}")


def weighted_corpus_samples(weights: list[float], size: int, surplus: float = MID_LEVEL_DATASET_SURPLUS
                            ) -> tuple[list[float], list[int]]:
    """The builder's normalised weights and the samples each corpus's GPTDataset builds for a blend of `size`."""
    _check_weights(weights)
    normalized = normalize(weights)
    return normalized, sizes_per_dataset(normalized, size, surplus)


def plan_weighted_blend(weights: list[float], size: int, surplus: float = MID_LEVEL_DATASET_SURPLUS) -> BlendPlan:
    """Megatron's BlendedDataset of `size` requested samples over corpora of these (client) weights."""
    from shardmill.core.kernels import build_blending_indices

    normalized, buffered = weighted_corpus_samples(weights, size, surplus)
    blended = sum(sizes_per_dataset(normalized, size))
    # BlendedDataset normalises the builder's normalised weights again.
    twice = np.asarray(normalize(normalized), np.float64)
    dataset_index, dataset_sample_index = build_blending_indices(twice, blended)
    return BlendPlan(normalized, buffered, blended, dataset_index, dataset_sample_index)


def plan_unweighted_blend(corpus_lengths: list[int], size: int | None) -> BlendPlan:
    """Megatron's BlendedDataset over corpora of one epoch each, weighted by their lengths (samples).

    A size gives min(size, their sum) samples blended by the normalised lengths; no size gives every
    sample of every corpus once (exhaustive blending)."""
    from shardmill.core.kernels import build_blending_indices, build_exhaustive_blending_indices

    _check_weights([float(n) for n in corpus_lengths])
    if size is None:
        dataset_index, dataset_sample_index = build_exhaustive_blending_indices(np.asarray(corpus_lengths, np.int64))
        blended = int(sum(corpus_lengths))
    else:
        blended = min(size, int(sum(corpus_lengths)))
        dataset_index, dataset_sample_index = build_blending_indices(
            np.asarray(normalize(corpus_lengths), np.float64), blended)
    return BlendPlan(normalize(corpus_lengths), list(corpus_lengths), blended, dataset_index, dataset_sample_index)
