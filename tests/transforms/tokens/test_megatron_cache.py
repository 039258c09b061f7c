"""Megatron-LM's own index cache written by the token job (token_dataset.megatron_cache).

Against tests/data/megatron/cache_reference: the files Megatron-LM wrote under --data-cache-path for
eight configurations, keyed by the data paths `/data/megatron/<fixture>` while this job reads the same
corpora from ../shared/fixtures/megatron. A run writes the cache of its own split; the runs below are
how a user asks for each of Megatron's datasets (one run per split, per validation set).
"""

import json
import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.core.errors import ConfigError, InputError
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.tokens.kind import TokensKind
from shardmill.transforms.tokens.plan import plan_tokens
from tests.support.cli import run_shardmill
from tests.support.paths import REPO, SHARED_FIXTURES

REFERENCE = os.path.join(REPO, "tests", "data", "megatron", "cache_reference")
FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
needs_fixture = pytest.mark.skipif(not os.path.exists(os.path.join(FIXTURES, "owt_b_rev599to0_int32.idx")),
                                   reason="../shared/fixtures/megatron absent")
SPLITS = ("TRAIN", "VALID", "TEST")
TOKENIZER = {"class": "megatron.core.tokenizers.text.text_tokenizer.MegatronTokenizerText",
             "tokenizer_path": "GPT2BPETokenizer"}


def reference(name: str) -> dict:
    with open(os.path.join(REFERENCE, name, "config.json")) as f:
        return json.load(f)


def corpora_fields(prefixes: list[str], weights: list[float] | None) -> str:
    """One corpus (path_prefix) or a blend, read from the fixtures, with Megatron's data paths for the cache."""
    local = [os.path.join(FIXTURES, os.path.basename(p)) for p in prefixes]
    if len(prefixes) == 1 and weights is None:
        corpora = f'path_prefix: "{local[0]}"'
    else:
        corpora = " ".join(f'blend {{ path_prefix: "{p}"' + (f" weight: {w!r}" if weights else "") + " }"
                           for p, w in zip(local, weights or [None] * len(local)))
    return corpora, " ".join(f'data_path: "{p}"' for p in prefixes)


def token_config(ref: dict, prefixes: list[str], weights, use_split: str, num_samples: int | None,
                 cache_only: bool = True, split: str | None = None) -> str:
    corpora, data_paths = corpora_fields(prefixes, weights)
    tokenizer = json.dumps(json.dumps(ref["tokenizer"]["unique_identifiers"]))
    return (f"seed: {ref['seed']} output {{ num_shards: 1 }} token_dataset {{ {corpora} use_split: {use_split} "
            f"seq_length: {ref['seq_length']}" + (f' split: "{split}"' if split else "")
            + ("" if num_samples is None else f" num_samples: {num_samples}")
            + f" megatron_cache {{ {data_paths} tokenizer: {tokenizer} cache_only: {str(cache_only).lower()} }} }}")


def shardmill_runs(ref: dict) -> list[str]:
    """How a user asks this job for every dataset Megatron builds for the reference's configuration.

    `--data-path` (blend with a split string): one run per split, that split's size. A split's own blend
    (`--train-data-path` ...): one run per split without a split string; several validation sets
    (multiple_validation_sets): one run per valid prefix, each with the whole valid size. Full validation
    (valid size None): num_samples unset."""
    sizes = ref["sizes"]
    if ref["blend"]:
        prefixes, weights = ref["blend"]
        return [token_config(ref, prefixes, weights, s, size, split=ref["split"]) for s, size in zip(SPLITS, sizes)]
    runs = []
    for s, size, (prefixes, weights) in zip(SPLITS, sizes, ref["blend_per_split"]):
        if s == "VALID" and ref["multiple_validation_sets"] and len(prefixes) > 1:
            runs += [token_config(ref, [p], None, s, size) for p in prefixes]
        else:
            runs.append(token_config(ref, prefixes, weights, s, size))
    return runs


def files_of(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def run(text: str, out: str):
    return run_job(validate(parse_config(text)), [], out, PipelineOptions([])).manifest


# ---- the files, byte for byte ---------------------------------------------------------------------------

@pytest.mark.slow
@needs_fixture
@pytest.mark.parametrize("name", ["single_corpus", "weighted_blend", "blend_without_weights", "per_split_blends",
                                  "multiple_validation_sets", "full_validation_multiple_sets",
                                  "full_validation_one_set"])
def test_the_cache_of_every_split_equals_the_files_megatron_wrote(tmp_path, name):
    ref = reference(name)
    written = {}
    for k, text in enumerate(shardmill_runs(ref)):
        manifest = run(text, str(tmp_path / f"run{k}"))
        cache = manifest["stats"]["token_dataset"]["megatron_cache"]
        files = files_of(str(tmp_path / f"run{k}" / cache["directory"]))
        assert sorted(files) == sorted(cache["files"])
        written.update(files)
    expected = files_of(os.path.join(REFERENCE, name, ref["cache"]))
    assert sorted(written) == sorted(expected)
    for file, data in expected.items():
        assert written[file] == data, file


@pytest.mark.slow
@needs_fixture
def test_a_run_with_samples_writes_the_same_cache_as_a_cache_only_run(tmp_path):
    ref = reference("weighted_blend")
    prefixes, weights = ref["blend"]
    manifest = run(token_config(ref, prefixes, weights, "VALID", 1000, cache_only=False, split=ref["split"]),
                   str(tmp_path / "out"))
    assert manifest["num_shards"] == 1 and manifest["shards"][0]["rows"] == ref["lengths"]["valid"]
    cache = manifest["stats"]["token_dataset"]["megatron_cache"]
    expected = files_of(os.path.join(REFERENCE, "weighted_blend", "cache"))
    for file, data in files_of(str(tmp_path / "out" / cache["directory"])).items():
        assert expected[file] == data, file


# ---- cache only; committed with the output ---------------------------------------------------------------

@pytest.mark.slow
@needs_fixture
def test_cache_only_writes_the_cache_and_no_samples_and_inspect_names_its_directory(tmp_path):
    ref = reference("single_corpus")
    out = tmp_path / "out"
    manifest = run(token_config(ref, ref["blend"][0], None, "VALID", 300, split=ref["split"]), str(out))
    # No sample is materialised: one empty shard keeps it an output the reader and inspect open.
    assert manifest["num_shards"] == 1 and manifest["shards"][0]["rows"] == 0
    assert manifest["stats"]["accounting"]["records_written"] == 0
    cache = manifest["stats"]["token_dataset"]["megatron_cache"]
    assert cache["directory"] == ".g000001/megatron-cache" and cache["cache_only"]
    assert len(files_of(str(out / cache["directory"]))) == 4
    inspected = run_shardmill("inspect", out, timeout=120)
    assert inspected.returncode == 0, inspected.stderr
    assert ("megatron cache: .g000001/megatron-cache (4 files; copy them to the training job's --data-cache-path; "
            "cache only: no samples written)") in inspected.stdout


@pytest.mark.slow
@needs_fixture
def test_the_cache_is_only_in_the_committed_generation(tmp_path, monkeypatch):
    ref = reference("single_corpus")
    out = tmp_path / "out"
    text = token_config(ref, ref["blend"][0], None, "TEST", 10, split=ref["split"])
    run(text, str(out))

    def refuse(self, config, manifest):
        assert os.listdir(out / [n for n in os.listdir(out) if n.startswith(".staging")][0] / ".g000002"
                          / "megatron-cache")  # staged, not yet visible
        raise InputError("refused before the commit")

    monkeypatch.setattr(TokensKind, "check_outcome", refuse)
    overwrite = text.replace("output {", "output { overwrite: true")
    with pytest.raises(InputError, match="refused before the commit"):
        run(overwrite, str(out))
    assert sorted(n for n in os.listdir(out) if n.startswith(".g")) == [".g000001"]
    assert not [n for n in os.listdir(out) if n.startswith(".staging")]
    monkeypatch.undo()
    manifest = run(overwrite, str(out))
    assert manifest["stats"]["token_dataset"]["megatron_cache"]["directory"] == ".g000002/megatron-cache"
    assert sorted(n for n in os.listdir(out) if n.startswith(".g")) == [".g000002"]
    assert len(os.listdir(out / ".g000002" / "megatron-cache")) == 4


# ---- refusals -----------------------------------------------------------------------------------------

def config_with_cache(cache: str, corpora: str = 'path_prefix: "/x/a"', extra: str = "") -> str:
    return f"token_dataset {{ {corpora} seq_length: 8 {extra} megatron_cache {{ {cache} }} }}"


@pytest.mark.parametrize("tokenizer, message", [
    ("", r"^token_dataset.megatron_cache.tokenizer: required"),
    ("{class: 1}", r"^token_dataset.megatron_cache.tokenizer: not JSON \(Expecting property name"),
    ('["GPT2BPETokenizer"]', r"^token_dataset.megatron_cache.tokenizer: a JSON list, not an object"),
    ('{"tokenizer_path": "GPT2BPETokenizer"}', r'^token_dataset.megatron_cache.tokenizer: no "class"; Megatron'),
    ('{"class": ["a"]}', r'^token_dataset.megatron_cache.tokenizer: "class" \["a"\]; Megatron\'s tokenizer identity '
                         "names its class as a string"),
    ('{"class": "T", "class": "U"}', r'^token_dataset.megatron_cache.tokenizer: the key\(s\) "class" appear more than '
                                     "once"),
    ('{"class": "T", "n": NaN}', r"^token_dataset.megatron_cache.tokenizer: NaN is not JSON a tokenizer's identity "),
    ('{"class": "T", "n": 1e400}', r"^token_dataset.megatron_cache.tokenizer: 1e400 is not JSON"),
])
def test_a_malformed_tokenizer_identity_is_refused_saying_what_is_wrong(tokenizer, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(parse_config(config_with_cache(f'data_path: "/data/a" tokenizer: {json.dumps(tokenizer)}')))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("corpora, data_paths, message", [
    ('path_prefix: "/x/a"', 'data_path: "/d/a" data_path: "/d/b"',
     r"^token_dataset.megatron_cache.data_path: 2 prefix\(es\) for the job's 1 corpus\(es\)"),
    ('blend { path_prefix: "/x/a" } blend { path_prefix: "/x/b" }', "",
     r"^token_dataset.megatron_cache.data_path: 0 prefix\(es\) for the job's 2 corpus\(es\)"),
    ('blend { path_prefix: "gs://bucket/a" } blend { path_prefix: "/x/b" }', 'data_path: "/d/b" data_path: "/d/a"',
     r"^token_dataset.megatron_cache.data_path\[0\]: '/d/b' names 'b' but the job's blend\[0\].path_prefix "
     r"'gs://bucket/a' names 'a': give the prefixes in the job's order"),
])
def test_data_paths_that_do_not_match_the_corpora_are_refused_naming_both(corpora, data_paths, message):
    cache = f"{data_paths} tokenizer: {json.dumps(json.dumps(TOKENIZER))}"
    with pytest.raises(ConfigError, match=message):
        validate(parse_config(config_with_cache(cache, corpora)))


def test_a_data_path_ending_in_a_slash_is_refused_as_no_prefix():
    cache = f'data_path: "/d/a/" tokenizer: {json.dumps(json.dumps(TOKENIZER))}'
    with pytest.raises(ConfigError, match=r"^token_dataset.megatron_cache.data_path\[0\]: '/d/a/' ends in '/': a "
                                          "prefix names the files"):
        validate(parse_config(config_with_cache(cache)))


@pytest.mark.parametrize("setting", ["add_extra_token: false", "drop_last_partial_validation_sequence: false"])
def test_settings_megatrons_training_never_uses_are_refused_with_a_cache(setting):
    """Megatron's cache name does not cover them and its training always builds with both true: a cache built
    otherwise would be loaded under the name of the indices training expects."""
    cache = f'data_path: "/d/a" tokenizer: {json.dumps(json.dumps(TOKENIZER))}'
    with pytest.raises(ConfigError, match=f"^token_dataset.{setting.split(':')[0]}: false changes Megatron's sample "
                                          "index, but Megatron's cache name does not cover it"):
        validate(parse_config(config_with_cache(cache, extra=setting)))


def test_an_object_store_data_path_is_hashed_not_probed():
    from shardmill.pipelines.run_job import config_strings

    cache = f'data_path: "s3://bucket/data/a" tokenizer: {json.dumps(json.dumps(TOKENIZER))}'
    config = validate(parse_config(config_with_cache(cache)))
    assert "s3://bucket/data/a" not in config_strings(config)


def test_threshold_gamma_with_a_megatron_cache_is_refused():
    cache = f'data_path: "/d/a" tokenizer: {json.dumps(json.dumps(TOKENIZER))}'
    with pytest.raises(ConfigError, match="Megatron builds no threshold-gamma sampling"):
        validate(parse_config(config_with_cache(cache, extra="hanse_sampling_threshold: 100")))


def test_a_split_of_share_zero_is_refused_saying_megatron_builds_no_dataset_for_it():
    with pytest.raises(ConfigError, match=r"the VALID split of '1,0,0' is empty: it has a share of 0, so Megatron "
                                          "builds no dataset for it"):
        validate(parse_config('token_dataset { path_prefix: "/x/a" seq_length: 8 split: "1,0,0" use_split: VALID }'))


@needs_fixture
def test_a_split_with_no_documents_is_refused_saying_megatron_never_finishes_building_it():
    prefix = os.path.join(FIXTURES, "owt_c_600to999_5empty_uint16")
    config = validate(parse_config(f'token_dataset {{ path_prefix: "{prefix}" seq_length: 8 split: "969,30,1" '
                                   "use_split: TEST num_samples: 10 }"))
    with pytest.raises(InputError, match="rounds to none, and Megatron never finishes building samples of no tokens"):
        plan_tokens(config)
