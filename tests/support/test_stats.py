"""The chi-square helper agrees with known quantiles, so the statistical tests mean what they say."""

import pytest

from tests.support.stats import binomial_pmf, chi_square_p_value, chi_square_test


@pytest.mark.parametrize(
    "statistic,df,p",
    [(3.841, 1, 0.05), (6.635, 1, 0.01), (18.307, 10, 0.05), (10.828, 1, 0.001), (124.342, 100, 0.05),
     (0.0, 3, 1.0)],
)
def test_chi_square_upper_tail_matches_tables(statistic, df, p):
    assert chi_square_p_value(statistic, df) == pytest.approx(p, rel=2e-3, abs=1e-6)


def test_binomial_pmf_sums_to_one_and_has_the_right_mean():
    pmf = binomial_pmf(12, 0.3)
    assert pmf.sum() == pytest.approx(1.0)
    assert (pmf * range(13)).sum() == pytest.approx(3.6)


def test_chi_square_test_rejects_a_biased_sample():
    _, _, p = chi_square_test([700, 300], [500, 500])
    assert p < 1e-10
