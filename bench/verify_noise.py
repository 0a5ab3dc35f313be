"""bench/verify_noise.py — how noisy is verification's Δ̂, and what do K and common random numbers change?

    python bench/verify_noise.py                       # K ∈ {2, 8, 32}, CRN off/on, 200 estimates each
    python bench/verify_noise.py --k 4 16 --n 100 --out /tmp

ProVer credits a judged segment when Δ̂ = SR(after) − SR(before) > 0 (verify.py), each side from K
continuations. This bench measures Δ̂'s spread against the analytic value for two segments of one
trajectory, so the reader sees both ways a noisy threshold goes wrong:

    pivotal   the turn that takes the key:      A_seg = (1 − q)(p_key − p_nokey)   (> 0)
    neutral   the turn after it (key already held): A_seg = 0
              (the scripted policy walks to the door from there, so V(before) = V(after) = p_key)

Setting (bench/adaptive_bias.py's): keydoor with 3 rooms, no distractors, p_key = 0.9, p_nokey = 0.1;
a scripted policy takes the key with probability q when offered. Per (segment, K, CRN) it calls
verify_options.estimate `--n` times with independent seeds and reports

    mean Δ̂, SD(Δ̂) over the estimates, and the SD that independent sides predict,
        SD_ind = sqrt(V_post(1 − V_post)/K + V_pre(1 − V_pre)/K)          (binary outcomes)
    credited  the share of estimates with Δ̂ > 0 (the paper's rule): for the pivotal segment the
              share it is credited at all, for the neutral one the share of false credit

Under --verify-crn continuation k of both sides shares its sampling seeds and the door's draw
(methods/verify_options.py), so Var(Δ̂) = (σ²_post + σ²_pre − 2 Cov)/K: the neutral segment's two sides then agree
on every continuation. Scripted policy, no model: seconds. Leaves out: the judge (the segments are
given) and a learned policy's own sampling noise. Writes NAME.{md,csv} under --out (default
results/verify_noise/verify_noise).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import adaptive_bias  # noqa: E402  (the scripted setting and its analytic values)
from methods import verify_options  # noqa: E402

SEGMENTS = ("pivotal", "neutral")


def analytic(q: float) -> dict:
    """V before / after each segment under the scripted policy (the step limit never binds)."""
    pk, pn = adaptive_bias.P_KEY, adaptive_bias.P_NOKEY
    v_room1 = q * pk + (1 - q) * pn
    return {"pivotal": (v_room1, pk), "neutral": (pk, pk)}


def measure(q: float, segment: str, K: int, crn: bool, n: int, setting=None) -> dict:
    agent, pool, tr, key_turn = setting or adaptive_bias.setting(q)
    turn = key_turn if segment == "pivotal" else key_turn + 1
    if turn >= len(tr.turns) - 1:
        raise RuntimeError("verify_noise: the trajectory is too short for the neutral segment")
    deltas = [verify_options.estimate(agent, pool, tr, turn, turn, K, 1.0, seed=5000 + s, crn=crn).delta for s in range(n)]
    v_pre, v_post = analytic(q)[segment]
    m = sum(deltas) / n
    sd = math.sqrt(sum((d - m) ** 2 for d in deltas) / (n - 1))
    return {"q": q, "segment": segment, "K": K, "crn": crn, "n": n, "true": v_post - v_pre, "mean": m,
            "mc_se": sd / math.sqrt(n), "sd": sd,
            "sd_independent": math.sqrt((v_post * (1 - v_post) + v_pre * (1 - v_pre)) / K),
            "credited": sum(d > 0 for d in deltas) / n}


def write(rows: list[dict], path: str, argv: list[str], secs: float) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    q = rows[0]["q"]
    lines = ["# Verification noise: Δ̂ against the analytic value, by K and CRN", "",
             "Command: `" + " ".join(["python", "bench/verify_noise.py", *argv]) + "`", "",
             f"keydoor rooms 3, p_key {adaptive_bias.P_KEY}, p_nokey {adaptive_bias.P_NOKEY}; scripted policy taking the key "
             f"with probability q = {q:g}; pivotal = the key turn (A_seg = (1 − q)(p_key − p_nokey)), neutral = the turn "
             f"after it (A_seg = 0). {rows[0]['n']} estimates per row, independent seeds. SD: over the estimates; "
             "SD if independent: sqrt(V_post(1 − V_post)/K + V_pre(1 − V_pre)/K); credited: share with Δ̂ > 0 (the paper's "
             f"rule). {secs:.0f} s on one core.", "",
             "| segment | K | CRN | A_seg | mean Δ̂ (± MC SE) | SD(Δ̂) | SD if independent | credited (Δ̂ > 0) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['segment']} | {r['K']} | {'on' if r['crn'] else 'off'} | {r['true']:.3f} | "
                     f"{r['mean']:+.3f} ± {r['mc_se']:.3f} | {r['sd']:.3f} | {r['sd_independent']:.3f} | {r['credited']:.0%} |")
    text = "\n".join(lines) + "\n"
    with open(path + ".md", "w") as f:
        f.write(text)
    return text


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description="verification's Δ̂ against the analytic value: K, CRN, false credit")
    p.add_argument("--k", nargs="+", type=int, default=[2, 8, 32], help="continuations per side")
    p.add_argument("--q", type=float, default=0.5, help="the scripted policy's key probability")
    p.add_argument("--n", type=int, default=200, help="estimates per (segment, K, CRN)")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "verify_noise"))
    p.add_argument("--name", default="verify_noise")
    args = p.parse_args(argv)
    if args.n < 2 or not 0 <= args.q < 1 or min(args.k) < 1:
        raise SystemExit("verify_noise: --n must be >= 2, --q in [0, 1) and every --k >= 1")
    t0 = time.time()
    setting = adaptive_bias.setting(args.q, pool_size=max(48, 2 * max(args.k)))
    jobs = [(seg, K, crn) for seg in SEGMENTS for K in args.k for crn in (False, True)]
    try:
        from tqdm import tqdm
        jobs_it = tqdm(jobs, desc="verify noise", unit="row")
    except ImportError:                      # tqdm is in requirements.txt; keep the bench usable without it
        jobs_it = jobs
    rows = [measure(args.q, seg, K, crn, args.n, setting) for seg, K, crn in jobs_it]
    print(write(rows, os.path.join(args.out, args.name), argv, time.time() - t0))


if __name__ == "__main__":
    main()
