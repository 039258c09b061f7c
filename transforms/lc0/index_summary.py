"""What is in an index: additive summaries that merge across workers.

`IndexSummary` is built from index tables, dead letters and per-batch source
stats, merged with `+`, and rendered for `shardmill count`. The Beam
CombineFn below only wires `+` into CombineGlobally.
"""

from __future__ import annotations

import collections
import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa

# Histogram of records per chunk: bins [0,25), [25,50), ... [475,500), [500, inf).
HISTOGRAM_BIN_WIDTH = 25
HISTOGRAM_BINS = 21


def cache_notes(rejected: int, pruned: int) -> str:
    """What else the index cache did, for a summary line."""
    notes = [f"{rejected:,} unusable entries rebuilt"] if rejected else []
    notes += [f"{pruned:,} old entries removed"] if pruned else []
    return f" ({'; '.join(notes)})" if notes else ""


@dataclasses.dataclass
class IndexSummary:
    sources: int = 0
    chunks: int = 0
    records: int = 0
    uncompressed_bytes: int = 0
    compressed_bytes: int = 0
    verified_chunks: int = 0
    skipped_members: int = 0
    skipped_files: dict[str, int] = dataclasses.field(default_factory=dict)  # discovery: kind -> files
    index_cache: str = ""  # its location; "": no index cache
    sources_cached: int = 0  # sources whose index came from the cache
    cache_rejected: int = 0  # cache entries that could not be used (the source was indexed again)
    cache_pruned: int = 0  # entries removed for age
    min_records: int | None = None
    max_records: int | None = None
    histogram: list[int] = dataclasses.field(default_factory=lambda: [0] * HISTOGRAM_BINS)
    versions: dict[int, int] = dataclasses.field(default_factory=dict)
    errors: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_table(cls, table: pa.Table) -> "IndexSummary":
        n = table["num_records"].to_numpy()
        if len(n) == 0:
            return cls()
        bins = np.minimum(n // HISTOGRAM_BIN_WIDTH, HISTOGRAM_BINS - 1)
        versions, counts = np.unique(table["version"].to_numpy(), return_counts=True)
        return cls(
            chunks=len(n),
            records=int(n.sum()),
            uncompressed_bytes=int((n * table["record_size"].to_numpy()).sum()),
            compressed_bytes=int(table["length"].to_numpy().sum()),
            verified_chunks=int(table["verified"].to_numpy(zero_copy_only=False).sum()),
            min_records=int(n.min()),
            max_records=int(n.max()),
            histogram=np.bincount(bins, minlength=HISTOGRAM_BINS).tolist(),
            versions={int(v): int(c) for v, c in zip(versions, counts)},
        )

    @classmethod
    def of_dead_letter(cls, dead_letter: dict) -> "IndexSummary":
        return cls(errors={dead_letter["reason"]: 1})

    @classmethod
    def of_source_stats(cls, stats: dict) -> "IndexSummary":
        return cls(sources=stats.get("sources", 0), skipped_members=stats.get("skipped_members", 0),
                   skipped_files={k: v for k, v in stats.get("skipped_files", {}).items() if v},
                   index_cache=stats.get("index_cache", ""), sources_cached=stats.get("sources_cached", 0),
                   cache_rejected=stats.get("cache_rejected", 0), cache_pruned=stats.get("cache_pruned", 0))

    def __add__(self, other: "IndexSummary") -> "IndexSummary":
        def merged(a: dict, b: dict) -> dict:
            out = collections.Counter(a)
            out.update(b)
            return dict(sorted(out.items()))

        def pick(f, a, b):
            return b if a is None else a if b is None else f(a, b)

        return IndexSummary(
            sources=self.sources + other.sources,
            chunks=self.chunks + other.chunks,
            records=self.records + other.records,
            uncompressed_bytes=self.uncompressed_bytes + other.uncompressed_bytes,
            compressed_bytes=self.compressed_bytes + other.compressed_bytes,
            verified_chunks=self.verified_chunks + other.verified_chunks,
            skipped_members=self.skipped_members + other.skipped_members,
            skipped_files=merged(self.skipped_files, other.skipped_files),
            index_cache=self.index_cache or other.index_cache,
            sources_cached=self.sources_cached + other.sources_cached,
            cache_rejected=self.cache_rejected + other.cache_rejected,
            cache_pruned=self.cache_pruned + other.cache_pruned,
            min_records=pick(min, self.min_records, other.min_records),
            max_records=pick(max, self.max_records, other.max_records),
            histogram=[a + b for a, b in zip(self.histogram, other.histogram)],
            versions=merged(self.versions, other.versions),
            errors=merged(self.errors, other.errors),
        )

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["versions"] = {str(k): v for k, v in self.versions.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "IndexSummary":
        data = dict(data)
        data["versions"] = {int(k): v for k, v in data["versions"].items()}
        return cls(**data)

    def render(self) -> str:
        """Human-readable report for the terminal."""
        mean = self.records / self.chunks if self.chunks else 0.0
        lines = [
            f"sources  {self.sources:>12,}   (skipped non-chunk archive members: {self.skipped_members:,}; "
            f"skipped files: {', '.join(f'{k} {v:,}' for k, v in self.skipped_files.items()) or 'none'})",
            f"chunks   {self.chunks:>12,}   (count verified by inflation: {self.verified_chunks:,})",
            f"records  {self.records:>12,}   ({self.uncompressed_bytes / 1e6:,.1f} MB uncompressed, "
            f"{self.compressed_bytes / 1e6:,.1f} MB compressed)",
            f"errors   {self.error_count:>12,}   "
            + (", ".join(f"{k} {v}" for k, v in self.errors.items()) if self.errors else ""),
            "versions " + ", ".join(f"V{k}: {v:,} chunks" for k, v in self.versions.items()),
        ]
        if self.index_cache:
            lines.insert(1, f"index cache {self.index_cache}: {self.sources_cached:,} of {self.sources:,} sources "
                            f"read from it" + cache_notes(self.cache_rejected, self.cache_pruned))
        if self.chunks:
            lines.append(
                f"records per chunk: min {self.min_records}, mean {mean:.1f}, max {self.max_records}"
            )
            peak = max(self.histogram)
            for i, count in enumerate(self.histogram):
                if not count:
                    continue
                lo = i * HISTOGRAM_BIN_WIDTH
                label = f"{lo:>4}-{lo + HISTOGRAM_BIN_WIDTH - 1:<4}" if i < HISTOGRAM_BINS - 1 else f"{lo:>4}+    "
                bar = "#" * max(1, round(40 * count / peak))
                lines.append(f"  {label} | {bar} {count:,}")
        return "\n".join(lines)


class MergeIndexSummaries(beam.CombineFn):
    """CombineFn over IndexSummary values with `+`."""

    def create_accumulator(self):
        return IndexSummary()

    def add_input(self, accumulator, summary):
        return accumulator + summary

    def merge_accumulators(self, accumulators):
        total = IndexSummary()
        for acc in accumulators:
            total = total + acc
        return total

    def extract_output(self, accumulator):
        return accumulator
