"""bench/benchmark_gradient.py — the gradient ladder on the benchmarks: how close each method's batch
policy gradient comes to a Monte Carlo reference gradient, at a fixed policy (no optimizer).

    python bench/benchmark_gradient.py                                     # ALFWorld: warm start and GRPO after 25 updates
    python bench/benchmark_gradient.py --env webshop --ref-batches 8 --repeats 4
    python bench/benchmark_gradient.py --env alfworld --policy results/checkpoints/alfworld-grpo-s0-u25 --methods grpo vine:vine_k=1,vine_turns=2

Resumable: each batch's gradient is kept under --cache (batch b of an arm is seeded by b alone, so a
kept batch is the one this call would compute); two sittings may run side by side (csv merged under a lock).

Why not "cosine to a mean g*": at this scale one batch's gradient is almost all sampling noise
(ALFWorld's warm start: two independent reference batches have cosine ≈ 0.00), so no affordable
mean of batches is a usable direction. The statistics are instead unbiased inner products of
independent batches (the Gram matrix of every kept gradient; E[ĝ_a · ĝ_b] = E ĝ · E ĝ for a ≠ b):
    U_m = mean_{a≠b} ĝ_a·ĝ_b          = |E ĝ_m|²           M_m = mean_a |ĝ_a|²
    snr_m = U_m / (M_m − U_m)         signal over noise in one batch (averaging n batches: × n)
    align_m = mean_{a,b} ĝ_m,a·ĝ*_b / √(U_m U_*)   cos(E ĝ_m, g*): the direction a method learns on average
    cosine_m = mean_a (ĝ_m,a · ḡ*) / (|ĝ_m,a| √U_*)   one batch's cosine with g* (the noise-free one)
with ĝ* the reference arm's batches (independent of the methods': their batches use other seeds) and
SEs by the jackknife over batch indices. A method whose snr is r× GRPO's is worth r GRPO batches per
batch (in direction, at align ≈ 1); per token, r ÷ its token ratio.

Procedure, per env and policy (a model folder; the defaults: the pinned warm start of
results/compare/ and, for ALFWorld, results/checkpoints/alfworld-grpo-s0-u25 = `train.py --env
alfworld --method grpo --seed 0 --iters 25` from that warm start, held-out success 0.25 → 0.34):
    1. the reference ĝ*: `--ref-batches` batches of the Monte Carlo credit's gradient
       (1/N) Σ_turns w_t·Â_t ∇log π(a_t|s_t), Â_t = V̂(s_{t+1}) − V̂(s_t) from `--ref-k` continuations
       per state on `--ref-turns` turns per trajectory drawn uniformly, w_t = T/m (methods/vine.py):
       unbiased for the policy gradient of the batch's token-mean objective, with no judge, no
       heuristic and no truth
    2. each method (`methods.credit_fn`, exactly what a training update uses) on `--repeats` batches
       of `--tasks` tasks × G; tokens = generated policy tokens per batch (rollouts + continuations)
       and the judge's tokens beside them (the policy tokenizer's ids)

Reading it: GRPO's R − mean_g R is itself an unbiased estimate of the same gradient up to its
per-group 1/std weights, so per-turn credit cannot change the direction much on average (align);
what it can add is signal per batch (snr) — the vine rows at an affordable K say how much.
Writes results/benchmark_gradient/benchmark_gradient.{md,csv}. Leaves out: exact credit (keydoor only).
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
           "gigpo", "spo-chain", "vine:vine_k=1,vine_turns=2", "vine:vine_k=4,vine_turns=2"]
COLUMNS = ["env", "policy", "method", "tokens", "judge_tokens", "cosine", "cosine_se", "snr", "snr_se", "align", "align_se",
           "snr_vs_grpo", "snr_vs_grpo_se", "batches", "ref_batches", "ref_k", "ref_turns", "tasks", "group"]
KEY = ("env", "policy", "method")
JUDGE = ("tokens/judge",)
REF_OFFSET = 10_000          # the reference's batches: seeds of their own, independent of the methods'


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


def stats(gram, idx: list[int], ref: list[int]) -> dict:
    """snr, align and cosine of one arm's batches (`idx`, rows of the Gram matrix) against the
    reference's (`ref`), from unbiased inner products (module docstring)."""
    U, M = moments(gram, idx)
    Ur, _ = moments(gram, ref)
    cross = gram[idx][:, ref]
    if set(idx) == set(ref):
        C = Ur
        per = (cross.sum(1) - cross.diagonal()) / (len(ref) - 1)        # each batch against the others
    else:
        C = float(cross.mean())
        per = cross.mean(1)
    root = math.sqrt(Ur) if Ur > 0 else float("nan")
    cosine = float((per / gram[idx][:, idx].diagonal().sqrt()).mean()) / root
    align = C / math.sqrt(U * Ur) if U > 0 and Ur > 0 else float("nan")
    return {"snr": snr_of(U, M), "align": align, "cosine": cosine}


def jackknife(gram, idx: list[int], ref: list[int]) -> dict:
    """Leave-one-batch-index-out SEs of `stats` (batch j of the arm and batch j of the reference out
    together)."""
    full = stats(gram, idx, ref)
    outs = [stats(gram, drop(idx, j), drop(ref, j)) for j in range(min(len(idx), len(ref)))]
    return {**full, **{k + "_se": jk_se([o[k] for o in outs]) for k in full}}


def ratio_se(gram, idx: list[int], base: list[int]) -> float:
    """Jackknife SE of snr(idx) / snr(base) over batch indices (batch j of both out together: the
    methods' batch j shares its rollouts, so the ratio is paired)."""
    vals = []
    for j in range(min(len(idx), len(base))):
        b = snr_of(*moments(gram, drop(base, j)))
        if b > 0:
            vals.append(snr_of(*moments(gram, drop(idx, j))) / b)
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
             "judge tokens beside them, both in the policy tokenizer's ids; the built-in judge ran for the judged methods. "
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
    open(path_md, "w").write("\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--env", default="alfworld", choices=sorted(WARM))
    ap.add_argument("--policy", nargs="+", default=None, help="model folders (default: the env's warm start, and ALFWorld's checkpoint)")
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--repeats", type=int, default=24, help="batches per method")
    ap.add_argument("--ref-batches", type=int, default=24, help="batches of Monte Carlo credit behind g*")
    ap.add_argument("--ref-k", type=int, default=4, help="continuations per state in g*'s credit")
    ap.add_argument("--ref-turns", type=int, default=2, help="turns per trajectory in g*'s credit (0 = every turn)")
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

        def batches(arm: str, n: int, offset: int) -> list[dict]:
            out = []
            d = os.path.join(folder, slug(arm))
            os.makedirs(d, exist_ok=True)
            for b in tqdm(range(n), desc=f"{args.env} {os.path.basename(name)} {arm}", mininterval=10):
                f = os.path.join(d, f"{offset + b}.pt")
                if not os.path.exists(f):
                    t = trainer()
                    j0 = sum(t.run.agent.counter[k] for k in JUDGE)
                    g, tok = cg.batch(t, arm, offset + b, t.run)
                    judge = sum(t.run.agent.counter[k] for k in JUDGE) - j0
                    torch.save({"grad": g.to(torch.float32), "tokens": tok - judge, "judge_tokens": judge}, f + ".tmp")
                    os.replace(f + ".tmp", f)
                out.append(torch.load(f))
            return out

        t0 = time.time()
        ref = batches(ref_arm, args.ref_batches, REF_OFFSET)
        arms = {m: (ref if m == ref_arm else batches(m, args.repeats, 0)) for m in args.methods}
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
        rows = []
        for m, xs in arms.items():
            st = jackknife(gram, pos[m], refi)
            rows.append({"env": args.env, "policy": name, "method": m, "tokens": sum(x["tokens"] for x in xs) / len(xs),
                         "judge_tokens": sum(x["judge_tokens"] for x in xs) / len(xs), **st, "batches": len(xs),
                         "ref_batches": args.ref_batches, "ref_k": args.ref_k, "ref_turns": args.ref_turns,
                         "tasks": args.tasks, "group": args.group})
        snr_grpo = next(r["snr"] for r in rows if r["method"] == "grpo")
        for r in rows:
            r["snr_vs_grpo"] = r["snr"] / snr_grpo if snr_grpo > 0 else float("nan")
            r["snr_vs_grpo_se"] = ratio_se(gram, pos[r["method"]], pos["grpo"])
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                   if k in ("method", "tokens", "cosine", "snr", "align", "snr_vs_grpo")})
        merge(args.out + ".csv", rows)
        print(f"{args.env} {name}: {time.time() - t0:.0f} s")
    report(args.out + ".csv", args.out + ".md")
    print(f"wrote {args.out}.md and {args.out}.csv")


if __name__ == "__main__":
    main()
