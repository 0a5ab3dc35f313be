"""bench/gram_stats.py — the gradient ladder's statistics, from the Gram matrix of kept batch gradients.

One batch's policy gradient ĝ is almost all sampling noise at this scale, so every statistic comes
from unbiased inner products of *different* batches (E[ĝ_a · ĝ_b] = E ĝ · E ĝ for independent a, b):
    U = mean_{a≠b} ĝ_a·ĝ_b = |E ĝ|²,   M = mean_a |ĝ_a|²,   snr = U / (M − U)     (of one batch)
    align = mean_{a≠b} ĝ_m,a·ĝ*_b / √(U_m U_*)      cos(E ĝ_m, g*): the direction followed on average
    cosine = mean_a (ĝ_m,a · ḡ*_{−a}) / (|ĝ_m,a| √U_*)   one batch's cosine with the noise-free g*
Batch b of every arm shares its tasks and first samples (paired), so a pair of arms' batches with the
same index is not independent and is left out of every cross term; a bootstrap sample that repeats a
batch leaves its copies out the same way.
    snr_jk        an arm's snr with the jackknife SE over every batch it has (and, given the reference's
                  continuation noise mc per batch, the snr with that noise taken out: K → ∞)
    direction_jk  align and cosine with jackknife SEs over every batch index either side uses
    paired_ratio  snr(num) / snr(den) on exactly the batch indices both have, its jackknife SE and a
                  95% BCa bootstrap interval over those indices (scipy.stats.bootstrap): a ratio with a
                  noisy denominator is skewed, so its interval is asymmetric
    resolved      the one resolution rule: an snr more than 2 SE above 0
Leaves out: the batches themselves (bench/benchmark_gradient.py makes and keeps them) and any
extrapolation in K (its report does that from mc).
"""
from __future__ import annotations

import math

def moments(gram, rows, ids=None) -> tuple[float, float]:
    """(U, M) of the batches at Gram rows `rows`: U = mean over pairs of *different* batches of
    ĝ_a·ĝ_b (unbiased for |E ĝ|²), M = mean_a |ĝ_a|². `ids`: each row's batch index (a bootstrap
    sample repeats batches: a batch paired with its copy is left out like the diagonal)."""
    import numpy as np
    rows = np.asarray(rows)
    ids = rows if ids is None else np.asarray(ids)
    sub = gram[np.ix_(rows, rows)]
    off = ids[:, None] != ids[None, :]
    return float(sub[off].sum() / off.sum()), float(np.diag(sub).mean())


def snr_of(U: float, M: float) -> float:
    """U / (M − U); no value where every gradient is 0 (M = U = 0: a tiny batch with one outcome)."""
    return U / (M - U) if M > U else float("nan") if M == 0 else float("inf")


def jk_se(vals: list[float]) -> float:
    """The jackknife SE from leave-one-out values (the non-finite ones dropped)."""
    vals = [v for v in vals if math.isfinite(v)]
    if len(vals) < 2:
        return float("nan")
    m = sum(vals) / len(vals)
    return math.sqrt((len(vals) - 1) / len(vals) * sum((v - m) ** 2 for v in vals))


def snr_jk(gram, rows: list[int], mc=None) -> tuple[float, float]:
    """An arm's snr and its jackknife SE over every batch the arm has. `mc` (row → the reference
    batch's continuation noise): the snr with that noise taken out (K → ∞)."""
    def f(rs):
        U, M = moments(gram, rs)
        return snr_of(U, M - (sum(mc[r] for r in rs) / len(rs) if mc is not None else 0.0))
    return f(rows), jk_se([f(rows[:j] + rows[j + 1:]) for j in range(len(rows))])


def direction(gram, arm: dict, ref: dict) -> dict:
    """align = cos(E ĝ_m, g*) and one batch's cosine with the noise-free g*, from the arm's batches
    {batch index: row} and the reference's: batch k of both share their rollouts (and are one batch
    for the reference's own row), so only pairs of different batch indices enter."""
    import numpy as np
    a_ids, r_ids = sorted(arm), sorted(ref)
    A, R = [arm[b] for b in a_ids], [ref[b] for b in r_ids]
    U, _ = moments(gram, A, a_ids)
    Ur, _ = moments(gram, R, r_ids)
    cross = gram[np.ix_(A, R)]
    keep = np.asarray(a_ids)[:, None] != np.asarray(r_ids)[None, :]
    C = float(cross[keep].sum() / keep.sum())
    per = (cross * keep).sum(1) / keep.sum(1)
    norm = np.sqrt(np.diag(gram)[A])
    # a batch whose gradient is 0 (every group one outcome, no format penalty) points nowhere: cosine 0
    each = np.where(norm > 0, per / np.where(norm > 0, norm, 1.0), 0.0)
    cosine = float(each.mean()) / math.sqrt(Ur) if Ur > 0 else float("nan")
    align = C / math.sqrt(U * Ur) if U > 0 and Ur > 0 else float("nan")
    return {"align": align, "cosine": cosine}


def direction_jk(gram, arm: dict, ref: dict) -> dict:
    """`direction` with jackknife SEs over every batch index either side uses (index j out of both)."""
    full = direction(gram, arm, ref)
    outs = [direction(gram, {b: r for b, r in arm.items() if b != j}, {b: r for b, r in ref.items() if b != j})
            for j in sorted(set(arm) | set(ref))]
    return {**full, **{k + "_se": jk_se([o[k] for o in outs]) for k in full}}


def paired_ratio(gram, num: dict, den: dict, mc=None, n_boot: int = 2000) -> dict:
    """snr(num) / snr(den) on exactly the batch indices both arms have (batch k of every arm plays
    the same tasks and first samples: paired), with its jackknife SE and a 95% BCa bootstrap
    interval over those indices (scipy.stats.bootstrap; a ratio is skewed where its denominator is
    noisy, so the interval is asymmetric, never ±). `mc`: the numerator is the K → ∞ snr."""
    import numpy as np
    from scipy import stats as sps
    ids = sorted(set(num) & set(den))

    def stat(sample) -> float:
        sample = [int(x) for x in sample]
        nr, dr = [num[b] for b in sample], [den[b] for b in sample]
        U, M = moments(gram, nr, sample)
        s_num = snr_of(U, M - (sum(mc[r] for r in nr) / len(nr) if mc is not None else 0.0))
        s_den = snr_of(*moments(gram, dr, sample))
        if not s_den > 0:               # the denominator crossed 0: the ratio is unbounded there
            return math.copysign(math.inf, s_num) if s_num == s_num and s_num != 0 else float("nan")
        return s_num / s_den
    out = {"ratio": stat(ids), "ratio_se": jk_se([stat(ids[:j] + ids[j + 1:]) for j in range(len(ids))]),
           "ratio_batches": len(ids), "ratio_lo": float("nan"), "ratio_hi": float("nan")}
    if len(ids) >= 3 and math.isfinite(out["ratio"]):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # a degenerate resample gives NaN; the interval says so
            ci = sps.bootstrap((np.asarray(ids),), stat, vectorized=False, method="BCa", n_resamples=n_boot,
                               rng=np.random.default_rng(0)).confidence_interval
        out["ratio_lo"], out["ratio_hi"] = float(ci.low), float(ci.high)
    return out


def resolved(x: float, se: float) -> bool:
    """The one resolution rule: an snr is resolved when it is more than 2 (jackknife) SE above 0.
    A ratio, align or cosine is shown only where every snr it divides by or quotes is resolved."""
    return math.isfinite(x) and math.isfinite(se) and x > 2 * se


