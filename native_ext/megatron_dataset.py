"""A token output as the map-style dataset Megatron-LM's own data loader takes.

A token job's output holds Megatron's samples in Megatron's shuffled order:
record i (shards in manifest order, rows in file order) is sample i of the
split the run wrote. `MegatronDataset(path, eod)[i]` is what Megatron's
`GPTDataset.__getitem__(i)` returns for it (a blend's: BlendedDataset's,
with its `dataset_id`), so Megatron's samplers (`MegatronPretrainingSampler`,
`MegatronPretrainingRandomSampler`: lists of indices per data-parallel rank)
and `torch.utils.data.DataLoader(dataset, batch_sampler=...)` serve the
batches Megatron would:

    dataset = MegatronDataset("out/tokens", eod_token=50256)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=2)

Records are read by random access (records.py: a row group decoded per cache
miss; Megatron's consecutive sampler order reads each row group once) and
turned into Megatron's fields by MegatronSamples. Torch is not a dependency:
items are torch tensors when torch imports, numpy arrays otherwise.
"""

from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from shardmill.core.errors import OutputError
from shardmill.native_ext.converters import MegatronSamples
from shardmill.native_ext.options import ReadOptions
from shardmill.native_ext.records import RecordSource

TOKEN_RECORD_FORMAT = "megatron_gpt_samples"
# Megatron's item order (GPTDataset.__getitem__'s dict); a blend's BlendedDataset puts dataset_id first.
_FIELDS = ("tokens", "labels", "attention_mask", "loss_mask", "position_ids")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


class MegatronDataset:
    """Megatron's GPTDataset items of a token output, by index (see the module doc).

    Each item: `tokens` int64 [seq], `labels` int64 [seq], `loss_mask` float32 [seq], `position_ids` int64 [seq],
    and with create_attention_mask `attention_mask` bool [1, seq, seq] (True: masked); a blend's items also
    `dataset_id` (int16, the corpus: BlendedDataset's). Torch tensors when torch is importable, else numpy.

    eod_token, reset_position_ids, reset_attention_mask, eod_mask_loss, create_attention_mask, pad_token:
      MegatronSamples' (Megatron's GPTDatasetConfig flags and the tokenizer's eod/pad ids).
    cached_row_groups: decoded row groups kept per process (each DataLoader worker has its own).
    read_options: ShardReader's ReadOptions: verify_checksums, remote and cache (the host's local shard cache).
    Indices: 0..len-1, or -len..-1 counting from the end, as a Python sequence (and Megatron's GPTDataset, whose
    numpy index arrays do the same); others raise IndexError, a non-integer TypeError. Picklable for DataLoader
    workers (the row-group cache and open files are not pickled); thread-safe.
    """

    def __init__(self, path: str, eod_token: int, *, reset_position_ids: bool = False,
                 reset_attention_mask: bool = False, eod_mask_loss: bool = False,
                 create_attention_mask: bool = False, pad_token: int | None = None, cached_row_groups: int = 8,
                 read_options: ReadOptions = ReadOptions()):
        samples = MegatronSamples(eod_token, reset_position_ids=reset_position_ids,
                                  reset_attention_mask=reset_attention_mask, eod_mask_loss=eod_mask_loss,
                                  create_attention_mask=create_attention_mask, pad_token=pad_token)

        def token_columns(manifest: dict) -> list[str]:
            kind = manifest.get("record_format", "lc0")
            if kind != TOKEN_RECORD_FORMAT:
                raise OutputError(f"{path}: MegatronDataset reads token outputs (record_format {TOKEN_RECORD_FORMAT},"
                                  f" written by a token_dataset run); this output holds {kind} records")
            cache = ((manifest.get("stats") or {}).get("token_dataset") or {}).get("megatron_cache") or {}
            if cache.get("cache_only"):
                raise OutputError(f"{path}: holds no samples: it was written with megatron_cache.cache_only, for "
                                  f"Megatron to load its index cache ({cache.get('directory')} of the committed "
                                  "generation) and build samples itself; run without cache_only for samples")
            # A blend's items carry their corpus (BlendedDataset's dataset_id).
            return ["tokens", "corpus"] if manifest["record"].get("blended") else ["tokens"]

        self._records = RecordSource(path, token_columns, cached_row_groups, read_options=read_options)
        self._samples = samples.bind(self._records.manifest)
        self._blended = "corpus" in self._records.columns
        self._as_torch = _torch() is not None

    def __len__(self) -> int:
        return len(self._records)

    def _index(self, index) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"MegatronDataset indices must be integers, not {type(index).__name__}") from None
        n = len(self._records)
        if not -n <= i < n:
            raise IndexError(f"sample {i} is outside 0..{n - 1} (or -{n}..-1) of {self._records.path}")
        return i + n if i < 0 else i

    def _items(self, indices: Sequence[int]) -> list[dict]:
        if not len(indices):
            return []
        rows = self._records.take([self._index(i) for i in indices])
        batch = {"tokens": rows["tokens"]}
        self._samples.finish(batch)  # one vectorised pass over the batch
        fields = [f for f in _FIELDS if f in batch]
        items = []
        for k in range(len(indices)):
            item = {} if not self._blended else {"dataset_id": rows["corpus"][k].astype(np.int16)}
            item.update((f, batch[f][k]) for f in fields)
            items.append(item)
        if self._as_torch:
            import torch

            items = [{name: torch.from_numpy(np.asarray(value)) for name, value in item.items()} for item in items]
        return items

    def __getitem__(self, index: int) -> dict:
        [item] = self._items([index])
        return item

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        """The items of a batch of indices (what torch's DataLoader fetches per batch when a dataset has it): the
        batch's records read with one row-group lookup and converted in one MegatronSamples pass."""
        return self._items(indices)

    def cache_stats(self) -> dict | None:
        """With read_options.cache: this process's shard cache counts (as ShardReader.cache_stats())."""
        return self._records.cache_stats()

    def close(self) -> None:
        self._records.close()

    def __repr__(self) -> str:
        return f"MegatronDataset({self._records.path!r}, {len(self)} samples)"
