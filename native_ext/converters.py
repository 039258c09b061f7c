"""Conversions of a record column into training tensors, done on the reader's decode threads.

The generic reader knows no record format: a converter names the columns it
needs, sets its native conversion on the reader's options, and finishes each
batch (views the native code does not make). lc0 is the one format today.
"""

from __future__ import annotations

import dataclasses

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

