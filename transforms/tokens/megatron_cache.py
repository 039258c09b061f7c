"""Megatron-LM's own index cache (`--data-cache-path`) for the split a token run builds.

Megatron's builder (megatron/core/datasets; tests/data/megatron/cache_reference/README.md has the facts and
their code locations) names each dataset's cache files `{md5}-{class}-{split}-{affix}`: md5 of the
dataset's description, `json.dumps(unique_identifiers, indent=4)`, which is also `description.txt`. At
start-up it loads a dataset's `.npy` files when every one of them exists and builds nothing; the name is
the whole check. So the cache this job writes is its plan's arrays (already Megatron's, byte for byte:
np.savez stores each as np.save writes it) under the names Megatron derives from:

- a GPTDataset: class, dataset_path (the prefix as the training job gives it, not where this job reads
  the corpus), num_samples (what the builder asks of this corpus: the split's size, a weighted blend's
  share with its surplus, null for one epoch), index_split, random_seed, sequence_length, split (the string
  as given; null for a split's own blend), split_matrix, tokenizer (its own unique_identifiers);
- a BlendedDataset: class, datasets (its GPTDatasets' identifiers), split, weights (normalised again when
  the blend has a size), size (null for the exhaustive blend).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import zipfile

from shardmill.core.errors import ConfigError
from shardmill.transforms.common.filesystem import write_bytes_atomically

CACHE_DIR_NAME = "megatron-cache"  # in the generation's metadata directory
GPT_ARRAYS = ("document_index", "sample_index", "shuffle_index")
BLEND_ARRAYS = ("dataset_index", "dataset_sample_index")
_FIELD = "token_dataset.megatron_cache"


@dataclasses.dataclass(frozen=True)
class CacheFile:
    """One file of Megatron's cache: a description's text, or an array kept in the plan's indices npz."""

    name: str
    description: str | None = None
    member: str | None = None  # the npz member (without `.npy`) holding the array


def parse_tokenizer(text: str) -> dict:
    """The tokenizer's unique_identifiers (keys in their order); ConfigError saying what is wrong."""
    if not text:
        raise ConfigError(f"{_FIELD}.tokenizer: required: the tokenizer's unique_identifiers as Megatron writes "
                          "them in a cache's description.txt (a JSON object)")
    def no_repeated_keys(pairs):
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ConfigError(f"{_FIELD}.tokenizer: the key(s) {', '.join(map(json.dumps, repeated))} appear more "
                              "than once: Megatron's identity has each once (its hash would take the last)")
        return dict(pairs)

    def no_constant(name):
        raise ConfigError(f"{_FIELD}.tokenizer: {name} is not JSON a tokenizer's identity can hold (Megatron writes "
                          "its values as strings)")

    def finite(text_value):
        value = float(text_value)
        if not math.isfinite(value):
            no_constant(text_value)
        return value

    try:
        identity = json.loads(text, object_pairs_hook=no_repeated_keys, parse_constant=no_constant,
                              parse_float=finite)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(f"{_FIELD}.tokenizer: not JSON ({err}): give the tokenizer's unique_identifiers as a "
                          "JSON object text") from None
    if not isinstance(identity, dict):
        raise ConfigError(f"{_FIELD}.tokenizer: a JSON {type(identity).__name__}, not an object: give the "
                          "tokenizer's unique_identifiers as a JSON object text")
    if not isinstance(identity.get("class"), str):
        found = "no \"class\"" if "class" not in identity else f"\"class\" {json.dumps(identity['class'])}"
        raise ConfigError(f"{_FIELD}.tokenizer: {found}; Megatron's tokenizer identity names its class as a "
                          "string (\"class\": \"megatron.core.tokenizers...\")")
    return identity


def _last_component(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def check_data_paths(data_paths: list[str], prefixes: list[str], corpus_fields: list[str]) -> None:
    """ConfigError unless there is one data path per corpus, in order, ending in the corpus's file name.

    The job may read a copy of a corpus from anywhere (an object store); the name is what ties the two."""
    if len(data_paths) != len(prefixes):
        raise ConfigError(f"{_FIELD}.data_path: {len(data_paths)} prefix(es) for the job's {len(prefixes)} "
                          "corpus(es): give one per corpus, in the job's order, as the training job passes them "
                          "to Megatron")
    for k, (data_path, prefix, field) in enumerate(zip(data_paths, prefixes, corpus_fields)):
        if data_path.endswith("/"):
            raise ConfigError(f"{_FIELD}.data_path[{k}]: {data_path!r} ends in '/': a prefix names the files "
                              "<prefix>.idx and <prefix>.bin, not a folder (Megatron's hash takes it as given)")
        if _last_component(data_path) != _last_component(prefix):
            raise ConfigError(f"{_FIELD}.data_path[{k}]: {data_path!r} names {_last_component(data_path)!r} but "
                              f"the job's {field} {prefix!r} names {_last_component(prefix)!r}: give the "
                              "prefixes in the job's order")


def description(identifiers: dict) -> str:
    """Megatron's description text: what description.txt holds and the md5 hashes."""
    return json.dumps(identifiers, indent=4)


def gpt_identifiers(data_path: str, num_samples: int | None, split: str, seed: int, seq_length: int,
                    split_string: str | None, split_matrix: list | None, tokenizer: dict) -> dict:
    """A GPTDataset's unique_identifiers (MegatronDataset.__init__, in its order)."""
    return {"class": "GPTDataset", "dataset_path": data_path, "num_samples": num_samples, "index_split": split,
            "random_seed": seed, "sequence_length": seq_length, "split": split_string,
            "split_matrix": split_matrix, "tokenizer": tokenizer}


def blended_identifiers(datasets: list[dict], split: str, weights: list, size: int | None) -> dict:
    """A BlendedDataset's unique_identifiers (BlendedDataset.__init__, in its order)."""
    return {"class": "BlendedDataset", "datasets": datasets, "split": split, "weights": weights, "size": size}


def _files_of(identifiers: dict, split: str, members: dict[str, str]) -> list[CacheFile]:
    """The description and the arrays of one dataset (members: array affix -> npz member)."""
    text = description(identifiers)
    stem = f"{hashlib.md5(text.encode('utf-8')).hexdigest()}-{identifiers['class']}-{split}"
    return ([CacheFile(f"{stem}-description.txt", description=text)]
            + [CacheFile(f"{stem}-{affix}.npy", member=member) for affix, member in members.items()])


def cache_files(corpora: list[dict], blend: dict | None) -> tuple[CacheFile, ...]:
    """Every file of the split's datasets: each corpus's GPTDataset (identifiers as gpt_identifiers), then
    the blend's BlendedDataset (weights, size) when there is one. The npz members are the plan's names."""
    files = []
    for k, identifiers in enumerate(corpora):
        name = f"corpus{k}_" if blend is not None else ""
        files += _files_of(identifiers, identifiers["index_split"], {affix: name + affix for affix in GPT_ARRAYS})
    if blend is not None:
        split = corpora[0]["index_split"]
        identifiers = blended_identifiers(corpora, split, blend["weights"], blend["size"])
        files += _files_of(identifiers, split, {affix: "blend_" + affix for affix in BLEND_ARRAYS})
    return tuple(files)


def write_cache(files: tuple[CacheFile, ...], indices_npz: bytes, directory: str) -> None:
    """The cache's files into directory (the run's staging; committed with the output)."""
    with zipfile.ZipFile(io.BytesIO(indices_npz)) as arrays:
        for file in files:
            data = file.description.encode("utf-8") if file.member is None else arrays.read(file.member + ".npy")
            write_bytes_atomically(f"{directory}/{file.name}", data)
