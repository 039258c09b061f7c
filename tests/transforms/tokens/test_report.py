"""The token summary says how many rows were written and why (Megatron's lengths are not always num_samples)."""

import os

import pytest

from shardmill.pipelines.config import parse_config, validate
from shardmill.transforms.tokens.plan import plan_tokens
from shardmill.transforms.tokens.report import rows_reason
from tests.support.paths import SHARED_FIXTURES

FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
A = os.path.join(FIXTURES, "meg-gpt2-openwebtext_text_document")
B = os.path.join(FIXTURES, "owt_b_rev599to0_int32")
pytestmark = pytest.mark.skipif(not os.path.exists(A + ".idx"), reason="../shared/fixtures/megatron absent")


def stats_of(fields: str) -> dict:
    config = parse_config(f"token_dataset {{ seq_length: 128 {fields} }}")
    validate(config)
    return plan_tokens(config).stats


@pytest.mark.parametrize("fields, line", [
    (f'path_prefix: "{A}" num_samples: 2000',
     "rows written 10,639: 2,000 requested; Megatron's GPTDataset serves whole epochs (1 epoch(s))"),
    (f'path_prefix: "{A}"', "rows written 10,639: one epoch of the split (num_samples unset)"),
    (f'blend {{ path_prefix: "{A}" weight: 2 }} blend {{ path_prefix: "{B}" weight: 1 }} num_samples: 1000',
     "rows written 1,001: 1,000 requested; the blend holds the sum of ceil(requested x weight) over its corpora"),
    (f'blend {{ path_prefix: "{A}" }} blend {{ path_prefix: "{B}" }} num_samples: 1000',
     "rows written 1,000: min(1,000 requested, 17,364 in one epoch of each corpus)"),
    (f'blend {{ path_prefix: "{A}" }} blend {{ path_prefix: "{B}" }}',
     "rows written 17,364: every sample of one epoch of each corpus (17,364; no weights, num_samples unset)"),
    (f'path_prefix: "{A}" split: "90,10" use_split: VALID drop_last_partial_validation_sequence: false',
     "rows written 944: one epoch of the split (num_samples unset); the last sample is partial, padded with -1"),
])
def test_the_summary_says_how_many_rows_and_why(fields, line):
    assert rows_reason(stats_of(fields)) == line
