"""bench/paired.py — paired-seed statistics for method comparisons.

A comparison pairs runs by seed: for seed s every method starts from the same warm start and the
same first rollouts (same task and sampling seeds), so the per-seed difference

    d_s = metric(method, s) − metric(GRPO, s)

removes what the seed does to both. Reported for the n seeds where both runs exist:
  * the mean d̄ with a 95% Student-t CI on the differences, d̄ ± t_{n−1, 0.975} · s/√n: it holds its
    level at the small n of a study (n = 4: the percentile bootstrap of the mean covers only ~79%,
    because it uses the plug-in spread and normal-like quantiles; tests/test_lab.py measures both
    on synthetic data). `bootstrap_ci` stays for a caller that wants it;
  * an exact sign-flip (paired permutation) p-value, two-sided: under H0 (no difference) each d_s
    is as likely to be −d_s, so p = share of the 2^n sign patterns whose |mean| ≥ |d̄| (all
    patterns for n ≤ 16, else `n_random` random ones). With n = 3 the smallest possible p is 0.25,
    with n = 5 0.0625, with n = 10 0.002: a study that wants p < 0.05 needs n ≥ 6.
A single seed has no spread: it is shown as "n = 1, no spread", never as "± 0.0".

An average over benchmarks (the paper's headline) is stratified, `stratified`: each benchmark e
has its own paired differences d_e (its own seeds; a seed index means nothing across benchmarks,
so no pairing across them is assumed), and

    D̄ = (1/E) Σ_e mean(d_e)

with a 95% Welch t CI, D̄ ± t_ν · √(Σ_e s_e²/n_e)/E, ν by Welch–Satterthwaite (each benchmark's
spread on its own)
and the stratified sign-flip p (the signs flipped independently in every benchmark; exact over the
2^N patterns for N = Σ n_e ≤ 16 seeds in all, else `n_random` random ones).
Multiplicity: `holm` adjusts the p-values of one family and `holm_family` a dict of tests; each
table's generator names its family and prints the adjusted p beside the raw one.
"""
from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    """Student's t quantile by bisection on its CDF
    (Simpson's rule on the density from 0, which is smooth; no scipy in requirements)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    pdf = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731

    def cdf(x: float, m: int = 400) -> float:
        h = x / m
        return 0.5 + h / 3 * (pdf(0) + pdf(x) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, m)))
    lo, hi = 0.0, 1.0
    while cdf(hi) < q:
        hi *= 2
    for _ in range(45):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2


def t_quantile(q: float, df: float) -> float:
    """The q-quantile (q > 0.5) of Student's t with `df` degrees of freedom (df rounded to 0.001:
    a Welch ν, cached)."""
    return _t_quantile(q, round(df, 3))


def t_ci(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of the mean of `xs` (n ≥ 2): mean ± t_{n−1} · s/√n."""
    n, m = len(xs), mean(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = t_quantile((1 + level) / 2, n - 1) * s / math.sqrt(n)
    return m - h, m + h


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
    """n, mean and (n ≥ 2) the 95% t CI of a list of values (per-seed metrics or d_s)."""
    out = {"n": len(xs), "mean": mean(xs) if xs else float("nan")}
    if len(xs) >= 2:
        out["lo"], out["hi"] = t_ci(xs)
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
