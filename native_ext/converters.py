"""Conversions of a record column into training tensors.

The generic reader knows no record format: a converter names the columns it
needs, is bound to the output it reads (its manifest), sets its native
conversion on the reader's options (lc0: on the decode threads), and
finishes each batch. Lc0Tensors: lc0 records into lczero-training's tensors;
MegatronSamples: token samples into what Megatron's GPTDataset serves.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

PLANE_ENCODINGS = ("float32", "float16", "bfloat16", "uint8", "packed")
LC0_CONVENTIONS = ("loader", "chunkparser")
POLICY_SIZE = 1858
# lc0 records from V5 on carry an input-format word after the version, so their policy starts 4 bytes later.
_POLICY_OFFSET = {True: 8, False: 4}


@dataclasses.dataclass(frozen=True)
class Lc0Tensors:
    """lc0 training tensors of the `frame` records, in the batch's order.

    convention: "loader" (lczero-training's C++ loader) or "chunkparser" (its
      tf/chunkparser.py). Each batch then also carries `planes` (batch, 112,
      8, 8), `policy` (batch, 1858: float32, a view of the records' own
      probabilities, rows strided by the record size) and either `values`
      (batch, 6, 4) (loader) or `wdl`, `best_wdl` (batch, 3) and `plies_left`
      (batch,) (chunkparser). A record the convention can't convert makes
      its batch an OutputError naming its shard and row (the next call serves
      the next batch). Memory: each window in flight keeps its tensors too
      (float16 planes: 14.3 kB a position).
    planes: "float32", "float16", "bfloat16" (its bits as uint16), "uint8" (1
      where nonzero) or "packed" (batch, 112, 8 bytes, numpy packbits order);
      the last two come with `planes_scale` (batch, 112), each plane's value:
      planes = bits x scale, exactly.
    """

    convention: str = "loader"
    planes: str = "float32"

    def __post_init__(self):
        if self.convention not in LC0_CONVENTIONS:
            raise ValueError(f"Lc0Tensors.convention must be one of {', '.join(LC0_CONVENTIONS)}, "
                             f"got {self.convention!r}")
        if self.planes not in PLANE_ENCODINGS:
            raise ValueError(f"Lc0Tensors.planes must be one of {', '.join(PLANE_ENCODINGS)}, got {self.planes!r}")

    required_columns = ("frame",)

    def bind(self, manifest: dict) -> "Lc0Tensors":
        if manifest.get("record_format", "lc0") != "lc0":
            raise ValueError(f"Lc0Tensors converts lc0 records; this output holds {manifest.get('record_format')}")
        return self

    def configure(self, native_options) -> None:
        """Sets the native conversion (enums of record_converter.h) on the reader's options."""
        from shardmill.native_ext._native import ConverterKind, PlaneEncoding

        native_options.converter = getattr(ConverterKind, f"LC0_{self.convention.upper()}")
        native_options.planes = getattr(PlaneEncoding, self.planes.upper())

    def finish(self, batch: dict) -> None:
        """Adds the policy: the records' own 1858 float32 probabilities, served in place as a strided view
        instead of copying 7.4 kB a position."""
        frames = batch["frame"]
        start = _POLICY_OFFSET[len(frames) == 0 or int(frames[0, :4].view("<u4")[0]) >= 5]
        batch["policy"] = frames[:, start : start + 4 * POLICY_SIZE].view("<f4")



MEGATRON_PAD_TOKEN = -1  # Megatron's pad id when the tokenizer has none


@dataclasses.dataclass(frozen=True)
class MegatronSamples:
    """What Megatron's GPTDataset.__getitem__ serves, for each token sample of the batch.

    Adds `tokens` and `labels` (int64, (batch, seq_length): the sample and
    the sample shifted by one; without the extra token the last label is
    the pad), `loss_mask` (float32, 0 at pad labels and, with
    eod_mask_loss, at end-of-document tokens) and `position_ids` (int64,
    restarting after each end of document with reset_position_ids), and
    with create_attention_mask `attention_mask` (bool, (batch, 1,
    seq_length, seq_length), True where attention is masked; with
    reset_attention_mask no token attends across an end of document): the
    semantics of Megatron's _get_ltor_masks_and_position_ids. Pad tokens
    become 0 in tokens and labels, as Megatron does. The raw `tokens`
    column is replaced.

    eod_token: the tokenizer's end-of-document id (required).
    pad_token: the tokenizer's pad id; None: the output's (the pad its
      partial samples hold), else Megatron's default -1.
    """

    eod_token: int
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    create_attention_mask: bool = False
    pad_token: int | None = None
    add_extra_token: bool | None = None  # from the output (bind)

    def __post_init__(self):
        for name in ("eod_token", "pad_token"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                raise ValueError(f"MegatronSamples.{name} must be an integer, got {value!r}")

    required_columns = ("tokens",)

    def bind(self, manifest: dict) -> "MegatronSamples":
        if manifest.get("record_format") != "megatron_gpt_samples":
            raise ValueError("MegatronSamples converts Megatron token samples; this output holds "
                             f"{manifest.get('record_format', 'lc0')}")
        record = manifest["record"]
        dtype = np.dtype(record.get("dtype", "int64"))
        limits = np.iinfo(dtype) if dtype.kind in "iu" else None
        if limits is not None and not limits.min <= self.eod_token <= limits.max:
            raise ValueError(f"MegatronSamples.eod_token {self.eod_token} is outside the output's {dtype} tokens "
                             f"({limits.min}..{limits.max}): no token could end a document")
        pad = self.pad_token
        if pad is None:
            pad = record.get("pad_token")
            pad = MEGATRON_PAD_TOKEN if pad is None else int(pad)
        return dataclasses.replace(self, pad_token=pad, add_extra_token=bool(record["add_extra_token"]))

    def configure(self, native_options) -> None:
        """Nothing native: the conversion is a few vectorised numpy passes over the batch."""

    def finish(self, batch: dict) -> None:
        text = batch["tokens"].astype(np.int64)
        if self.add_extra_token:
            tokens, labels = text[:, :-1], text[:, 1:].copy()
        else:
            tokens, labels = text, np.roll(text, -1, axis=1)
            labels[:, -1] = self.pad_token
        batch.update(megatron_masks(tokens, self.eod_token, self.reset_position_ids, self.reset_attention_mask,
                                    self.eod_mask_loss, self.create_attention_mask))
        batch["loss_mask"][labels == self.pad_token] = 0.0
        tokens = np.where(tokens == self.pad_token, 0, tokens)
        labels[labels == self.pad_token] = 0
        batch["tokens"], batch["labels"] = tokens, labels


def megatron_masks(tokens: np.ndarray, eod_token: int, reset_position_ids: bool, reset_attention_mask: bool,
                   eod_mask_loss: bool, create_attention_mask: bool) -> dict:
    """Megatron's _get_ltor_masks_and_position_ids for a batch (batch, seq_length) of int64 tokens."""
    batch, length = tokens.shape
    eod = tokens == eod_token
    loss_mask = np.ones((batch, length), dtype=np.float32)
    if eod_mask_loss:
        loss_mask[eod] = 0.0
    positions = np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length))
    if reset_position_ids:
        # Position after the last EOD before j: j - (that EOD's index + 1).
        last_eod = np.where(eod, positions, -1)
        start = np.zeros((batch, length), dtype=np.int64)
        start[:, 1:] = np.maximum.accumulate(last_eod, axis=1)[:, :-1] + 1
        position_ids = positions - start
    else:
        position_ids = positions.copy()
    out = {"loss_mask": loss_mask, "position_ids": position_ids}
    if create_attention_mask:
        causal = np.tril(np.ones((length, length), dtype=bool))
        allowed = np.broadcast_to(causal, (batch, length, length))
        if reset_attention_mask:
            # A position's document: the number of end-of-document tokens before it (an EOD ends its document).
            segment = np.zeros((batch, length), dtype=np.int64)
            segment[:, 1:] = np.cumsum(eod[:, :-1], axis=1)
            allowed = allowed & (segment[:, :, None] == segment[:, None, :])
        out["attention_mask"] = ~allowed[:, None, :, :]
    return out


class Converter(Protocol):
    required_columns: tuple[str, ...]

    def bind(self, manifest: dict) -> "Converter": ...

    def configure(self, native_options) -> None: ...

    def finish(self, batch: dict) -> None: ...


CONVERTERS = (Lc0Tensors, MegatronSamples)
