"""bench/paired.py — paired-seed statistics for method comparisons.

A comparison pairs runs by seed: for seed s every method starts from the same warm start and the
same first rollouts (same task and sampling seeds), so the per-seed difference

    d_s = metric(method, s) − metric(GRPO, s)

removes what the seed does to both. Reported for the n seeds where both runs exist:
  * the mean d̄ with a 95% bootstrap CI: resample the n differences with replacement
    (`n_boot` = 10,000 times, fixed seed), take the 2.5th and 97.5th percentiles of the means;
  * an exact sign-flip (paired permutation) p-value, two-sided: under H0 (no difference) each d_s
    is as likely to be −d_s, so p = share of the 2^n sign patterns whose |mean| ≥ |d̄| (all
    patterns for n ≤ 16, else `n_random` random ones). With n = 3 the smallest possible p is 0.25,
    with n = 5 0.0625, with n = 10 0.002: a study that wants p < 0.05 needs n ≥ 6.
A single seed has no spread: it is shown as "n = 1, no spread", never as "± 0.0".
Leaves out: corrections for multiple comparisons (each method is compared to GRPO on its own).
"""
from __future__ import annotations

import itertools
import math
import random


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def bootstrap_ci(xs: list[float], n_boot: int = 10_000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `xs` (n ≥ 2)."""
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    lo_i = int(math.floor((1 - level) / 2 * n_boot))
    hi_i = min(n_boot - 1, int(math.ceil((1 + level) / 2 * n_boot)) - 1)
    return means[lo_i], means[hi_i]


def sign_flip_p(d: list[float], n_random: int = 100_000, seed: int = 0) -> float:
    """Two-sided p of the paired sign-flip test: exact over all 2^n patterns for n ≤ 16."""
    n = len(d)
    obs = abs(sum(d)) - 1e-12                      # ties (|sum| equal) count as extreme
    if n <= 16:
        hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= obs
                   for signs in itertools.product((1, -1), repeat=n))
        return hits / 2 ** n
    rng = random.Random(seed)
    hits = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= obs for _ in range(n_random))
    return (hits + 1) / (n_random + 1)


def summary(xs: list[float]) -> dict:
    """n, mean and (n ≥ 2) the 95% bootstrap CI of a list of values (per-seed metrics or d_s)."""
    out = {"n": len(xs), "mean": mean(xs) if xs else float("nan")}
    if len(xs) >= 2:
        out["lo"], out["hi"] = bootstrap_ci(xs)
    return out


def paired(a: dict, b: dict) -> dict:
    """a, b: {seed: metric}. The paired difference a − b over the seeds both have: n, mean, CI, p."""
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    out = summary(d)
    out["seeds"], out["d"] = seeds, d
    if len(d) >= 2:
        out["p"] = sign_flip_p(d)
    return out


def fmt(s: dict, scale: float = 1.0, digits: int = 1, sign: bool = False) -> str:
    """'12.3 [8.1, 16.0] (n=10)' — or 'x (n = 1, no spread)', or '–' with no values."""
    if not s.get("n"):
        return "–"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    m = f.format(scale * s["mean"])
    if s["n"] == 1:
        return f"{m} (n = 1, no spread)"
    return f"{m} [{f.format(scale * s['lo'])}, {f.format(scale * s['hi'])}] (n={s['n']})"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
