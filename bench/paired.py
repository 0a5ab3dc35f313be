"""bench/paired.py — paired-seed statistics for method comparisons.

Runs are paired by seed: for seed s every method starts from the same warm start and the same first
rollouts, so the per-seed difference d_s = metric(method, s) − metric(GRPO, s) removes what the seed
does to both. For the n seeds where both runs exist (`paired`, `summary`):
  * the mean d̄ and its 95% Student-t CI, d̄ ± t_{n−1, 0.975} · s/√n (scipy.stats.t). It holds its
    level at a study's small n, where the percentile bootstrap of the mean does not (at n = 4 it
    covers ~79%: tests/test_lab.py measures both); `bootstrap_ci` (scipy.stats.bootstrap, percentile,
    fixed seed) stays for a caller that wants it;
  * the sign-flip (paired permutation) p, two-sided (scipy.stats.permutation_test, one sample,
    permutation_type="samples"): under H0 each d_s is as likely as −d_s, and p is the share of the
    2^n sign patterns whose mean is at least as far from 0 as d̄ (scipy's "twice the smaller tail"
    is that share, the null being symmetric; sums within 1e-9 · Σ|d_s| of each other are ties).
    Exact for n ≤ 20; beyond, `n_random` random patterns (each tail (hits + 1)/(n_random + 1)).
    The smallest exact p is 2/2^n: 0.25 at n = 3, 0.0625 at n = 5, 0.002 at n = 10, so p < 0.05
    needs n ≥ 6.
A single seed has no spread: shown as "n = 1, no spread", never as "± 0.0".

An average over benchmarks (`stratified`) keeps each benchmark e's own seeds (a seed index means
nothing across benchmarks): D̄ = (1/E) Σ_e mean(d_e), with a 95% Welch t CI
D̄ ± t_ν · √(Σ_e v_e)/E, v_e = s_e²/n_e, ν = (Σ_e v_e)² / Σ_e v_e²/(n_e − 1) (Welch–Satterthwaite),
and the stratified sign-flip p: D̄ = Σ_j w_j x_j over all N = Σ n_e differences, w_j = 1/(E·n_e),
each sign flipped independently (exact for N ≤ 20).
Multiplicity: `holm` (Holm's step-down, written here: scipy has no Holm) adjusts the p of one family,
`holm_family` a dict of tests; each table's generator names its family.

A ratio of means over the same seeds (credit efficiency E = mean(m − g) / mean(o − g)): `fieller`,
the Fieller interval for mean(x)/mean(y) of paired samples — the θ with
(x̄ − θȳ)² ≤ t²_{n−1} · (s_xx − 2θ s_xy + θ² s_yy)/n — exact under bivariate normality at any n
(a percentile bootstrap of a ratio under-covers at n = 6–10: tests/test_paired.py measures both);
unbounded when ȳ is not clearly away from 0 (then it says so, never a finite band).

Leaves out: one-sided intervals (a planned one-sided test passes `alternative="greater"` to
`paired` / `stratified`; the tables test any difference), CIs from the permutation distribution, corrections
other than Holm, and any pairing across benchmarks.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

EXACT_MAX = 20          # sign-flip tests are exact (all 2^n patterns) up to this many differences
_BATCH = 1 << 16        # patterns per batch in permutation_test: memory O(_BATCH · n)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def bootstrap_ci(xs: list[float], n_boot: int = 10_000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `xs` (n ≥ 2), scipy.stats.bootstrap with a fixed seed."""
    res = stats.bootstrap((np.asarray(xs, dtype=float),), np.mean, n_resamples=n_boot, confidence_level=level,
                          method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t with `df` (possibly fractional: a Welch ν) degrees of freedom."""
    return float(stats.t.ppf(q, df))


def fieller(x: list[float], y: list[float], level: float = 0.95) -> tuple[float, float]:
    """Fieller's interval for mean(x) / mean(y) over paired samples (n ≥ 3): the θ solving
    a·θ² + b·θ + c ≤ 0 with a = ȳ² − q·s_yy, b = −2(x̄ȳ − q·s_xy), c = x̄² − q·s_xx, q = t²/n
    (s the sample (co)variances, t the Student-t quantile at n − 1). a > 0 (ȳ clearly away from 0)
    gives a finite interval; otherwise it is unbounded: (−inf, inf)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    c_xy = np.cov(x, y, ddof=1)
    q = t_quantile((1 + level) / 2, n - 1) ** 2 / n
    mx, my = float(x.mean()), float(y.mean())
    a = my * my - q * c_xy[1, 1]
    b = -2 * (mx * my - q * c_xy[0, 1])
    c = mx * mx - q * c_xy[0, 0]
    disc = b * b - 4 * a * c
    if a <= 0 or disc < 0:
        return -math.inf, math.inf
    r = math.sqrt(disc)
    return (-b - r) / (2 * a), (-b + r) / (2 * a)


def t_ci(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of the mean of `xs` (n ≥ 2): mean ± t_{n−1} · s/√n; (mean, mean) when s = 0."""
    m, se = mean(xs), float(stats.sem(xs))
    if not se > 0:
        return m, m
    lo, hi = stats.t.interval(level, len(xs) - 1, loc=m, scale=se)
    return float(lo), float(hi)


def _sign_flip(x: list[float], n_random: int, seed: int, alternative: str) -> float:
    """p of flipping each element's sign independently (scipy.stats.permutation_test, one sample).
    Statistic: Σ x_j / Σ |x_j| rounded to 9 decimals, so that sums equal on paper tie exactly in
    floats. scipy's own tolerance is relative to the observed value and misses a tie at 0: ratios
    1.025 (4×) and 0.95 (2×) against 1 sum to −4.4e-16 in floats, and would get p 0.8125, not 1."""
    x = np.asarray(x, dtype=float)
    scale = float(np.sum(np.abs(x))) or 1.0

    def statistic(y, axis=-1):
        return np.round(np.sum(y, axis=axis) / scale, 9)
    res = stats.permutation_test((x,), statistic, permutation_type="samples", vectorized=True,
                                 n_resamples=np.inf if len(x) <= EXACT_MAX else n_random, batch=_BATCH,
                                 alternative=alternative, rng=np.random.default_rng(seed))
    return float(res.pvalue)


def sign_flip_p(d: list[float], n_random: int = 100_000, seed: int = 0, alternative: str = "two-sided") -> float:
    """p of the paired sign-flip test on the differences `d` (statistic: their sum, equivalently the
    mean): exact over all 2^n patterns for n ≤ EXACT_MAX. alternative: "two-sided" (the callers'),
    "greater" or "less"."""
    return _sign_flip(d, n_random, seed, alternative)


def summary(xs: list[float]) -> dict:
    """n, mean and (n ≥ 2) the 95% t CI of a list of values (per-seed metrics or d_s)."""
    out = {"n": len(xs), "mean": mean(xs) if xs else float("nan")}
    if len(xs) >= 2:
        out["lo"], out["hi"] = t_ci(xs)
    return out


def paired(a: dict, b: dict, alternative: str = "two-sided") -> dict:
    """a, b: {seed: metric}. The paired difference a − b over the seeds both have: n, mean, CI, p
    (the sign-flip test's `alternative`: "two-sided", or "greater" for a planned one-sided a > b)."""
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    out = summary(d)
    out["seeds"], out["d"] = seeds, d
    if len(d) >= 2:
        out["p"] = sign_flip_p(d, alternative=alternative)
    return out


def stratified(strata: list[dict], n_boot: int = 10_000, n_random: int = 100_000, seed: int = 0,
               level: float = 0.95, alternative: str = "two-sided") -> dict:
    """The mean over strata (benchmarks) of each stratum's mean paired difference, with its Welch t
    CI and stratified sign-flip p (`n_boot`: unused, kept for callers). `strata`: per benchmark, `paired(a, b)`'s output (its
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
        # var(D̄) = Σ_e s_e²/n_e / E²; ν = (Σ v_e)² / Σ v_e²/(n_e − 1), v_e = s_e²/n_e (Welch–Satterthwaite)
        v = [sum((x - sum(d) / len(d)) ** 2 for x in d) / (len(d) - 1) / len(d) for d in ds]
        se = math.sqrt(sum(v)) / len(ds)
        if se > 0:
            nu = sum(v) ** 2 / sum(ve * ve / (len(d) - 1) for ve, d in zip(v, ds) if ve > 0)
            h = t_quantile((1 + level) / 2, nu) * se
        else:
            h = 0.0
        out["lo"], out["hi"] = out["mean"] - h, out["mean"] + h
    if out["n"] >= 2:
        wx = [x / (len(ds) * len(d)) for d in ds for x in d]      # D̄ = Σ_j w_j x_j
        out["p"] = _sign_flip(wx, n_random, seed, alternative)
    return out


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values of one family (one table, one question): the
    i-th smallest p becomes max_{j ≤ i} min(1, (m − j + 1)·p_(j)); returned in the input order.
    It controls the family-wise error rate at any dependence between the tests."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, run = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (m - rank) * ps[i]))
        out[i] = run
    return out


def holm_family(tests: dict) -> dict:
    """{name: paired()/stratified() output} of one family → {name: Holm-adjusted p}; the tests
    without a p (n < 2) are not members of the family."""
    names = [k for k, d in tests.items() if d and d.get("p") is not None]
    return dict(zip(names, holm([tests[k]["p"] for k in names])))


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
