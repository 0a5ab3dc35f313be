"""bench/benchmark_gradient.py — the gradient ladder on the benchmarks: how much signal each method's
batch policy gradient carries, and how close its direction comes to a Monte Carlo reference, at a
fixed policy (no optimizer). Writes results/benchmark_gradient/benchmark_gradient.{md,csv}.

    python bench/benchmark_gradient.py --env alfworld --policy P --ref-k 2 --ref-batches 48 --repeats 60
    python bench/benchmark_gradient.py --env webshop --ref-batches 8 --repeats 4

Batch b of every arm plays the same tasks and rollouts (seeded by b alone), so arms are paired per
batch. Kept per batch under --cache (resumable; two sittings side by side share the work: a batch
is claimed under a file lock, csv rows merged under another).

Statistics: one batch's gradient is almost all sampling noise here (two reference batches have
cosine ≈ 0), so they come from unbiased inner products of batches with different indices (Gram
matrix of every kept gradient; E[ĝ_a · ĝ_b] = E ĝ · E ĝ for independent a, b):
    U_m = mean_{a≠b} ĝ_a·ĝ_b = |E ĝ|²,  M_m = mean_a |ĝ_a|²,  snr_m = U_m / (M_m − U_m)  (n batches: × n)
    align_m = mean_{a≠b} ĝ_m,a·ĝ*_b / √(U_m U_*)     cos(E ĝ_m, g*): the direction followed on average
    cosine_m = mean_a (ĝ_m,a · ḡ*_{−a}) / (|ĝ_m,a| √U_*)  one batch's cosine with the noise-free g*
SEs by the jackknife over batch indices; snr × GRPO paired on the same indices. A method whose
snr is r× GRPO's is worth r GRPO batches per batch (in direction, at align ≈ 1).

The reference ĝ* (methods/vine.py): (1/N) Σ_turns w_t·Â_t ∇log π(a_t|s_t), Â_t = V̂(s_{t+1}) −
V̂(s_t) from --ref-k continuations per state, on --ref-turns turns per trajectory drawn uniformly
(w_t = T/m; 0 = every turn): unbiased for the policy gradient of the batch's token-mean objective,
with no judge, heuristic or truth. Each batch is computed from the two halves of its continuations
(ĝ* = (ĝ_1 + ĝ_2)/2); mc = |ĝ_1 − ĝ_2|²/4 is unbiased for the continuations' share of ĝ*'s noise,
which falls as 1/K, so snr at any K' follows: snr(K') = U_* / (M_* − U_* − mc + mc·K/K'), and
K' → ∞ is the snr of credit by exact per-turn advantages A^π(s_t, a_t), what credit methods estimate.
Tokens: generated policy tokens per batch (rollouts + continuations), judge tokens apart (policy ids).

Default policies: the pinned warm start of results/compare/ and, for ALFWorld, results/checkpoints/
alfworld-grpo-s0-u25 (`train.py --env alfworld --method grpo --seed 0 --iters 25` from it).
Leaves out: exact credit (keydoor only: bench/credit_gradient.py); K' > K and K' → ∞ are
extrapolations of the measured 1/K law, not runs.
"""
from __future__ import annotations

import argparse
import csv
import fcntl
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import credit_gradient as cg  # noqa: E402

WARM = {"alfworld": "results/compare/warmstarts/tiny-alfworld-0355c899bead",
        "webshop": "results/compare/warmstarts/tiny-webshop-25327713f9b4",
        "searchqa": "results/compare/warmstarts/tiny-searchqa-06e2d5e41565"}
POLICIES = {"alfworld": [WARM["alfworld"], "results/checkpoints/alfworld-grpo-s0-u25"]}
METHODS = ["grpo", "grpo-matched", "prover", "prover-plus", "prover-plus:lam=3,verify_k=4", "prover-plus:lam=3,trust_judge=0.25",
           "gigpo", "spo-chain", "vine:vine_k=1,vine_turns=2"]
COLUMNS = ["env", "policy", "method", "tokens", "judge_tokens", "cosine", "cosine_se", "snr", "snr_se", "align", "align_se",
           "snr_vs_grpo", "snr_vs_grpo_se", "batches", "ref_batches", "ref_k", "ref_turns", "tasks", "group",
           "snr_exact", "snr_exact_se", "exact_vs_grpo", "exact_vs_grpo_se", "mc_share", "mc_share_se"]
KEY = ("env", "policy", "method")
JUDGE = ("tokens/judge",)


def load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def key(r: dict) -> tuple:
    return tuple(str(r[k]) for k in KEY)


def merge(path: str, new: list[dict]) -> None:
    """Replace the rows of `new`'s keys in the csv, under an exclusive lock (a second sitting may be
    writing too)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        keys = {key(r) for r in new}
        rows = [r for r in load(path) if key(r) not in keys] + [{k: (f"{v:.5f}" if isinstance(v, float) else v)
                                                                   for k, v in r.items()} for r in new]
        order = {m: i for i, m in enumerate(METHODS)}
        rows.sort(key=lambda r: (r["env"], r["policy"] != WARM.get(r["env"]), r["policy"], order.get(r["method"], 99), r["method"]))
        tmp = path + ".tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, path)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def claimed(f: str, make, wait: bool) -> bool:
    """Batch file f exists when this returns True: made here by make() (→ the dict saved) under an
    exclusive lock on f.claim, so two sittings side by side never make the same batch (a killed
    sitting's lock goes with it); False if another sitting holds it and not `wait`."""
    if os.path.exists(f):
        return True
    import torch
    with open(f + ".claim", "w") as lk:
        try:
            fcntl.flock(lk, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        if not os.path.exists(f):
            torch.save(make(), f + ".tmp")
            os.replace(f + ".tmp", f)
    return True


def ref_batch(t, arm: str, b: int):
    """The reference's batch b — the methods' batch b (the same tasks and rollouts: paired): the
    Monte Carlo credit's gradient from each half of the K continuations, ĝ = (ĝ_1 + ĝ_2)/2 (Â is
    linear in the V̂s, so this is the K-continuation gradient), and mc = |ĝ_1 − ĝ_2|²/4: ĝ_1 − ĝ_2
    shares the rollouts, so it holds only the continuations' noise, and E|ĝ_1 − ĝ_2|² = 4 tr Σ_K
    (each half has twice the K-average's covariance Σ_K): mc is unbiased for the part of ĝ's noise
    that more continuations would remove (∝ 1/K). → (ĝ, mc, generated policy tokens)."""
    from methods import vine
    run = t.run
    before = cg.generated(run)
    groups, _ = cg.sample(t, arm, b, run)
    cfg = run.cfg
    cr = vine.batch_credit(groups, run)
    g1, g2 = (cg.flat_grad(t.model, groups, vine.advantages(groups, cr, cfg, lambda c, h=h: c.halves[h]), t.tok.pad_token_id,
                           cfg.temperature) for h in (0, 1))
    return (g1 + g2) / 2, float(((g1.double() - g2.double()) ** 2).sum() / 4), cg.generated(run) - before


def moments(gram, ix: list[int]) -> tuple[float, float]:
    """(U, M) of the batches `ix`: U = mean_{a≠b} ĝ_a·ĝ_b (unbiased |E ĝ|²), M = mean_a |ĝ_a|²."""
    sub = gram[ix][:, ix]
    k = len(ix)
    return float((sub.sum() - sub.diagonal().sum()) / (k * (k - 1))), float(sub.diagonal().mean())


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


def drop(ix: list[int], j: int) -> list[int]:
    return [x for k, x in enumerate(ix) if k != j]


def stats(gram, idx: list[int], ref: list[int], mc=None) -> dict:
    """snr, align and cosine of one arm's batches (`idx`, rows of the Gram matrix) against the
    reference's (`ref`), from unbiased inner products (module docstring)."""
    U, M = moments(gram, idx)
    Ur, _ = moments(gram, ref)
    cross = gram[idx][:, ref]
    # batch k of the arm and batch k of the reference share their rollouts (and are one batch for
    # the reference's own row): only pairs of different batch indices are independent
    keep = cross.new_ones(cross.shape)
    for k in range(min(len(idx), len(ref))):
        keep[k, k] = 0
    C = float((cross * keep).sum() / keep.sum())
    per = (cross * keep).sum(1) / keep.sum(1)
    root = math.sqrt(Ur) if Ur > 0 else float("nan")
    norm = gram[idx][:, idx].diagonal().sqrt()
    # a batch whose gradient is 0 (every group one outcome, no format penalty) points nowhere: cosine 0
    each = per / norm.clamp_min(1e-300)
    each[norm == 0] = 0.0
    cosine = float(each.mean()) / root
    align = C / math.sqrt(U * Ur) if U > 0 and Ur > 0 else float("nan")
    out = {"snr": snr_of(U, M), "align": align, "cosine": cosine}
    if mc is not None:              # the reference: its snr with the continuations' noise taken out (K → ∞)
        m = sum(mc[i] for i in idx) / len(idx)
        out["snr_exact"] = snr_of(U, M - m)
        out["mc_share"] = m / (M - U) if M > U else float("nan")
    return out


def jackknife(gram, idx: list[int], ref: list[int], mc=None) -> dict:
    """Leave-one-batch-index-out SEs of `stats` (batch j of the arm and batch j of the reference out
    together). `mc`: {row: the reference batch's continuation noise}, for the reference's own row."""
    full = stats(gram, idx, ref, mc)
    outs = [stats(gram, drop(idx, j), drop(ref, j), mc) for j in range(min(len(idx), len(ref)))]
    return {**full, **{k + "_se": jk_se([o[k] for o in outs]) for k in full}}


def exact_snr(gram, ix: list[int], mc: dict) -> float:
    U, M = moments(gram, ix)
    return snr_of(U, M - sum(mc[i] for i in ix) / len(ix))


def ratio_se(gram, idx: list[int], base: list[int], num=None) -> float:
    """Jackknife SE of num(idx) / snr(base) over batch indices, num = the snr by default (batch j of
    both out together: every arm's batch j shares its rollouts, so the ratio is paired)."""
    num = num or (lambda ix: snr_of(*moments(gram, ix)))
    vals = []
    for j in range(min(len(idx), len(base))):
        b = snr_of(*moments(gram, drop(base, j)))
        if b > 0:
            vals.append(num(drop(idx, j)) / b)
    return jk_se(vals)


def report(path_csv: str, path_md: str) -> None:
    rows = load(path_csv)
    lines = ["# The gradient ladder on the benchmarks", "",
             "Written by `python bench/benchmark_gradient.py` (each sitting's command and wall time in results/LOG.md). "
             "Reference g*: the Monte Carlo credit (methods/vine.py), `ref K` continuations per state on `ref turns` turns "
             "per trajectory (weighted T/m), `g* batches` batches. From unbiased inner products of independent batches "
             "(bench/benchmark_gradient.py says how): **cosine** = one batch's cosine with the noise-free g*; **snr** = "
             "|E ĝ|² / E|ĝ − E ĝ|² of one batch; **align** = cos(E ĝ_m, g*), the direction the method follows on average; "
             "**snr × GRPO**: one batch of the method is worth this many GRPO batches (in signal, at align ≈ 1), against "
             "GRPO on the same batch indices (the same tasks and first samples: paired). ± jackknife SE over batch indices; "
             "'unresolved': the snr it rests on (GRPO's, or the reference's for cosine and align) is not 2 SE above 0. tokens: generated policy tokens per batch (rollouts + continuations), "
             "judge tokens beside them, both in the policy tokenizer's ids; the built-in judge ran for the judged methods (its hit rate "
             "is not defined here: the benchmarks label no pivotal turn). "
             "Each batch: `tasks` tasks × G rollouts; batches: the method's.", "",
             "| env | policy | method | policy tokens / batch | judge tokens / batch | snr | snr × GRPO | cosine | align | batches | g* batches | ref K | ref turns |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    def resolved(r) -> bool:            # a row's snr is > 2 SE above 0: its direction can be compared
        return float(r["snr"]) > 2 * float(r["snr_se"])
    for r in rows:
        f = {k: float(r.get(k) or "nan") for k in ("tokens", "judge_tokens", "cosine", "cosine_se", "snr", "snr_se", "align",
                                                  "align_se", "snr_vs_grpo", "snr_vs_grpo_se")}
        same = [x for x in rows if (x["env"], x["policy"]) == (r["env"], r["policy"])]
        ref = next((x for x in same if x["method"] == f"vine:vine_k={r['ref_k']},vine_turns={r['ref_turns']}"), None)
        grpo = next((x for x in same if x["method"] == "grpo"), None)
        ok_ref = ref is not None and resolved(ref)
        ratio = (f"{f['snr_vs_grpo']:.2f} ± {f['snr_vs_grpo_se']:.2f}" if grpo is not None and resolved(grpo) else "unresolved")
        lines.append(f"| {r['env']} | {os.path.basename(r['policy'])} | {r['method']} | {f['tokens']:.0f} | {f['judge_tokens']:.0f} | "
                     f"{f['snr']:.4f} ± {f['snr_se']:.4f} | {ratio} | "
                     + (f"{f['cosine']:.3f} ± {f['cosine_se']:.3f} | {f['align']:.2f} ± {f['align_se']:.2f}" if ok_ref
                        else "unresolved | unresolved")
                     + f" | {r['batches']} | {r['ref_batches']} | {r['ref_k']} | {r['ref_turns']} |")
    lines += exact_section(rows)
    open(path_md, "w").write("\n".join(lines) + "\n")


def at_k(snr: float, share: float, K: int, k2: float) -> float:
    """The reference's snr with K' = k2 continuations per state, from its snr and the continuations'
    share of its noise at K (the share scales as K/K'; k2 = inf: exact per-turn advantages)."""
    return snr / (1 - share + share * (K / k2 if math.isfinite(k2) else 0.0))


def exact_section(rows: list[dict]) -> list[str]:
    """Per policy whose reference kept its halves: the Monte Carlo credit at K' continuations —
    snr, × GRPO, policy tokens per batch, × GRPO — measured at K, extrapolated by the 1/K law."""
    out = []
    for r in rows:
        if not r.get("snr_exact"):
            continue
        grpo = next((x for x in rows if (x["env"], x["policy"], x["method"]) == (r["env"], r["policy"], "grpo")), None)
        if grpo is None:
            continue
        K, snr, share, g_snr = int(r["ref_k"]), float(r["snr"]), float(r["mc_share"]), float(grpo["snr"])
        ok = g_snr > 2 * float(grpo["snr_se"])          # a ratio to GRPO needs GRPO's snr resolved
        x_grpo = (f"{float(r['exact_vs_grpo']):.2f} ± {float(r['exact_vs_grpo_se']):.2f}" if ok else "unresolved")
        roll = float(grpo["tokens"])                       # the same rollouts: the continuations are the rest
        cont = float(r["tokens"]) - roll
        if not out:
            out += ["", "## What per-turn credit could add: the Monte Carlo credit at K' continuations", "",
                    "The reference's batches split their continuations in two halves; their difference measures the "
                    "continuations' share of its noise (`mc share`, ± jackknife SE), which falls as 1/K'. So its snr at any K' "
                    "follows from the measured one (`measured` marks K' = K; the others are that 1/K law, not runs); K' = ∞ is "
                    "credit by the exact per-turn advantage A^π(s_t, a_t), the quantity every per-turn credit method estimates. × GRPO: over GRPO's "
                    "snr on the same batches; tokens × GRPO: policy tokens per batch (rollouts + continuations) over GRPO's. "
                    "Averaging n GRPO batches multiplies its snr by n, so credit pays per token only where snr × GRPO "
                    "exceeds tokens × GRPO.", ""]
        out += [f"**{r['env']}, {os.path.basename(r['policy'])}** (reference: K = {K}, "
                f"{'every turn' if r['ref_turns'] == '0' else r['ref_turns'] + ' turns per trajectory'}, {r['ref_batches']} batches; "
                f"mc share {share:.2f} ± {float(r['mc_share_se']):.2f}; GRPO snr {g_snr:.4f} ± {float(grpo['snr_se']):.4f}; "
                f"exact per-turn advantages × GRPO {x_grpo}):", "",
                "| K' | snr | × GRPO | policy tokens / batch | tokens × GRPO |", "|---|---|---|---|---|"]
        for k2 in (1, 2, 4, 8, math.inf):
            v = at_k(snr, share, K, k2)
            tok = roll + cont * k2 / K if math.isfinite(k2) else math.inf
            out.append(f"| {k2}{' (measured)' if k2 == K else ''} | {v:.4f} | {f'{v / g_snr:.2f}' if ok else 'unresolved'} | "
                       f"{tok:.0f} | {tok / roll:.1f} |" if math.isfinite(k2) else
                       f"| ∞ | {v:.4f} ± {float(r['snr_exact_se']):.4f} | {x_grpo} | – | – |")
        out.append("")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--env", default="alfworld", choices=sorted(WARM))
    ap.add_argument("--policy", nargs="+", default=None, help="model folders (default: the env's warm start, and ALFWorld's checkpoint)")
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--repeats", type=int, default=24, help="batches per method")
    ap.add_argument("--ref-batches", type=int, default=48, help="batches of Monte Carlo credit behind g*")
    ap.add_argument("--ref-k", type=int, default=2, help="continuations per state in g*'s credit (even: it is split in halves)")
    ap.add_argument("--ref-turns", type=int, default=0, help="turns per trajectory in g*'s credit (0 = every turn)")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "prover", "benchmark_gradient"),
                    help="where each batch's gradient is kept (resuming reuses them)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "benchmark_gradient", "benchmark_gradient"))
    ap.add_argument("--report-only", action="store_true", help="rewrite the md from the csv")
    args = ap.parse_args(argv)
    if args.report_only:
        report(args.out + ".csv", args.out + ".md")
        return
    import methods
    bad = [m for m in args.methods if cg.arm_settings(m)[0] not in methods.METHODS or methods.METHODS[cg.arm_settings(m)[0]].lab]
    if bad:
        raise SystemExit(f"benchmark_gradient: {bad[0]} is not a method for the benchmarks (lab-only or unknown)")
    if "grpo" not in args.methods:
        raise SystemExit("benchmark_gradient: --methods needs grpo (every row's snr is compared with it)")
    if args.ref_k < 2 or args.ref_k % 2:
        raise SystemExit(f"benchmark_gradient: --ref-k {args.ref_k}: the reference splits its continuations in two halves; use an even K ≥ 2")
    if min(args.repeats, args.ref_batches) < 3:
        raise SystemExit("benchmark_gradient: --repeats and --ref-batches need >= 3 (unbiased pairs and a jackknife)")
    policies = args.policy or POLICIES.get(args.env, [WARM[args.env]])
    for p in policies:
        if not os.path.exists(os.path.join(ROOT, p, "config.json")):
            raise SystemExit(f"benchmark_gradient: --policy {p}: no model folder (config.json)")
    import torch
    from tqdm import tqdm
    torch.set_num_threads(1)
    ref_arm = f"vine:vine_k={args.ref_k},vine_turns={args.ref_turns}"
    for pol in policies:
        name = os.path.relpath(os.path.join(ROOT, pol), ROOT)
        folder = os.path.join(args.cache, args.env, slug(name), f"t{args.tasks}g{args.group}")
        tr = None

        def trainer():
            nonlocal tr
            if tr is None:                 # set up only when a batch is missing
                tr = cg.fixed_policy(["--env", args.env, "--model", os.path.join(ROOT, pol), "--tasks-per-iter", str(args.tasks),
                                      "--group-size", str(args.group)], "benchmark_gradient-")
            return tr

        def compute(arm: str, b: int) -> dict:
            t = trainer()
            j0 = sum(t.run.agent.counter[k] for k in JUDGE)
            if arm == ref_arm:
                g, mc, tok = ref_batch(t, arm, b)
                extra = {"mc": mc}
            else:
                g, tok = cg.batch(t, arm, b, t.run)
                extra = {}
            judge = sum(t.run.agent.counter[k] for k in JUDGE) - j0
            return {"grad": g.to(torch.float32), "tokens": tok - judge, "judge_tokens": judge, **extra}

        def batches(arm: str, n: int) -> list[dict]:
            d = os.path.join(folder, slug(arm))
            os.makedirs(d, exist_ok=True)
            files = [os.path.join(d, f"{b}.pt") for b in range(n)]
            waiting = []
            for b in tqdm(range(n), desc=f"{args.env} {os.path.basename(name)} {arm}", mininterval=10):
                if not claimed(files[b], lambda: compute(arm, b), wait=False):
                    waiting.append(b)
            for b in waiting:              # held by another sitting: wait for it (or do it, if that one died)
                claimed(files[b], lambda: compute(arm, b), wait=True)
            return [torch.load(f) for f in files]

        t0 = time.time()
        ref = batches(ref_arm, args.ref_batches)
        arms = {ref_arm: ref, **{m: batches(m, args.repeats) for m in args.methods if m != ref_arm}}   # the reference has a row too
        allg = ref + [x for m, xs in arms.items() if m != ref_arm for x in xs]
        G = torch.stack([x["grad"] for x in allg]).to(torch.float64)
        gram = G @ G.T
        pos, at = {}, len(ref)
        for m, xs in arms.items():
            if m == ref_arm:
                pos[m] = list(range(len(ref)))
            else:
                pos[m] = list(range(at, at + len(xs)))
                at += len(xs)
        refi = list(range(len(ref)))
        mc = {i: x["mc"] for i, x in enumerate(ref)} if all("mc" in x for x in ref) else None
        rows = []
        for m, xs in arms.items():
            st = jackknife(gram, pos[m], refi, mc if m == ref_arm else None)
            rows.append({"env": args.env, "policy": name, "method": m, "tokens": sum(x["tokens"] for x in xs) / len(xs),
                         "judge_tokens": sum(x["judge_tokens"] for x in xs) / len(xs), **st, "batches": len(xs),
                         "ref_batches": args.ref_batches, "ref_k": args.ref_k, "ref_turns": args.ref_turns,
                         "tasks": args.tasks, "group": args.group})
        snr_grpo = next(r["snr"] for r in rows if r["method"] == "grpo")
        for r in rows:
            r["snr_vs_grpo"] = r["snr"] / snr_grpo if snr_grpo > 0 else float("nan")
            r["snr_vs_grpo_se"] = ratio_se(gram, pos[r["method"]], pos["grpo"])
            if "snr_exact" in r:
                r["exact_vs_grpo"] = r["snr_exact"] / snr_grpo if snr_grpo > 0 else float("nan")
                r["exact_vs_grpo_se"] = ratio_se(gram, pos[r["method"]], pos["grpo"], lambda ix: exact_snr(gram, ix, mc))
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                   if k in ("method", "tokens", "cosine", "snr", "align", "snr_vs_grpo")})
        merge(args.out + ".csv", rows)
        print(f"{args.env} {name}: {time.time() - t0:.0f} s")
    report(args.out + ".csv", args.out + ".md")
    print(f"wrote {args.out}.md and {args.out}.csv")


if __name__ == "__main__":
    main()
