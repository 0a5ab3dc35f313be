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

An average over benchmarks (the paper's headline) is stratified, `stratified`: each benchmark e
has its own paired differences d_e (its own seeds; a seed index means nothing across benchmarks,
so no pairing across them is assumed), and

    D̄ = (1/E) Σ_e mean(d_e)

with a 95% CI from the stratified bootstrap (each benchmark's differences resampled on their own)
and the stratified sign-flip p (the signs flipped independently in every benchmark; exact over the
2^N patterns for N = Σ n_e ≤ 16 seeds in all, else `n_random` random ones).
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


def stratified(strata: list[dict], n_boot: int = 10_000, n_random: int = 100_000, seed: int = 0,
               level: float = 0.95) -> dict:
    """The mean over strata (benchmarks) of each stratum's mean paired difference, with its stratified
    bootstrap CI and stratified sign-flip p. `strata`: per benchmark, `paired(a, b)`'s output (its
    "d"); a stratum with no pair makes the average undefined (n = 0). n is the seeds in all; "n_by"
    the per-stratum counts, shown by `fmt` as n=10+4+4."""
    ds = [s.get("d", []) for s in strata]
    out = {"n": sum(map(len, ds)) if ds and all(ds) else 0, "n_by": [len(d) for d in ds]}
    if not out["n"]:
        out["mean"] = float("nan")
        return out
    stat = lambda groups: sum(sum(g) / len(g) for g in groups) / len(groups)  # noqa: E731
    out["mean"] = stat(ds)
    if all(len(d) >= 2 for d in ds):
        rng = random.Random(seed)
        means = sorted(stat([[d[rng.randrange(len(d))] for _ in d] for d in ds]) for _ in range(n_boot))
        out["lo"] = means[int(math.floor((1 - level) / 2 * n_boot))]
        out["hi"] = means[min(n_boot - 1, int(math.ceil((1 + level) / 2 * n_boot)) - 1)]
    if out["n"] >= 2:
        obs = abs(out["mean"]) - 1e-12                 # ties count as extreme, as in sign_flip_p
        flat = [(i, x) for i, d in enumerate(ds) for x in d]
        w = [1 / (len(ds) * len(ds[i])) for i, _ in flat]   # D̄ = Σ w_j x_j
        wx = [wj * x for wj, (_, x) in zip(w, flat)]
        if out["n"] <= 16:
            hits = sum(abs(sum(sg * v for sg, v in zip(signs, wx))) >= obs
                       for signs in itertools.product((1, -1), repeat=out["n"]))
            out["p"] = hits / 2 ** out["n"]
        else:
            rng = random.Random(seed)
            hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in wx)) >= obs for _ in range(n_random))
            out["p"] = (hits + 1) / (n_random + 1)
    return out


def fmt(s: dict, scale: float = 1.0, digits: int = 1, sign: bool = False) -> str:
    """'12.3 [8.1, 16.0] (n=10)' — or 'x (n = 1, no spread)', or '–' with no values."""
    if not s.get("n"):
        return "–"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    m = f.format(scale * s["mean"])
    if s["n"] == 1:
        return f"{m} (n = 1, no spread)"
    n = "+".join(map(str, s["n_by"])) if len(s.get("n_by", [])) > 1 else s["n"]
    if "lo" not in s:                              # a stratum with one seed: a mean without a band
        return f"{m} (n={n}, no spread)"
    return f"{m} [{f.format(scale * s['lo'])}, {f.format(scale * s['hi'])}] (n={n})"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
