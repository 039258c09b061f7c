"""The token job kind: its config section's checks and its hooks (plan.py, graph.py, shards.py, report.py)."""

from __future__ import annotations

import math

from shardmill.core.errors import ConfigError
from shardmill.transforms.job import JobKind


class TokensKind(JobKind):
    name = "tokens"
    package = "shardmill.transforms.tokens"
    config_field = "token_dataset"
    record_format = "megatron_gpt_samples"
    description = "pack Megatron .idx/.bin token corpora (splits, blends) into GPT samples"
    input_suffixes = None  # the corpora are named by token_dataset

    def validate(self, config) -> None:
        from shardmill.transforms.tokens.megatron_blend import blend_weight_sum
        from shardmill.transforms.tokens.plan import split_name

        if config.input:
            raise ConfigError("input: a token_dataset job reads the corpora its path_prefix/blend name; "
                              "remove input (and --input)")
        tokens = config.token_dataset
        if bool(tokens.path_prefix) == bool(tokens.blend):
            raise ConfigError("token_dataset: exactly one of path_prefix (one corpus) and blend (corpora, with or "
                              "without weights) is required")
        weighted = [corpus.HasField("weight") for corpus in tokens.blend]
        for i, corpus in enumerate(tokens.blend):
            if not corpus.path_prefix:
                raise ConfigError(f"token_dataset.blend[{i}].path_prefix: required")
            if corpus.HasField("weight") and not (math.isfinite(corpus.weight) and corpus.weight > 0):
                raise ConfigError(f"token_dataset.blend[{i}].weight: must be finite and > 0, got {corpus.weight}")
        if all(weighted) and tokens.blend and not math.isfinite(blend_weight_sum([c.weight for c in tokens.blend])):
            raise ConfigError("token_dataset.blend[].weight: the weights sum past the largest double (inf); "
                              "scale them down (only their ratios matter)")
        if any(weighted) and not all(weighted):
            raise ConfigError(f"token_dataset.blend[{weighted.index(False)}].weight: set a weight on every corpus "
                              "of the blend or on none (Megatron: prefixes and weights equal in number)")
        if any(weighted) and not tokens.HasField("num_samples"):
            raise ConfigError("token_dataset.num_samples: required with blend weights (Megatron blends by weight "
                              "only for a requested size; without weights every sample of each corpus is blended)")
        if not (math.isfinite(tokens.mid_level_dataset_surplus) and tokens.mid_level_dataset_surplus >= 0):
            raise ConfigError("token_dataset.mid_level_dataset_surplus: must be finite and >= 0, got "
                              f"{tokens.mid_level_dataset_surplus}")
        if tokens.HasField("split"):
            from shardmill.transforms.tokens.megatron_blend import SplitError, parse_split, split_matrix

            try:
                bookends = split_matrix(parse_split(tokens.split))
            except SplitError as err:
                raise ConfigError(f"token_dataset.split: {err}") from None
            if bookends[tokens.use_split] is None:
                raise ConfigError(f"token_dataset.use_split: the {split_name(tokens.use_split)} split of "
                                  f"{tokens.split!r} is empty: it has a share of 0, so Megatron builds no dataset "
                                  "for it and there are no samples to write")
        if tokens.HasField("megatron_cache"):
            self._validate_megatron_cache(tokens)
        if tokens.seq_length < 2:
            raise ConfigError(f"token_dataset.seq_length: must be >= 2, got {tokens.seq_length}")
        if tokens.HasField("hanse_sampling_threshold") and tokens.hanse_sampling_threshold < 1:
            raise ConfigError("token_dataset.hanse_sampling_threshold: must be >= 1 when set")
        if not (math.isfinite(tokens.hanse_sampling_gamma) and tokens.hanse_sampling_gamma >= 0):
            raise ConfigError("token_dataset.hanse_sampling_gamma: must be finite and >= 0")

    @staticmethod
    def _validate_megatron_cache(tokens) -> None:
        from shardmill.transforms.tokens.megatron_cache import check_data_paths, parse_tokenizer

        parse_tokenizer(tokens.megatron_cache.tokenizer)
        if tokens.blend:
            prefixes = [c.path_prefix for c in tokens.blend]
            fields = [f"blend[{k}].path_prefix" for k in range(len(prefixes))]
        else:
            prefixes, fields = [tokens.path_prefix], ["path_prefix"]
        check_data_paths(list(tokens.megatron_cache.data_path), prefixes, fields)
        for field, default in (("add_extra_token", True), ("drop_last_partial_validation_sequence", True)):
            if getattr(tokens, field) != default:
                # Megatron's training always builds with these true, and its cache name does not cover them: a
                # cache built otherwise would be loaded under the name of the indices training expects.
                raise ConfigError(f"token_dataset.{field}: false changes Megatron's sample index, but Megatron's "
                                  "cache name does not cover it and its training always builds with true: leave it "
                                  "at true to write megatron_cache")
        if tokens.HasField("hanse_sampling_threshold"):
            # Megatron's name for the cache would claim every document of the split: another run of the same
            # configuration (without this cache) would build different indices under that name.
            raise ConfigError("token_dataset.megatron_cache: Megatron builds no threshold-gamma sampling, and its "
                              "cache name does not cover it; unset hanse_sampling_threshold to write its cache")

    def plan(self, config, inputs, local_run=True):
        from shardmill.transforms.tokens.plan import plan_tokens

        return plan_tokens(config)

    def transform(self, config, plan, paths):
        from shardmill.transforms.tokens.graph import TokenJob

        return TokenJob(plan, paths)

    def stage(self, plan, paths):
        from shardmill.transforms.tokens.graph import stage_indices

        stage_indices(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.tokens.shards import TokenShardFormat

        return TokenShardFormat(plan.stats, plan.build_seconds)

    def describe(self, manifest):
        return (f"Megatron GPT samples of {manifest['seq_length']} tokens ({manifest['dtype']}, "
                f"{manifest['split']} split{', blended' if manifest.get('blended') else ''})")


KIND = TokensKind()
