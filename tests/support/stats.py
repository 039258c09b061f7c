"""Goodness-of-fit helpers for the statistical tests (no SciPy dependency).

chi_square_p_value is the upper tail of the chi-square distribution,
Q(df/2, x/2), the regularized upper incomplete gamma function computed by its
series (x < a + 1) or its continued fraction (Numerical Recipes, 6.2).
"""

from __future__ import annotations

import math

import numpy as np


def _gamma_q(a: float, x: float) -> float:
    if x <= 0:
        return 1.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return 1.0 - total * math.exp(log_prefactor)
    tiny = 1e-300  # continued fraction for Q(a, x), modified Lentz
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_prefactor) * h


def chi_square_p_value(statistic: float, df: int) -> float:
    return _gamma_q(df / 2.0, statistic / 2.0)


def chi_square_test(observed, expected, min_expected: float = 5.0) -> tuple[float, int, float]:
    """(statistic, df, p-value) after pooling adjacent bins with expected < min_expected."""
    observed = np.asarray(observed, dtype=float)
    expected = np.asarray(expected, dtype=float)
    assert abs(observed.sum() - expected.sum()) < 1e-6 * max(1.0, expected.sum()), "totals differ"
    pooled_o, pooled_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if pooled_e:
            pooled_o[-1] += acc_o
            pooled_e[-1] += acc_e
        else:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
    o, e = np.array(pooled_o), np.array(pooled_e)
    statistic = float(((o - e) ** 2 / e).sum())
    df = len(o) - 1
    return statistic, df, chi_square_p_value(statistic, df) if df > 0 else 1.0


def binomial_pmf(n: int, p: float) -> np.ndarray:
    k = np.arange(n + 1)
    log_comb = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
    with np.errstate(divide="ignore"):
        return np.exp(log_comb + k * np.log(p) + (n - k) * np.log1p(-p))
