"""The token job's plan, made on the launcher: Megatron's indices of one split, and the shard ranges.

Per corpus: the chosen split's sequence range (Megatron's split string),
optionally the sequences kept by threshold-gamma, and its GPTDataset's
document, sample and shuffle indices (megatron_index.py); for a blend, the
BlendedDataset's dataset index and dataset sample index (megatron_blend.py).
The indices travel to the workers as one npz file kept in the output
(INDICES_NAME); shard k holds positions [k·n, (k+1)·n) of the split's
sample stream.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import time

import numpy as np

from shardmill.core.errors import InputError
from shardmill.transforms.common.filesystem import file_size, read_all
from shardmill.transforms.common.keyed_hash import STREAM_KEEP, hash_words, unit_float
from shardmill.transforms.common.sampling import acceptance_probability
from shardmill.transforms.output.shard_count import ShardSizing, shard_count
from shardmill.transforms.tokens.megatron_blend import (SPLITS, normalize, parse_split, plan_unweighted_blend,
                                                        plan_weighted_blend, sizes_per_dataset, split_matrix,
                                                        split_range, weighted_corpus_samples)
from shardmill.transforms.tokens.megatron_cache import (CACHE_DIR_NAME, CacheFile, cache_files, gpt_identifiers,
                                                        parse_tokenizer)
from shardmill.transforms.tokens.megatron_index import (DTYPES, HEADER_BYTES, SAMPLE_INDEX_STEP, GPTIndices,
                                                        IndexedDataset, build_gpt_indices, num_epochs_for,
                                                        parse_index, sample_index_dtype, shuffle_index_dtype)

_LOG = logging.getLogger(__name__)

# In the generation's metadata directory. One corpus: document_index, sample_index, shuffle_index
# (its GPTDataset's). A blend: corpus{k}_document_index, corpus{k}_sample_index, corpus{k}_shuffle_index
# per corpus k (in config order), and blend_dataset_index, blend_dataset_sample_index (BlendedDataset's).
INDICES_NAME = "megatron-indices.npz"
# What makes a token output smaller, for a plan refused for its size.
WRITE_LESS = "ask for fewer token_dataset.num_samples"


@dataclasses.dataclass(frozen=True)
class TokenPlan:
    """Everything the workers need, as plain values."""

    prefixes: tuple[str, ...]
    blended: bool
    seq_length: int
    add_extra_token: bool
    split: str  # train, valid or test
    dtype: str  # numpy dtype string of the samples
    row_bytes: int
    indices_npz: bytes
    tasks: tuple[tuple[int, int, int], ...]  # (shard, first position, end position)
    tokens_per_epoch: tuple[int, ...]  # per corpus
    pad_token: int | None  # fills the partial sample, when one is served
    stats: dict
    build_seconds: float
    megatron_cache: tuple[CacheFile, ...] = ()  # Megatron's cache files of the split (megatron_cache.py)


def read_dataset(idx_path: str, bin_path: str) -> IndexedDataset:
    """The validated index of a Megatron dataset; InputError names a missing or unreadable file."""
    try:
        bin_size = file_size(bin_path)
        file_size(idx_path)
    except FileNotFoundError as err:
        raise InputError(str(err)) from None
    try:
        data = read_all(idx_path)
    except OSError as err:
        raise InputError(f"{idx_path}: cannot read ({err})") from None
    return parse_index(data, idx_path, bin_size)


def kept_sequences(lengths: np.ndarray, threshold: int, gamma: float, seed: int,
                   corpus: int | None = None) -> np.ndarray:
    """Sequence ids kept by document-level threshold-gamma (all of them without a threshold).

    Keyed by (seed, sequence), and in a blend by (seed, corpus, sequence), so
    corpora sharing sequence ids get independent draws."""
    ids = np.arange(len(lengths), dtype=np.int32)
    if not threshold:
        return ids
    words = (ids.astype(np.uint64),) if corpus is None else (corpus, ids.astype(np.uint64))
    u = unit_float(hash_words(seed, STREAM_KEEP, *words))
    return ids[u < acceptance_probability(lengths, threshold, gamma)]


@dataclasses.dataclass
class _Corpus:
    prefix: str
    dataset: IndexedDataset
    split: tuple[int, int]  # the split's sequences [begin, end)
    documents: np.ndarray  # kept sequences of the split
    indices: GPTIndices
    tokens_per_epoch: int

    def stats(self, num_samples: int | None) -> dict:
        return {"path_prefix": self.prefix, "sequences": self.dataset.num_sequences, "split_sequences": list(self.split),
                "sequences_kept": len(self.documents), "dtype": str(self.dataset.dtype),
                "num_samples_requested": num_samples, "num_samples": len(self.indices.shuffle_index),
                "num_epochs": self.indices.num_epochs, "separate_final_epoch": self.indices.separate_final_epoch,
                "tokens_per_epoch": self.tokens_per_epoch}


def samples_per_corpus(dataset_index: np.ndarray, corpora: int) -> np.ndarray:
    """How many blended samples each corpus gives, counted by steps (bincount holds an intp copy of its input)."""
    counts = np.zeros(corpora, dtype=np.int64)
    for begin in range(0, len(dataset_index), SAMPLE_INDEX_STEP):
        counts += np.bincount(dataset_index[begin:begin + SAMPLE_INDEX_STEP], minlength=corpora)
    return counts


def _check_blend_fits(blend, corpora: list[_Corpus]) -> None:
    """Megatron's check: no corpus is asked for more samples than its GPTDataset has."""
    used = samples_per_corpus(blend.dataset_index, len(corpora))
    for k, (count, corpus) in enumerate(zip(used, corpora)):
        have = len(corpus.indices.shuffle_index)
        if count > have:
            raise InputError(f"{corpus.prefix}: the blend takes {count} samples from this corpus but its split has "
                             f"{have} ({len(corpus.documents)} sequences, {corpus.tokens_per_epoch} tokens)")


# The launcher builds every corpus's indices in memory: a plan whose build would need more is refused.
MAX_INDEX_BYTES = 16 << 30
# What one step of build_sample_index allocates per sample, at most (measured: ~56 bytes), and slack for
# small arrays.
_SAMPLE_STEP_BYTES = 64
_SLACK_BYTES = 2 << 20


@dataclasses.dataclass(frozen=True)
class CorpusShape:
    """What a corpus's index build allocates depends on: its `.idx`, its split's documents and tokens."""

    idx_bytes: int  # the `.idx` file, held while planning
    sequences: int
    documents: int  # sequences of the split kept
    split_tokens: int
    max_length: int  # longest sequence


def index_build_bytes(shapes: list[CorpusShape], corpus_samples: list[int | None], seq_length: int,
                      add_extra: bool, drop_last: bool, blend_size: int = 0) -> int:
    """An upper bound of what plan_tokens allocates at its peak for these corpora (tests check it against
    the measured peak, and that it is within 3x of it).

    Per corpus: the document index (int32, epochs x documents), the sample index and the shuffle index
    (their sizes and dtypes as Megatron chooses them) stay held until the plan is made; while the sample
    index is built, each document's length (int32) and running end (int64) are held besides, and one
    step's temporaries. Then the npz of all indices (the blend's int16 + int64 per sample too) is a second
    copy, in a buffer grown by an eighth at a time. Arrays of the corpus's sequences (the `.idx` read
    whole, threshold-gamma's draws) come first.
    """
    held, building = 0, 0
    for shape, requested in zip(shapes, corpus_samples):
        epochs = num_epochs_for(shape.split_tokens, requested, seq_length, add_extra)
        document_index = epochs * shape.documents
        total = epochs * shape.split_tokens - int(add_extra)
        samples = total // seq_length if drop_last else -(-total // seq_length)
        sample_index = (samples + 1) * 2 * sample_index_dtype(document_index, shape.max_length).itemsize
        held += 4 * document_index + sample_index + samples * shuffle_index_dtype(samples).itemsize
        building = max(building, 12 * document_index + _SAMPLE_STEP_BYTES * min(samples, SAMPLE_INDEX_STEP))
    held += 10 * blend_size
    read = sum(s.idx_bytes for s in shapes) + 48 * max((s.sequences for s in shapes), default=0)
    # With the npz made: a padded blend finds its corpora's samples (a mask and a gather, 9 bytes a sample).
    return read + max(held + building, held + held * 9 // 8 + 9 * blend_size) + _SLACK_BYTES


def check_index_size(prefixes: list[str], needed: int, num_samples: int | None, seq_length: int) -> None:
    """InputError, before any index is built, for a plan whose index build would exceed MAX_INDEX_BYTES."""
    if needed > MAX_INDEX_BYTES:
        asked = "one epoch" if num_samples is None else f"{num_samples:,} samples"
        raise InputError(f"{prefixes[0]}{' (and the blend)' if len(prefixes) > 1 else ''}: {asked} of {seq_length} "
                         f"tokens need Megatron's indices built in {needed / 2**30:,.1f} GiB of memory on the "
                         f"launcher (at most {MAX_INDEX_BYTES / 2**30:g} GiB): ask for fewer "
                         "token_dataset.num_samples")


VALID = 1  # TokenSplit.VALID


def split_name(use_split: int) -> str:
    """TRAIN, VALID or TEST."""
    from shardmill.proto import shardmill_config_pb2 as config_pb2

    return config_pb2.TokenSplit.Name(use_split)


def _blend_weights(cfg) -> list[float] | None:
    """The blend's client weights, or None for a blend without weights (validate: all or none are set)."""
    if cfg.blend and all(c.HasField("weight") for c in cfg.blend):
        return [c.weight for c in cfg.blend]
    return None


def plan_tokens(config) -> TokenPlan:
    """Megatron's indices of the chosen split, built on the launcher as Megatron's builder builds them.

    Reading each `.idx` checks it completely, so a bad dataset fails before
    any pipeline, and the output is not touched. With a split string this is
    Megatron's `--data-path` (one corpus without a weight: a GPTDataset;
    otherwise a BlendedDataset); without one, the chosen split's
    `--{train,valid,test}-data-path` (one corpus: a GPTDataset).
    """
    cfg = config.token_dataset
    prefixes = [c.path_prefix for c in cfg.blend] if cfg.blend else [cfg.path_prefix]
    weights = _blend_weights(cfg)
    per_split = not cfg.HasField("split")
    blended = len(prefixes) > 1 or (weights is not None and not per_split)
    seed = cfg.random_seed if cfg.HasField("random_seed") else config.seed
    requested = cfg.num_samples if cfg.HasField("num_samples") else None
    bookends = (0.0, 1.0) if per_split else split_matrix(parse_split(cfg.split))[cfg.use_split]
    drop_last = cfg.use_split != VALID or cfg.drop_last_partial_validation_sequence
    _warn_repeated_corpora(prefixes)
    datasets = [read_dataset(p + ".idx", p + ".bin") for p in prefixes]
    for dataset in datasets:
        check_token_dtype(dataset)

    build_start = time.perf_counter()
    if not blended:
        corpus_samples = [requested]
    elif weights is not None:
        _, corpus_samples = weighted_corpus_samples(weights, requested, cfg.mid_level_dataset_surplus)
    else:
        corpus_samples = [None] * len(prefixes)  # one epoch each
    splits, shapes = [], []
    for k, (prefix, dataset) in enumerate(zip(prefixes, datasets)):
        begin, end = split_range(dataset.num_sequences, bookends)
        kept = kept_sequences(dataset.sequence_lengths, cfg.hanse_sampling_threshold, cfg.hanse_sampling_gamma,
                              config.seed, k if len(prefixes) > 1 else None)
        documents = kept[(kept >= begin) & (kept < end)]
        split_tokens = int(dataset.sequence_lengths[documents].astype(np.int64).sum())
        if not split_tokens:
            raise InputError(_no_tokens(prefix, cfg, dataset.num_sequences, begin, end, len(documents)))
        if cfg.seq_length + int(cfg.add_extra_token) > split_tokens:
            raise InputError(f"{prefix}: token_dataset.seq_length {cfg.seq_length} needs more tokens than the "
                             f"{split_name(cfg.use_split)} split holds ({split_tokens:,})")
        splits.append(((begin, end), documents, split_tokens))
        idx_bytes = HEADER_BYTES + 12 * dataset.num_sequences + 8 * len(dataset.document_indices)
        shapes.append(CorpusShape(idx_bytes, dataset.num_sequences, len(documents), split_tokens,
                                  int(dataset.sequence_lengths.max())))
    needed = index_build_bytes(shapes, corpus_samples, cfg.seq_length, cfg.add_extra_token, drop_last,
                               _blend_size(blended, corpus_samples, weights, requested, shapes, cfg))
    check_index_size(prefixes, needed, requested, cfg.seq_length)
    corpora = []
    for prefix, dataset, samples, (split, documents, split_tokens) in zip(prefixes, datasets, corpus_samples, splits):
        indices = build_gpt_indices(dataset.sequence_lengths, cfg.seq_length, samples, seed,
                                    cfg.add_extra_token, documents, drop_last)
        corpora.append(_Corpus(prefix, dataset, split, documents, indices, split_tokens))
    blend = None
    if blended and weights is not None:
        blend = plan_weighted_blend(weights, requested, cfg.mid_level_dataset_surplus)
    elif blended:
        lengths = [len(c.indices.shuffle_index) for c in corpora]
        empty = [c.prefix for c, n in zip(corpora, lengths) if n == 0]
        if empty:
            raise InputError(f"{empty[0]}: its {split_name(cfg.use_split)} split has no whole sample of "
                             f"{cfg.seq_length} tokens, and a blend without weights weighs each corpus by its "
                             "samples (Megatron refuses a weight of 0)")
        blend = plan_unweighted_blend(lengths, requested)
    if blend is not None:
        _check_blend_fits(blend, corpora)
    megatron_cache = _megatron_cache_files(config, seed, corpora, corpus_samples, blend,
                                           weighted=weights is not None, requested=requested)
    build_seconds = time.perf_counter() - build_start

    arrays = {}
    for k, corpus in enumerate(corpora):
        name = f"corpus{k}_" if blended else ""
        arrays[name + "document_index"] = corpus.indices.document_index
        arrays[name + "sample_index"] = corpus.indices.sample_index
        arrays[name + "shuffle_index"] = corpus.indices.shuffle_index
    if blend is not None:
        arrays["blend_dataset_index"] = blend.dataset_index
        arrays["blend_dataset_sample_index"] = blend.dataset_sample_index
    sink = io.BytesIO()
    np.savez(sink, **arrays)
    indices_npz = sink.getvalue()

    total = blend.size if blend else len(corpora[0].indices.shuffle_index)
    padded = not drop_last and _has_partial_sample(corpora, cfg.seq_length, cfg.add_extra_token, blend)
    dtype = sample_dtype([d.dtype for d in datasets], cfg.pad_token if padded else None)
    width = (cfg.seq_length + int(cfg.add_extra_token)) * dtype.itemsize
    cache_only = cfg.HasField("megatron_cache") and cfg.megatron_cache.cache_only
    num_shards = 1 if cache_only else shard_count(total * width, ShardSizing.of(config.output), WRITE_LESS)
    # Cache only: one empty shard, so the output stays one that inspect and the reader open (>= 1 shard).
    bounds = np.zeros(2, np.int64) if cache_only else np.linspace(0, total, num_shards + 1).astype(np.int64)
    tasks = [(s, int(bounds[s]), int(bounds[s + 1])) for s in range(num_shards)]
    tokens_per_epoch = [c.tokens_per_epoch for c in corpora]
    split = split_name(cfg.use_split).lower()
    if blend is None:
        stats = corpora[0].stats(requested)
        stats.update({"seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed})
    else:
        stats = {"seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed,
                 "dtype": str(dtype), "num_samples_requested": requested, "num_samples": blend.size,
                 "weights": blend.weights, "weighted": weights is not None,
                 "mid_level_dataset_surplus": cfg.mid_level_dataset_surplus if weights is not None else None,
                 "corpora": [c.stats(n) for c, n in zip(corpora, corpus_samples)],
                 "samples_per_corpus": samples_per_corpus(blend.dataset_index, len(corpora)).tolist()}
    stats.update({"split": None if per_split else cfg.split, "use_split": split, "indices_file": INDICES_NAME,
                  "drop_last_partial_sequence": drop_last, "pad_token": cfg.pad_token if padded else None})
    if megatron_cache:
        # The directory (in the generation's metadata directory) is named by the graph, which knows the generation.
        stats["megatron_cache"] = {"directory": CACHE_DIR_NAME, "data_path": list(cfg.megatron_cache.data_path),
                                   "cache_only": cache_only, "files": [f.name for f in megatron_cache]}
    return TokenPlan(prefixes=tuple(prefixes), blended=blended, seq_length=cfg.seq_length,
                     add_extra_token=cfg.add_extra_token, split=split, dtype=dtype.str, row_bytes=width,
                     indices_npz=indices_npz, tasks=tuple(tasks), tokens_per_epoch=tuple(tokens_per_epoch),
                     pad_token=cfg.pad_token if padded else None, stats=stats, build_seconds=build_seconds,
                     megatron_cache=megatron_cache)


def _megatron_cache_files(config, seed: int, corpora: list[_Corpus], corpus_samples: list[int | None], blend,
                          weighted: bool, requested: int | None) -> tuple[CacheFile, ...]:
    """Megatron's cache files of the split's datasets (none without token_dataset.megatron_cache): the
    identifiers Megatron's builder gives them for the same request (megatron_cache.py)."""
    cfg = config.token_dataset
    if not cfg.HasField("megatron_cache"):
        return ()
    tokenizer = parse_tokenizer(cfg.megatron_cache.tokenizer)
    per_split = not cfg.HasField("split")
    matrix = None if per_split else [None if b is None else list(b) for b in split_matrix(parse_split(cfg.split))]
    split = SPLITS[cfg.use_split]
    identifiers = [gpt_identifiers(data_path, samples, split, seed, cfg.seq_length, None if per_split else cfg.split,
                                   matrix, tokenizer)
                   for data_path, samples in zip(cfg.megatron_cache.data_path, corpus_samples)]
    if blend is None:
        return cache_files(identifiers, None)
    if weighted:  # BlendedDataset normalises the builder's normalised weights again
        described = {"weights": normalize(blend.weights), "size": blend.size}
    elif requested is not None:
        described = {"weights": blend.weights, "size": blend.size}
    else:  # the exhaustive blend keeps its GPTDatasets' lengths as weights
        described = {"weights": [len(c.indices.shuffle_index) for c in corpora], "size": None}
    return cache_files(identifiers, described)


def _blend_size(blended: bool, corpus_samples: list[int | None], weights, requested: int | None,
                shapes: list[CorpusShape], cfg) -> int:
    """The BlendedDataset's size, before any index is built (0 without a blend)."""
    if not blended:
        return 0
    if weights is not None:
        return sum(sizes_per_dataset(normalize(weights), requested))
    extra = int(cfg.add_extra_token)
    one_epoch = sum((s.split_tokens - extra) // cfg.seq_length for s in shapes)  # drop_last or not: within one
    return one_epoch + len(shapes) if requested is None else min(requested, one_epoch + len(shapes))


def _no_tokens(prefix: str, cfg, num_sequences: int, begin: int, end: int, kept: int) -> str:
    """Why a corpus's split has no token to sample: an empty range, threshold-gamma, or empty sequences."""
    split = f"the {split_name(cfg.use_split)} split"
    if begin == end:
        of = f" of {cfg.split!r}" if cfg.HasField("split") else ""
        return (f"{prefix}: {split}{of} is empty here: its share of the corpus's {num_sequences:,} sequences "
                f"rounds to none, and Megatron never finishes building samples of no tokens (each epoch adds none)")
    sequences = f"sequences {begin:,}..{end - 1:,} of {num_sequences:,}"
    if not kept:
        return (f"{prefix}: token_dataset.hanse_sampling_threshold {cfg.hanse_sampling_threshold} (gamma "
                f"{cfg.hanse_sampling_gamma:g}) kept none of the {end - begin:,} sequences of {split} ({sequences})")
    return f"{prefix}: {split} ({sequences}, {kept:,} kept) holds no tokens: its sequences are empty"


def _warn_repeated_corpora(prefixes: list[str]) -> None:
    """A corpus named twice in a blend is drawn from twice (Megatron allows it): allowed, with a warning."""
    first: dict[str, int] = {}
    for k, prefix in enumerate(prefixes):
        key = prefix if "://" in prefix else os.path.normpath(os.path.abspath(prefix))
        if key in first:
            _LOG.warning("token_dataset.blend[%d].path_prefix: %s is also blend[%d]: the blend samples this corpus "
                         "twice (allowed, as in Megatron)", k, prefix, first[key])
        else:
            first[key] = k


def _has_partial_sample(corpora: list[_Corpus], seq_length: int, add_extra: bool, blend) -> bool:
    """Whether a sample the split serves is its corpus's last, partial one (drop_last_partial_sequence off)."""
    for k, corpus in enumerate(corpora):
        sample_index = corpus.indices.sample_index
        last = len(sample_index) - 2
        if last < 0:
            continue
        (doc_beg, off_beg), (doc_end, off_end) = sample_index[last], sample_index[last + 1]
        lengths = corpus.dataset.sequence_lengths[corpus.indices.document_index[doc_beg:doc_end]].astype(np.int64)
        if int(lengths.sum()) - int(off_beg) + int(off_end) >= seq_length:
            continue  # whole
        used = corpus.indices.shuffle_index if blend is None else corpus.indices.shuffle_index[
            blend.dataset_sample_index[blend.dataset_index == k]]
        if (used == last).any():
            return True
    return False


# The corpus dtypes the job reads: the MMIDIDX codes of integers.
TOKEN_DTYPES = tuple(np.dtype(t) for t in DTYPES.values() if np.dtype(t).kind in "iu")


def check_token_dtype(dataset: IndexedDataset) -> None:
    """InputError for a corpus whose `.idx` dtype is not one of token ids (MMIDIDX allows float32/float64)."""
    if dataset.dtype.kind not in "iu":
        code = next(k for k, v in DTYPES.items() if np.dtype(v) == dataset.dtype)
        raise InputError(f"{dataset.idx_path}: dtype code {code} ({dataset.dtype}) is not a token dtype: the token "
                         f"job reads integer corpora ({', '.join(str(t) for t in TOKEN_DTYPES)})")


def sample_dtype(corpus_dtypes: list, pad_token: int | None) -> np.dtype:
    """The smallest dtype holding every corpus's tokens (and the pad token, when a sample is padded).

    Integer corpora promote to a signed or unsigned integer of at most 64 bits; a pad beyond the
    corpus's range in the other signedness (2^32 in int32, 2^63 - 1 in uint16) would promote to float64
    or uint64, which are not token dtypes: int64 holds every pad (the config's pad_token is an int64)."""
    dtype = np.result_type(*corpus_dtypes)
    if pad_token is not None and not np.can_cast(np.min_scalar_type(pad_token), dtype, "safe"):
        dtype = np.promote_types(dtype, np.min_scalar_type(pad_token))
        if dtype.kind not in "iu" or dtype == np.uint64:
            dtype = np.int64
    return np.dtype(dtype)
