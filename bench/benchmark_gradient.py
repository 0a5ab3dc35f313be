"""bench/benchmark_gradient.py — the gradient ladder on the benchmarks: how much signal each method's
batch policy gradient carries, and how close its direction comes to a Monte Carlo reference, at a
fixed policy (no optimizer). Writes results/benchmark_gradient/benchmark_gradient.{md,csv}.

    python bench/benchmark_gradient.py --env alfworld --policy P --ref-k 2 --ref-batches 48 --repeats 60
    python bench/benchmark_gradient.py --env webshop --ref-batches 8 --repeats 4

Batch b of every arm plays the same tasks and rollouts (seeded by b alone), so arms are paired per
batch. Kept per batch under --cache (resumable; two sittings side by side share the work: a batch
is claimed under a file lock). After a sitting, every batch kept for the policy, whichever sitting
made it, goes into one Gram matrix stored beside the results (gram/ENV__POLICY__tTgG.npz, small),
and the csv and md are computed from those stores alone: the same batches give the same table,
whatever the order of the sittings, and the table can be recomputed without the cache.

Statistics (bench/gram_stats.py): snr, align and cosine from unbiased inner products of different
batches; snr's SE by the jackknife over every batch of the arm, align's and cosine's over every batch
index either side uses; snr × GRPO on exactly the batch indices both arms have (paired), with a 95%
BCa bootstrap interval over them (never ±). One rule says what is resolved: an snr more than 2 SE
above 0; a ratio, align or cosine only where every snr it divides by or quotes is. A method whose snr
is r× GRPO's is worth r GRPO batches per batch (in direction, at align ≈ 1).

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
`--regime KEY=VALUE,...`: train.py flags for every arm (bench/premise.py's regimes; its own rows).
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
import premise  # noqa: E402  (a regime's train.py flags)
from gram_stats import direction_jk, jk_se, moments, paired_ratio, resolved, snr_jk, snr_of  # noqa: E402,F401

WARM = {"alfworld": "results/compare/warmstarts/tiny-alfworld-0355c899bead",
        "webshop": "results/compare/warmstarts/tiny-webshop-25327713f9b4",
        "searchqa": "results/compare/warmstarts/tiny-searchqa-06e2d5e41565"}
POLICIES = {"alfworld": [WARM["alfworld"], "results/checkpoints/alfworld-grpo-s0-u25"]}
METHODS = ["grpo", "grpo-matched", "prover", "prover-plus", "prover-plus:lam=3,verify_k=4", "prover-plus:lam=3,trust_judge=0.25",
           "gigpo", "spo-chain", "vine:vine_k=1,vine_turns=2"]
COLUMNS = ["env", "policy", "method", "tokens", "judge_tokens", "snr", "snr_se", "snr_resolved", "snr_vs_grpo", "snr_vs_grpo_se",
           "snr_vs_grpo_lo", "snr_vs_grpo_hi", "ratio_batches", "ratio_resolved", "cosine", "cosine_se", "align", "align_se",
           "direction_resolved", "batches", "ref_batches", "ref_k", "ref_turns", "tasks", "group", "snr_exact", "snr_exact_se",
           "exact_vs_grpo", "exact_vs_grpo_se", "exact_vs_grpo_lo", "exact_vs_grpo_hi", "exact_resolved", "mc_share", "mc_share_se"]
JUDGE = ("tokens/judge",)


def load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


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


# ---------------------------------------------------------------------------------------------
# The study's data: one Gram matrix per (env, policy), whatever sittings made its batches
# ---------------------------------------------------------------------------------------------
def store_path(out: str, env: str, name: str, tasks: int, group: int) -> str:
    return os.path.join(os.path.dirname(out), "gram", f"{env}__{slug(name)}__t{tasks}g{group}.npz")


def build_store(folder: str, meta: dict) -> dict:
    """Every batch kept under `folder` (a subfolder per arm, `{b}.pt` per batch) → the study's
    data: the Gram matrix of all kept gradients (float64; rows sorted by arm, then batch index, so
    the same batches give the same matrix whatever order the sittings made them in), and per row
    its arm (as each batch file names it), batch index, policy and judge tokens, and mc (the
    reference's rows; NaN elsewhere)."""
    import numpy as np
    import torch
    items = []
    for sub in sorted(os.listdir(folder)):
        d = os.path.join(folder, sub)
        kept = sorted(int(f[:-3]) for f in os.listdir(d) if f.endswith(".pt") and f[:-3].isdigit()) if os.path.isdir(d) else []
        if kept:
            arm = torch.load(os.path.join(d, f"{kept[0]}.pt")).get("arm", sub)
            items += [(arm, b, os.path.join(d, f"{b}.pt")) for b in kept]
    items.sort(key=lambda x: (x[0], x[1]))
    n = len(items)
    gram, info, block = np.zeros((n, n)), [], 64
    # gradients are large (every parameter): products in float64, two blocks of rows in memory at a time
    load = lambda i: torch.load(items[i][2])          # noqa: E731
    for i0 in range(0, n, block):
        A = [load(i) for i in range(i0, min(n, i0 + block))]
        info += [(x["tokens"], x["judge_tokens"], x.get("mc", float("nan"))) for x in A]
        GA = torch.stack([x["grad"] for x in A]).to(torch.float64)
        for j0 in range(0, i0 + block, block):
            if j0 >= n:
                break
            GB = GA if j0 == i0 else torch.stack([load(j)["grad"] for j in range(j0, min(n, j0 + block))]).to(torch.float64)
            P = (GA @ GB.T).numpy()
            gram[i0:i0 + len(A), j0:j0 + P.shape[1]] = P
            gram[j0:j0 + P.shape[1], i0:i0 + len(A)] = P.T
    return {"gram": gram, "arm": np.array([a for a, _, _ in items]), "batch": np.array([b for _, b, _ in items]),
            "tokens": np.array([t for t, _, _ in info], dtype=float), "judge_tokens": np.array([j for _, j, _ in info], dtype=float),
            "mc": np.array([m for _, _, m in info], dtype=float), **{k: np.array(v) for k, v in meta.items()}}


def save_store(path: str, st: dict) -> None:
    import numpy as np
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **st)
    os.replace(tmp, path)


def load_store(path: str) -> dict:
    import numpy as np
    with np.load(path) as z:
        return {k: (z[k].item() if z[k].ndim == 0 else z[k]) for k in z.files}


def study_rows(st: dict) -> list[dict]:
    """The table's rows of one stored study: per arm its snr, the paired ratio to GRPO, align and
    cosine against the reference; the reference's row adds the K → ∞ snr and its paired ratio."""
    arms = list(dict.fromkeys(st["arm"].tolist()))
    by = {a: {int(b): i for i, (x, b) in enumerate(zip(st["arm"], st["batch"])) if x == a} for a in arms}
    ref_arm = st["ref_arm"]
    if "grpo" not in by:
        raise SystemExit(f"benchmark_gradient: {st['env']} {st['policy']}: no grpo batches (every ratio is to GRPO)")
    g_snr, g_se = snr_jk(st["gram"], list(by["grpo"].values()))
    r_snr, r_se = snr_jk(st["gram"], list(by[ref_arm].values())) if ref_arm in by else (float("nan"), float("nan"))
    mc = {i: float(v) for i, v in enumerate(st["mc"])}
    out = []
    for a in sorted(arms, key=lambda m: (METHODS.index(m) if m in METHODS else 98 if m != ref_arm else 99, m)):
        rows = list(by[a].values())
        snr, se = snr_jk(st["gram"], rows)
        r = {"env": st["env"], "policy": st["policy"], "method": a, "tokens": float(st["tokens"][rows].mean()),
             "judge_tokens": float(st["judge_tokens"][rows].mean()), "snr": snr, "snr_se": se,
             "snr_resolved": resolved(snr, se), "batches": len(rows), "ref_batches": len(by.get(ref_arm, {})),
             "ref_k": st["ref_k"], "ref_turns": st["ref_turns"], "tasks": st["tasks"], "group": st["group"]}
        if ref_arm in by:
            r.update(direction_jk(st["gram"], by[a], by[ref_arm]))
        pr = paired_ratio(st["gram"], by[a], by["grpo"])
        r.update({"snr_vs_grpo": pr["ratio"], "snr_vs_grpo_se": pr["ratio_se"], "snr_vs_grpo_lo": pr["ratio_lo"],
                  "snr_vs_grpo_hi": pr["ratio_hi"], "ratio_batches": pr["ratio_batches"]})
        if a == ref_arm and all(math.isfinite(mc[i]) for i in rows):
            ex, ex_se = snr_jk(st["gram"], rows, mc)
            U, M = moments(st["gram"], rows)
            share = (sum(mc[i] for i in rows) / len(rows)) / (M - U) if M > U else float("nan")
            loo = []
            for j in range(len(rows)):
                rs = rows[:j] + rows[j + 1:]
                U2, M2 = moments(st["gram"], rs)
                loo.append((sum(mc[i] for i in rs) / len(rs)) / (M2 - U2) if M2 > U2 else float("nan"))
            pe = paired_ratio(st["gram"], by[a], by["grpo"], mc)
            r.update({"snr_exact": ex, "snr_exact_se": ex_se, "mc_share": share, "mc_share_se": jk_se(loo),
                      "exact_vs_grpo": pe["ratio"], "exact_vs_grpo_se": pe["ratio_se"], "exact_vs_grpo_lo": pe["ratio_lo"],
                      "exact_vs_grpo_hi": pe["ratio_hi"]})
        r["ratio_resolved"] = resolved(snr, se) and resolved(g_snr, g_se)
        r["direction_resolved"] = resolved(snr, se) and resolved(r_snr, r_se)
        r["exact_resolved"] = ("snr_exact" in r and resolved(r["snr_exact"], r["snr_exact_se"]) and resolved(g_snr, g_se))
        out.append(r)
    return out


def fmt_ratio(r: dict, k: str, ok: bool) -> str:
    """'1.47 [1.20, 1.81]' (95% BCa over the paired batches), or 'unresolved [lo, hi]' where the
    rule says the ratio is not resolved."""
    lo, hi = float(r.get(k + "_lo", "nan")), float(r.get(k + "_hi", "nan"))
    band = f"[{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else "[–]"
    return f"{float(r[k]):.2f} {band}" if ok else f"unresolved {band}"


def claim(r: dict, key: str, ok) -> str:
    """What a sentence may say of one ratio cell (csv row `r`, column `key`): the ratio with its 95%
    BCa interval where the rule resolves it (`ok`: the row's flag), else 'unresolved'."""
    if not truthy(ok):
        return "unresolved"
    return f"{float(r[key]):.2f}× [{float(r[key + '_lo']):.2f}, {float(r[key + '_hi']):.2f}]"


def truthy(v) -> bool:
    return str(v) in ("True", "true", "1")


def report(path_csv: str, path_md: str) -> None:
    """The csv and md from every stored study under the csv's folder `gram/` (never from a
    sitting's memory: the same stored batches give the same table)."""
    gdir = os.path.join(os.path.dirname(path_csv), "gram")
    rows = [r for f in sorted(os.listdir(gdir)) if f.endswith(".npz") for r in study_rows(load_store(os.path.join(gdir, f)))] \
        if os.path.isdir(gdir) else []
    with open(path_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows([{k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows])
    rows = load(path_csv)               # the md from the csv, as --report-only would
    lines = ["# The gradient ladder on the benchmarks", "",
             "Written by `python bench/benchmark_gradient.py` from the stored Gram matrices in `gram/` (one per env and "
             "policy; each sitting's command and wall time in results/LOG.md). Reference g*: the Monte Carlo credit "
             "(methods/vine.py), `ref K` continuations per state on `ref turns` turns per trajectory (0 = every turn), "
             "`g* batches` batches. From unbiased inner products of independent batches (bench/benchmark_gradient.py says "
             "how): **snr** = |E ĝ|² / E|ĝ − E ĝ|² of one batch (± jackknife SE over every batch of the arm); **snr × GRPO** "
             "= the arm's snr over GRPO's on exactly the same batch indices (the same tasks and first samples: paired; "
             "`paired batches` says how many), with its 95% BCa bootstrap interval over those indices: one batch of the "
             "method is worth this many GRPO batches in signal; **align** = cos(E ĝ_m, g*), the direction the method "
             "follows on average; **cosine** = one batch's cosine with the noise-free g* (± jackknife SE over every batch "
             "index either side uses). **Resolution rule** (one for every column): an snr is resolved when it is more than "
             "2 SE above 0; a ratio, align or cosine is shown only where every snr it divides by or quotes is resolved, "
             "else 'unresolved' (the interval still given for a ratio). Tokens: generated policy tokens per batch (rollouts "
             "+ continuations) and judge tokens beside them, both in the policy tokenizer's ids; the built-in judge ran for "
             "the judged methods (its hit rate is not defined here: the benchmarks label no pivotal turn). Each batch: "
             "`tasks` tasks × G rollouts.", "",
             "| env | policy | method | policy tokens / batch | judge tokens / batch | snr | snr × GRPO [95% BCa] | paired batches | cosine | align | batches | g* batches | ref K | ref turns |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = {k: float(r.get(k) or "nan") for k in ("tokens", "judge_tokens", "cosine", "cosine_se", "snr", "snr_se", "align", "align_se")}
        ok_dir = truthy(r["direction_resolved"])
        lines.append(f"| {r['env']} | {os.path.basename(r['policy'])} | {r['method']} | {f['tokens']:.0f} | {f['judge_tokens']:.0f} | "
                     f"{f['snr']:.4f} ± {f['snr_se']:.4f}{'' if truthy(r['snr_resolved']) else ' (unresolved)'} | "
                     f"{fmt_ratio(r, 'snr_vs_grpo', truthy(r['ratio_resolved'])) if r['method'] != 'grpo' else '1'} | {r['ratio_batches']} | "
                     + (f"{f['cosine']:.3f} ± {f['cosine_se']:.3f} | {f['align']:.2f} ± {f['align_se']:.2f}" if ok_dir
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
        grpo = next(x for x in rows if (x["env"], x["policy"], x["method"]) == (r["env"], r["policy"], "grpo"))
        K, snr, share, g_snr = int(r["ref_k"]), float(r["snr"]), float(r["mc_share"]), float(grpo["snr"])
        ok = truthy(r["ratio_resolved"])                  # the measured K: the reference's and GRPO's snr resolved
        x_exact = fmt_ratio(r, "exact_vs_grpo", truthy(r["exact_resolved"]))
        roll = float(grpo["tokens"])                       # the same rollouts: the continuations are the rest
        cont = float(r["tokens"]) - roll
        if not out:
            out += ["", "## What per-turn credit could add: the Monte Carlo credit at K' continuations", "",
                    "The reference's batches split their continuations in two halves; their difference measures the "
                    "continuations' share of its noise (`mc share`, ± jackknife SE), which falls as 1/K'. So its snr at any K' "
                    "follows from the measured one (`measured` marks K' = K; the others are that 1/K law, not runs); K' = ∞ is "
                    "credit by the exact per-turn advantage A^π(s_t, a_t), the quantity every per-turn credit method estimates. "
                    "× GRPO: over GRPO's snr on the same batches (K' = ∞: with its 95% BCa interval over them; shown only where "
                    "the K' = ∞ snr and GRPO's are resolved, by the rule above; the 1/K' rows in between are point values of "
                    "the same law). tokens × GRPO: policy tokens per batch (rollouts + continuations) over GRPO's. "
                    "Averaging n GRPO batches multiplies its snr by n, so credit pays per token only where snr × GRPO "
                    "exceeds tokens × GRPO.", ""]
        out += [f"**{r['env']}, {os.path.basename(r['policy'])}** (reference: K = {K}, "
                f"{'every turn' if r['ref_turns'] == '0' else r['ref_turns'] + ' turns per trajectory'}, {r['batches']} batches, "
                f"{r['ratio_batches']} paired with GRPO's; mc share {share:.2f} ± {float(r['mc_share_se']):.2f}; GRPO snr "
                f"{g_snr:.4f} ± {float(grpo['snr_se']):.4f}; exact per-turn advantages: snr {float(r['snr_exact']):.4f} ± "
                f"{float(r['snr_exact_se']):.4f}, × GRPO {x_exact}):", "",
                "| K' | snr | × GRPO | policy tokens / batch | tokens × GRPO |", "|---|---|---|---|---|"]
        for k2 in (1, 2, 4, 8, math.inf):
            v = at_k(snr, share, K, k2)
            tok = roll + cont * k2 / K if math.isfinite(k2) else math.inf
            out.append(f"| {k2}{' (measured)' if k2 == K else ''} | {v:.4f} | "
                       f"{fmt_ratio(r, 'snr_vs_grpo', ok) if k2 == K else (format(v / g_snr, '.2f') if ok else 'unresolved')} | "
                       f"{tok:.0f} | {tok / roll:.1f} |" if math.isfinite(k2) else
                       f"| ∞ | {v:.4f} ± {float(r['snr_exact_se']):.4f} | {x_exact} | – | – |")
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
    ap.add_argument("--regime", default="", help="train.py flags as KEY=VALUE,... for every arm (bench/premise.py's regimes)")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "prover", "benchmark_gradient"),
                    help="where each batch's gradient is kept (resuming reuses them)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "benchmark_gradient", "benchmark_gradient"))
    ap.add_argument("--report-only", action="store_true", help="rewrite the csv and md from the stored Gram matrices")
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
    if args.regime:
        import config
        try:
            config.validate(config.parse_args(premise.train_argv(args.env, None, args.regime)))
        except (SystemExit, ValueError) as e:
            raise SystemExit(f"benchmark_gradient: --regime {args.regime!r}: {e}") from None
    import torch
    from tqdm import tqdm
    torch.set_num_threads(1)
    ref_arm = f"vine:vine_k={args.ref_k},vine_turns={args.ref_turns}"
    for pol in policies:
        name = os.path.relpath(os.path.join(ROOT, pol), ROOT) + (f" [{args.regime}]" if args.regime else "")
        folder = os.path.join(args.cache, args.env, slug(name), f"t{args.tasks}g{args.group}")
        tr = None

        def trainer():
            nonlocal tr
            if tr is None:                 # set up only when a batch is missing
                tr = cg.fixed_policy([*premise.train_argv(args.env, pol, args.regime), "--tasks-per-iter", str(args.tasks),
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
            return {"arm": arm, "grad": g.to(torch.float32), "tokens": tok - judge, "judge_tokens": judge, **extra}

        def batches(arm: str, n: int) -> None:
            d = os.path.join(folder, slug(arm))
            os.makedirs(d, exist_ok=True)
            files = [os.path.join(d, f"{b}.pt") for b in range(n)]
            waiting = []
            for b in tqdm(range(n), desc=f"{args.env} {os.path.basename(name)} {arm}", mininterval=10):
                if not claimed(files[b], lambda: compute(arm, b), wait=False):
                    waiting.append(b)
            for b in waiting:              # held by another sitting: wait for it (or do it, if that one died)
                claimed(files[b], lambda: compute(arm, b), wait=True)

        t0 = time.time()
        batches(ref_arm, args.ref_batches)
        for m in args.methods:
            if m != ref_arm:                # the reference has a row too
                batches(m, args.repeats)
        # the study is every batch kept for this policy (earlier sittings' too), not this sitting's
        meta = {"env": args.env, "policy": name, "tasks": args.tasks, "group": args.group, "ref_arm": ref_arm,
                "ref_k": args.ref_k, "ref_turns": args.ref_turns}
        save_store(store_path(args.out, args.env, name, args.tasks, args.group),
                   build_store(folder, meta))
        print(f"{args.env} {name}: {time.time() - t0:.0f} s")
    report(args.out + ".csv", args.out + ".md")
    print(f"wrote {args.out}.md and {args.out}.csv")


if __name__ == "__main__":
    main()
