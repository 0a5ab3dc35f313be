"""bench/paired.py against values worked out by hand: the exact sign-flip p at n = 5 (the 32 sign
patterns enumerated below) and the Student-t interval of a textbook data set."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import paired  # noqa: E402  (bench/paired.py)


def test_sign_flip_p_is_the_exact_share_of_the_32_patterns_at_n5():
    """d = [1, 2, 3, 4, −5]: observed sum 5. A sign pattern gives 15 − 2F, F = the sum of the
    magnitudes it makes negative (a subset of {1, …, 5}); |15 − 2F| ≥ 5 iff F ≤ 5 or F ≥ 10.
    Subsets with F ≤ 5: {}, {1}, {2}, {3}, {1,2}, {4}, {1,3}, {5}, {1,4}, {2,3} — 10; F ≥ 10 are
    their complements — 10 more. p = 20/32 = 0.625."""
    low = [(), (1,), (2,), (3,), (1, 2), (4,), (1, 3), (5,), (1, 4), (2, 3)]
    assert all(sum(f) <= 5 for f in low) and len(set(low)) == 10
    assert paired.sign_flip_p([1.0, 2.0, 3.0, 4.0, -5.0]) == 20 / 32
    # all five of one sign: only the pattern and its mirror are as extreme, 2/32 (the smallest p at n = 5)
    assert paired.sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0]) == 2 / 32
    assert paired.sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0], alternative="greater") == 1 / 32
    assert paired.sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0], alternative="less") == 1.0
    # magnitudes {3, 1, 1, 1, 1} (total 7), with tied magnitudes: a pattern's sum is 7 − 2F.
    # [3, 1, 1, 1, 1]: |7 − 2F| ≥ 7 iff F ∈ {0, 7}: 2/32. [3, 1, 1, 1, −1] (sum 5): |7 − 2F| ≥ 5 iff
    # F ≤ 1 or F ≥ 6: {} and the four single 1s, and their complements: 10/32
    assert paired.sign_flip_p([3.0, 1.0, 1.0, 1.0, 1.0]) == 2 / 32
    assert paired.sign_flip_p([3.0, 1.0, 1.0, 1.0, -1.0]) == 10 / 32


def test_sign_flip_treats_float_rounding_as_a_tie():
    """Ratios to GRPO of 1.025, 1.025, 1.025, 1.025, 0.95, 0.95 against 1: on paper the differences
    sum to 0, so every pattern is as far from 0 and p = 1; in floats the sum is −4.4e-16 (a
    tolerance relative to that observed value, scipy's own, would give 0.8125). One stratum of
    `stratified` gives the same p."""
    d = [1.025 - 1.0] * 4 + [0.95 - 1.0] * 2
    assert sum(d) != 0.0
    assert paired.sign_flip_p(d) == 1.0
    one = paired.paired(dict(enumerate(d)), {i: 0.0 for i in range(len(d))})
    assert one["p"] == 1.0 and paired.stratified([one])["p"] == 1.0


def test_t_interval_of_students_sleep_data():
    """Student (1908) / Cushny–Peebles: extra hours of sleep, drug 2 − drug 1 in 10 patients. The paired
    t interval is 1.58 ± 2.262 · 1.2300/√10 = [0.7001, 2.4599] (df = 9; R's t.test(paired = TRUE)
    prints 0.7001142, 2.4598858)."""
    d = [1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4]
    s = paired.summary(d)
    assert s["n"] == 10 and s["mean"] == pytest.approx(1.58)
    assert (s["lo"], s["hi"]) == pytest.approx((0.7001142, 2.4598858), abs=1e-7)
    assert paired.t_quantile(0.975, 9) == pytest.approx(2.262157, abs=1e-6)
    assert paired.t_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)                  # no spread: a zero-width band
    # one stratum: the Welch interval is the one-sample t interval
    st = paired.stratified([{"d": d}])
    assert (st["lo"], st["hi"]) == pytest.approx((s["lo"], s["hi"]), abs=1e-12)


def _coverage(n: int, reps: int, seed: int, theta: float = 0.5) -> tuple[float, float]:
    """Share of `reps` synthetic studies whose 95% interval for mean(x)/mean(y) holds the true ratio
    θ: Fieller's, and a percentile bootstrap of the ratio over seeds (500 resamples). Per seed the
    oracle's gain y ~ N(0.2, 0.1²) and the method's x = θ·y + N(0, 0.05²): E[x]/E[y] = θ exactly,
    as with credit efficiency E on n paired seeds."""
    import numpy as np
    rng = np.random.default_rng(seed)
    fie = boot = 0
    for _ in range(reps):
        y = rng.normal(0.2, 0.1, n)
        x = theta * y + rng.normal(0.0, 0.05, n)
        lo, hi = paired.fieller(list(x), list(y))
        fie += lo <= theta <= hi
        ix = rng.integers(0, n, (500, n))
        den = y[ix].sum(1)
        r = np.sort(x[ix].sum(1)[den != 0] / den[den != 0])
        boot += r[int(0.025 * (len(r) - 1))] <= theta <= r[int(0.975 * (len(r) - 1))]
    return fie / reps, boot / reps


@pytest.mark.parametrize("n", [6, 10])
def test_fieller_interval_covers_a_known_ratio_at_small_n(n):
    """At the studies' n the Fieller interval holds its 95% level (within the Monte Carlo error of
    2,000 studies, SE 0.5 points); the percentile bootstrap of the same ratio covers less."""
    fie, boot = _coverage(n, 2000, seed=n)
    assert 0.93 <= fie <= 0.97, fie
    assert boot < fie - 0.02, (boot, fie)


def test_fieller_interval_is_unbounded_when_the_denominator_is_not_clearly_away_from_zero():
    lo, hi = paired.fieller([0.1, 0.2, -0.1, 0.05], [0.05, -0.08, 0.1, -0.02])
    assert lo == float("-inf") and hi == float("inf")
    lo, hi = paired.fieller([0.11, 0.09, 0.1, 0.12, 0.08], [0.2, 0.21, 0.19, 0.2, 0.2])
    assert lo < 0.5 < hi and hi - lo < 0.3
