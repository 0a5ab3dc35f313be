"""bench/compare.py — the paper's comparison at laptop scale: methods × environments × paired seeds, with cost.

    python bench/compare.py                       # default preset: ALFWorld, grpo vs prover, 3 seeds
    python bench/compare.py --full                # the paper's table: every method on every env (below)
    python bench/compare.py --methods grpo prover prover-random --envs keydoor --seeds 0 1 2 3 4 5 \
        --iters 40 --eval-repeats 4 -- --env-opt rooms=8

Paired protocol: for seed s every method's run is `train.py --seed s`, so all methods of a seed
play the same training tasks with the same first sampling seeds, from the same warm start (one
shared by every seed, `--bc-seed 0`, the default; or one per seed, `--warm-start per-seed`).
Methods differ only in credit assignment; each is compared with GRPO by the per-seed differences
(bench/paired.py: mean, 95% t CI, exact sign-flip p, Holm within each table). A shared warm start
is fair because the seed never changes the world it was cloned in (fixed held-out games, shop, KB).

Warm starts are pinned under `<out>/warmstarts/` (committed): behaviour cloning is not
bit-reproducible across CPUs, so a rebuilt one is another warm start. Each run's summary records
the hash of the weights it started from; a run that did not start from the weights of its seed's GRPO
run is left out of its method's paired difference (named under the table); the other methods of that
seed keep their pairs.

Resumable (bench/runs.py): runs live in `<out>/runs/<env>-<method>-s<seed>` (`--jobs N` side by
side), finished ones are reused, interrupted ones resumed, and each finished run's summary is kept
in `<out>/summaries/compare/` (committed) so a fresh clone rebuilds the report with --report-only.
A run made under another protocol is refused with one line, never silently reused.

`--full`: grpo, grpo-matched, prover, prover-random (the random judge), prover-plus, gigpo,
spo-chain, spo-tree and criticsearch on built-in ALFWorld, WebShop and SearchQA, 50 updates, the
final evaluation on the whole held-out split played 4 times, 4 paired seeds per cell and 10 for
grpo, prover and prover-plus on ALFWorld (`--cell-seeds`), run seed by seed.

Writes <out>/compare.csv (a row per run: finals, costs per update, wall time), <out>/compare.md
(per env: final held-out success mean [95% CI] (n), the paired Δ to GRPO with CI and p, costs per
update in policy tokens = rollouts + verification, judge tokens, env steps and seconds, each ×
GRPO, the judge's acceptance rate; the average over envs with its stratified CI and p and the
change relative to GRPO, the paper's figures beside ours), compare_updates.png / compare_tokens.png
(held-out success vs updates / tokens) and compare_delta.png (each paired Δ with its CI).
`--env-flags ENV='FLAGS'` adds train.py flags to one env's runs and warm start (a regime, e.g. a step
budget), after the common ones; they are part of the protocol its runs are compared under.
Leaves out: real models and official data (the flags after `--` pass through to train.py).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import (finished, load_summary, run_train, same_start, save_summary, summarize_run, summary_path,  # noqa: E402
                  warm_dir)

# "prover-random" is ProVer with the random-segment judge (the paper's ablation)
METHOD_ARGS = {
    "grpo": ["--method", "grpo"], "grpo-matched": ["--method", "grpo-matched"],
    "prover": ["--method", "prover"], "prover-random": ["--method", "prover", "--judge", "random"],
    "gigpo": ["--method", "gigpo"], "spo-chain": ["--method", "spo-chain"], "spo-tree": ["--method", "spo-tree"],
    "criticsearch": ["--method", "criticsearch"], "prover-plus": ["--method", "prover-plus"],
    # prover-plus at the lab's best setting on the benchmarks' gradient ladder (λ = 3, K = 4)
    "prover-plus-l3k4": ["--method", "prover-plus", "--lam", "3", "--verify-k", "4"],
}
DEFAULT = dict(envs=["alfworld"], methods=["grpo", "prover"], seeds=[0, 1, 2], iters=80, eval_every=10,
               eval_episodes=64, eval_repeats=1, cell_seeds=[])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired  # noqa: E402  (bench/paired.py)
FULL = dict(envs=["alfworld", "webshop", "searchqa"], methods=[m for m in METHOD_ARGS if m != "prover-plus-l3k4"],
            seeds=[0, 1, 2, 3], iters=50,
            eval_every=25, eval_episodes=0, eval_repeats=4,
            cell_seeds=["alfworld/grpo=10", "alfworld/prover=10", "alfworld/prover-plus=10"])
# the train.py settings a finished run must share with the study to be reused (config.json keys)
PROTOCOL = ("env", "method", "judge", "seed", "eval_every", "eval_episodes", "eval_repeats")
# The paper's figures (Qwen3.5-4B unless said), printed beside ours
PAPER = {
    "headline": "ProVer +7.12% (4B) / +9.91% (2B) relative to GRPO on the average over the three benchmarks; "
                "budget-matched GRPO −0.5% / −0.9%",
    "policy_tokens": {"alfworld": "+2.4%", "webshop": "+11.6%", "searchqa": "+16.8%"},
    "acceptance": "SearchQA: random segments 19.5%, LLM judges 58.5–72.4%",
    # per method, what the paper reports of it (Qwen3.5-2B / 4B, 100 updates; success in points)
    "methods": {
        "prover": "average over the benchmarks 59.43 (2B) / 64.40 (4B) vs GRPO 54.07 / 60.12",
        "grpo-matched": "does not beat GRPO: average 53.60 / 59.79 vs GRPO 54.07 / 60.12; ProVer beats it in every cell",
        "prover-random": "random valid segments, same verification (4B): 94.0 / 42.4 / 42.8 on ALFWorld / WebShop / "
                         "SearchQA, about 59.7 on average: no better than GRPO",
        "criticsearch": "the closest to ProVer at 4B (average 62.28); edges it on 4B WebShop (48.07 vs 47.93)",
        "spo-chain": "trails on SearchQA (27.67 vs ProVer's 39.83 at 2B)",
        "spo-tree": "collapses on 2B ALFWorld (56.96)",
    },
}


def run_dir(out, env, method, seed):
    return os.path.join(out, "runs", f"{env}-{method}-s{seed}")


def launch(job, args) -> tuple:
    env, method, seed = job
    d = run_dir(args.out, env, method, seed)
    if done(job, args):
        return job, 0, "skipped (done)"
    flags = ["--env", env, *METHOD_ARGS[method], "--seed", str(seed), "--iters", str(args.iters),
             "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
             "--eval-repeats", str(args.eval_repeats), "--threads", "1", "--workers", "1",
             "--bc-seed", str(bc_seed(args, seed)), "--cache-dir", warm_dir(args), *extra_for(args, env)]
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = run_train(d, flags, OMP_NUM_THREADS="1")
    with open(os.path.join(d, "wall.json"), "a") as f:
        f.write(json.dumps({"seconds": secs, "rc": rc}) + "\n")
    result(job, args)                                   # keep its summary as soon as it has finished
    return job, rc, f"rc={rc} in {secs:.0f}s"


def protocol(job, args) -> dict:
    """The settings that make a run comparable within a study: config.json's PROTOCOL keys as this
    study would write them, plus --iters and the extra train.py flags."""
    env, method, seed = job
    i = METHOD_ARGS[method].index("--judge") + 1 if "--judge" in METHOD_ARGS[method] else None
    return {"env": env, "method": METHOD_ARGS[method][1], "judge": METHOD_ARGS[method][i] if i else None,
            "seed": seed, "eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
            "eval_repeats": args.eval_repeats, "iters": args.iters, "extra": extra_for(args, env)}


def extra_for(args, env: str) -> list[str]:
    """The train.py flags after `--` (every run) and then `--env-flags ENV=...` (this env's regime)."""
    return [*args.extra, *getattr(args, "env_extra", {}).get(env, [])]


def job_name(job) -> str:
    env, method, seed = job
    return f"{env}-{method}-s{seed}"


def result(job, args) -> dict | None:
    """A finished run's summary: from its run directory when it is there (and then also kept as
    <out>/summaries/compare/NAME.json), else from the kept summary; None for a run not finished."""
    d, path = run_dir(args.out, *job), summary_path(args.out, "compare", job_name(job))
    s = summarize_run(d) if finished(d, args.iters) else None
    if s is not None and s["updates"] >= args.iters:
        save_summary(path, protocol(job, args), s)
        return s
    return load_summary(path, protocol(job, args))


def done(job, args) -> bool:
    """Finished here (its run directory) or on an earlier machine (its kept summary)."""
    return finished(run_dir(args.out, *job), args.iters) or os.path.exists(summary_path(args.out, "compare", job_name(job)))


def protocol_clash(d: str, job, args) -> str | None:
    """'eval_episodes=64 (this study: 0)' when the run directory's config.json was made under
    another protocol than this study's (so its numbers would not be comparable); None if it agrees
    or does not exist yet."""
    p = os.path.join(d, "config.json")
    if not os.path.exists(p):
        return None
    have = json.load(open(p))
    want = protocol(job, args)
    for k in PROTOCOL:
        if want[k] is not None and k in have and have[k] != want[k]:
            return f"{k}={have[k]} (this study: {want[k]})"
    st = os.path.join(d, "checkpoint", "state.json")
    step = json.load(open(st))["step"] if os.path.exists(st) else 0
    if step > args.iters:                                   # fewer is resumed to --iters
        return f"{step} updates (this study: {args.iters})"
    return None


def cell_seeds(args) -> dict:
    """{(env, method): seeds}: --seeds for every cell, widened by --cell-seeds ENV/METHOD=N (seeds
    0..N-1). Validated: an unknown env or method, or a bad N, is one error line."""
    out = {(e, m): list(args.seeds) for e in args.envs for m in args.methods}
    for spec in args.cell_seeds:
        try:
            cell, n = spec.split("=")
            e, m = cell.split("/")
            n = int(n)
        except ValueError:
            raise SystemExit(f"compare: --cell-seeds {spec!r}: expected ENV/METHOD=N (e.g. alfworld/prover=10)")
        if (e, m) not in out or n < 1:
            raise SystemExit(f"compare: --cell-seeds {spec!r}: no such cell among --envs × --methods, or N < 1")
        out[(e, m)] = sorted(set(out[(e, m)]) | set(range(n)))
    return out


def plan(args) -> list[tuple]:
    """The study's (env, method, seed) runs, seed by seed (then env, then method), so that however far
    a sitting gets, the finished runs form complete paired seeds."""
    cells = cell_seeds(args)
    seeds = sorted({s for ss in cells.values() for s in ss})
    return [(e, m, s) for s in seeds for e in args.envs for m in args.methods if s in cells[(e, m)]]


def bc_seed(args, seed: int) -> int:
    """The warm start a seed's runs share: 0 for every seed (shared) or the seed's own."""
    return seed if args.warm_start == "per-seed" else 0


def warm_start(env: str, seed: int, args) -> str:
    """Build (or find cached) a warm start: train.py with no updates, the same warm-start flags as
    every run (`--bc-seed`, the extra flags, which may change its cache key) and the default
    workers, so the runs side by side then load it from the cache. Its log:
    runs/<env>-warmstart[-s<bc seed>]/stdout.log."""
    b = bc_seed(args, seed)
    d = os.path.join(args.out, "runs", f"{env}-warmstart" + (f"-s{b}" if args.warm_start == "per-seed" else ""))
    rc, secs = run_train(d, ["--env", env, "--iters", "0", "--bc-seed", str(b), "--eval-every", "0",
                             "--cache-dir", warm_dir(args), *extra_for(args, env)])
    if rc != 0:
        raise SystemExit(f"compare: the {env} warm start (bc seed {b}) failed (rc={rc}); see {d}/stdout.log")
    return f"{env} warm start ready in {secs:.0f}s"


def write_csv(path: str, res: dict) -> None:
    rows = [{"env": env, "method": method, "seed": seed, **{k: v for k, v in r.items() if "curve" not in k}}
            for (env, method, seed), r in res.items()]
    fields = list(dict.fromkeys(k for row in rows for k in row))   # every key any run has (older summaries lack some)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def collect(args, jobs) -> dict:
    """{(env, method, seed): summary} of the finished runs (unfinished ones are not compared)."""
    res = {}
    for job in jobs:
        s = result(job, args)
        if s is not None:
            res[job] = s
    return res


def by_seed(res: dict, env: str, method: str, key: str) -> dict:
    return {s: r[key] for (e, m, s), r in res.items() if e == env and m == method}


def cost_ratio(res, env, method, key) -> tuple[float, float] | None:
    """(mean cost of `method` over its seeds, × GRPO's on the same seeds; NaN without GRPO's), or None
    without runs: the ratio divides the method's mean by GRPO's mean over the seeds both ran, never
    by GRPO's mean over more seeds (a 4-seed arm over a 10-seed GRPO mixes seed effects in)."""
    a, b = by_seed(res, env, method, key), by_seed(res, env, "grpo", key)
    if not a:
        return None
    shared = sorted(set(a) & set(b))
    bm = paired.mean([b[s] for s in shared]) if shared else 0.0
    return paired.mean(list(a.values())), (paired.mean([a[s] for s in shared]) / bm if bm > 0 else float("nan"))


def ratio(res, env, method, key, pct: bool = False, digits: int = 0) -> str:
    """cost_ratio as a cell: "mean (r×)", or with pct "mean (+x.x%)"; "–" without runs."""
    m, r = cost_ratio(res, env, method, key) or (None, None)
    if m is None or r != r:               # no runs; no GRPO runs on the method's seeds (r NaN)
        return "–" if m is None else f"{m:.{digits}f}"
    return f"{m:.{digits}f} ({100 * (r - 1):+.1f}%)" if pct else f"{m:.{digits}f} ({r:.2f}×)"


def mean_cell(res, env, method, key, scale=1.0, digits=0, unit="") -> str:
    vals = [v for v in by_seed(res, env, method, key).values() if v == v]     # NaN: not measured
    return f"{scale * paired.mean(vals):.{digits}f}{unit}" if vals else "–"


def report(args, jobs) -> str:
    res = collect(args, jobs)
    write_csv(os.path.join(args.out, "compare.csv"), res)
    envs = [e for e in args.envs if any(k[0] == e for k in res)]
    methods = [m for m in args.methods if any(k[1] == m for k in res)]
    metric = {e: ("final_score" if e == "webshop" else "final_success") for e in envs}
    out = [f"Final held-out success in points (WebShop: score) after "
           f"{args.iters} updates, on {'the whole held-out split' if args.eval_episodes == 0 else f'{args.eval_episodes} held-out tasks'} "
           f"played {args.eval_repeats}× each. Cells: mean [95% t CI] (n seeds). Δ vs GRPO: the mean paired "
           f"difference over the seeds both have, its CI and the exact sign-flip p; p (Holm): that p adjusted by Holm's "
           f"step-down within the family of one table (each env's table: its methods' Δ vs GRPO; the average table: its "
           f"rows), the p a claim should cite. Costs are means per update: "
           f"policy tokens = rollout + verification continuations (the paper's generated policy tokens), change vs "
           f"GRPO in % (on the seeds both ran); judge tokens; env steps and seconds per update × GRPO (same seeds) (seconds: runs {args.jobs} side by side "
           f"on a shared machine). accept: the judge's acceptance rate (verified proposals with Δ̂ > 0).\n"]
    deltas: dict = {}                                    # (env, method) -> its paired Δ vs GRPO
    for e in envs:
        out += [f"## {e}\n", "| method | final held-out | Δ vs GRPO | p | p (Holm) | policy tokens / update | judge tokens / update "
                "| env steps / update | s / update | accept |", "|---|---|---|---|---|---|---|---|---|---|"]
        base = by_seed(res, e, "grpo", metric[e])
        bad: dict = {}                               # {method: seeds whose run did not start where GRPO's did}
        for m in methods:                            # the family first: every Δ of this table
            vals = by_seed(res, e, m, metric[e])
            if vals and m != "grpo" and base:
                bad[m] = [s for s in vals if s in base and not same_start(res[(e, m, s)], res[(e, "grpo", s)])]
                deltas[e, m] = paired.paired({s: v for s, v in vals.items() if s not in bad[m]}, base)
        adj = paired.holm_family({m: deltas.get((e, m)) for m in methods})
        for m in methods:
            vals = by_seed(res, e, m, metric[e])
            if not vals:
                continue
            d = deltas.get((e, m))
            if d is not None:
                d["p_holm"] = adj.get(m)
            out.append(f"| {m} | {paired.fmt(paired.summary(list(vals.values())), 100)} | "
                       f"{paired.fmt(d, 100, sign=True) if d else '–'} | {paired.fmt_p(d.get('p')) if d else '–'} | "
                       f"{paired.fmt_p(d.get('p_holm')) if d else '–'} | "
                       f"{ratio(res, e, m, 'policy_tokens_per_update', pct=True)} | "
                       f"{mean_cell(res, e, m, 'judge_tokens_per_update')} | "
                       f"{ratio(res, e, m, 'env_steps_per_update')} | {ratio(res, e, m, 'iter_seconds', digits=1)} | "
                       f"{mean_cell(res, e, m, 'accept_rate', 100, 0, '%')} |")
        seed_sets = {m: sorted(by_seed(res, e, m, metric[e])) for m in methods if by_seed(res, e, m, metric[e])}
        if len({tuple(v) for v in seed_sets.values()}) > 1:
            out.append("\nThe rows have different seeds (" + "; ".join(f"{m}: {', '.join(map(str, v))}" for m, v in seed_sets.items())
                       + "): read methods against each other by Δ, which pairs seeds, not by the cells' means over different seeds.")
        for m, seeds in bad.items():
            if seeds:
                out.append(f"\nNot paired, left out of {m}'s Δ: seed{'s' if len(seeds) > 1 else ''} "
                           f"{', '.join(map(str, seeds))} started from another warm start than GRPO's (update-0 held-out "
                           + ", ".join(f"{100 * res[(e, m, s)]['init_success']:.1f} vs {100 * res[(e, 'grpo', s)]['init_success']:.1f}"
                                       for s in seeds) + ").")
        if e in PAPER["policy_tokens"]:
            out.append(f"\nThe paper (4B): ProVer's generated policy tokens {PAPER['policy_tokens'][e]} over GRPO.")
        out.append("")
    if len(envs) > 1 and "grpo" in methods:   # the paper's headline: the average over benchmarks
        out += ["## average over benchmarks\n",
                "Mean final: the mean over benchmarks of the method's cell means. Paired Δ: the mean over benchmarks of "
                "each benchmark's paired Δ vs GRPO (its own seeds; n = seeds per benchmark), Welch t CI and "
                "stratified sign-flip p (bench/paired.py). rel. to GRPO: that Δ over GRPO's average on the same seeds "
                "(the paper's headline form).\n",
                "| method | mean final (points) | paired Δ vs GRPO | rel. to GRPO | p | p (Holm, this table) |",
                "|---|---|---|---|---|---|"]
        full = [m for m in methods
                if all(by_seed(res, e, m, metric[e]) for e in envs)]
        avg = {m: paired.stratified([deltas.get((e, m)) or {} for e in envs]) for m in full if m != "grpo"}
        adj = paired.holm_family(avg)
        for m in full:
            per_env = [paired.mean(list(by_seed(res, e, m, metric[e]).values())) for e in envs]
            d = avg.get(m)
            rel = "–"
            if d and d["n"]:
                g = paired.mean([paired.mean([by_seed(res, e, "grpo", metric[e])[s] for s in deltas[e, m]["seeds"]]) for e in envs])
                rel = f"{100 * d['mean'] / g:+.1f}%" if g else "–"
            out.append(f"| {m} | {100 * paired.mean(per_env):.1f} | {paired.fmt(d, 100, sign=True) if d and d['n'] else '–'} | "
                       f"{rel} | {paired.fmt_p(d.get('p')) if d else '–'} | {paired.fmt_p(adj.get(m)) if d else '–'} |")
        out.append(f"\nThe paper: {PAPER['headline']}.")
    out.append(f"\nThe paper's acceptance rates: {PAPER['acceptance']}.")
    out += beside_the_paper(methods, envs, deltas)
    table = "\n".join(out) + "\n"
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(f"# Comparison\n\nCommand: `{getattr(args, 'command', 'python bench/compare.py')}`\n\n{table}")
    if envs:                                        # nothing finished yet: a table without plots
        plot(args, res, envs, methods, metric)
    return table


def beside_the_paper(methods, envs, deltas) -> list[str]:
    """A table of what the paper reports of each method beside our paired Δ vs GRPO per env and
    whether its 95% CI excludes 0, with the exact p (at n seeds it cannot go below 2 / 2^n, so a
    CI that excludes 0 at 4 seeds is weak evidence: such a row says "not resolved" unless the
    Holm-adjusted p of its env's table is < 0.05 too), so that a difference in kind (a method the paper
    finds better that is not better here, a collapse that does not happen) is read off one row."""
    rows = []
    for m in methods:
        if m not in PAPER["methods"]:
            continue
        here = []
        for e in envs:
            d = deltas.get((e, m))
            if d and d.get("n"):
                lo, hi = d.get("lo", float("nan")), d.get("hi", float("nan"))
                p = d.get("p", float("nan"))
                ph = d.get("p_holm")
                ph = p if ph is None else ph
                if lo > 0 or hi < 0:   # resolved only when the exact, adjusted test agrees with the CI
                    way = "better" if lo > 0 else "worse"
                    verdict = (f"CI excludes 0, {way}" if ph < 0.05 else
                               f"CI excludes 0 ({way}) but Holm p ≥ 0.05 at n={d['n']}: not resolved")
                else:
                    verdict = "CI includes 0"
                here.append(f"{e} {paired.fmt(d, 100, sign=True)}: {verdict} (p {paired.fmt_p(p)}, Holm {paired.fmt_p(ph)})")
        rows.append(f"| {m} | {PAPER['methods'][m]} | {'; '.join(here) or '–'} |")
    if not rows:
        return []
    return ["\n## beside the paper\n", "| method | the paper | here: paired Δ vs GRPO (95% CI excludes 0?) |",
            "|---|---|---|", *rows]


def mean_band(ys: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% CI (Student t; a single seed gives no band)."""
    s = paired.summary(ys)
    return s["mean"], s.get("lo", s["mean"]), s.get("hi", s["mean"])


def plot(args, res, envs, methods, metric):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for key, xl, fname in (("curve", "policy updates", "compare_updates.png"),
                           ("tok_curve", "generated tokens (rollout + verify + judge)", "compare_tokens.png")):
        fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
        for ax, e in zip(axes[0], envs):
            for m in methods:
                curves = [res[(e, m, s)][key] for (e_, m_, s) in res if e_ == e and m_ == m]
                if not curves:
                    continue
                n = min(len(c) for c in curves)
                xs = [sum(c[i][0] for c in curves) / len(curves) for i in range(n)]
                bands = [mean_band([c[i][1] for c in curves]) for i in range(n)]
                line, = ax.plot(xs, [b[0] for b in bands], "o-", ms=3, label=f"{m} (n={len(curves)})")
                ax.fill_between(xs, [b[1] for b in bands], [b[2] for b in bands], color=line.get_color(), alpha=0.15)
            # the summaries keep the success curve only; where the table reads another metric
            # (WebShop: score) the panel says so rather than pass one for the other
            ax.set_title(e if metric[e] == "final_success" else f"{e} (curve: success; the table: {metric[e].replace('final_', '')})")
            ax.set_xlabel(xl)
            ax.set_ylabel("held-out success (band: 95% CI of the mean)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, fname), dpi=90)
        plt.close(fig)
    # the paired differences to GRPO, the table's Δ column as a picture
    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 0.45 * len(methods) + 1.5), squeeze=False)
    for ax, e in zip(axes[0], envs):
        base = by_seed(res, e, "grpo", metric[e])
        rows = [(m, paired.paired(by_seed(res, e, m, metric[e]), base)) for m in methods if m != "grpo"]
        rows = [(m, d) for m, d in rows if d["n"]]
        for y, (m, d) in enumerate(rows):
            lo, hi = d.get("lo", d["mean"]), d.get("hi", d["mean"])
            ax.errorbar([100 * d["mean"]], [y], xerr=[[100 * (d["mean"] - lo)], [100 * (hi - d["mean"])]], fmt="o", capsize=3)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{m} (n={d['n']})" for m, d in rows], fontsize=8)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(e)
        ax.set_xlabel("Δ final vs GRPO (points, paired, 95% CI)")
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "compare_delta.png"), dpi=90)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="methods × envs × seeds comparison (resumable)")
    p.add_argument("--full", action="store_true",
                   help="the paper's table: every method on every env, whole-split 4× evaluation, 4 seeds per cell and "
                        "10 for grpo/prover/prover-plus on ALFWorld (the module docstring)")
    p.add_argument("--envs", nargs="+")
    p.add_argument("--methods", nargs="+", choices=list(METHOD_ARGS))
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--iters", type=int)
    p.add_argument("--cell-seeds", nargs="+", metavar="ENV/METHOD=N",
                   help="give these cells seeds 0..N-1 (more than --seeds), e.g. alfworld/prover=10")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--eval-episodes", type=int, help="held-out tasks per evaluation (0 = the whole split)")
    p.add_argument("--eval-repeats", type=int, help="play each evaluation task R times (train.py --eval-repeats)")
    p.add_argument("--warm-start", choices=["shared", "per-seed"], default="shared",
                   help="one warm start for every seed (--bc-seed 0) or one per seed (--bc-seed s); methods of a seed always share it")
    p.add_argument("--jobs", type=int, default=2, help="trainings run side by side (one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "compare"),
                   help="the study folder: compare.{md,csv}, plots, runs/, summaries/compare/, warmstarts/")
    p.add_argument("--report-only", action="store_true", help="only rebuild the table and plots")
    p.add_argument("--env-flags", nargs="+", default=[], metavar="ENV=FLAGS",
                   help="train.py flags for one env's runs only, after the common ones (a regime: alfworld='--max-steps 30')")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: extra train.py flags for every run")
    args = p.parse_args()
    preset = FULL if args.full else DEFAULT
    preset_cells = args.cell_seeds is None
    for k, v in preset.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if preset_cells:     # the preset's widened cells apply where the study has them (--full --envs webshop: none)
        cells = {f"{e}/{m}" for e in args.envs for m in args.methods}
        args.cell_seeds = [c for c in args.cell_seeds if c.split("=")[0] in cells]
    args.extra = [a for a in args.extra if a != "--"]
    args.env_extra = {}
    for item in args.env_flags:
        env, eq, flags = item.partition("=")
        if not eq or env not in args.envs:
            raise SystemExit(f"compare: --env-flags {item!r}: ENV=FLAGS with ENV one of --envs ({' '.join(args.envs)})")
        args.env_extra[env] = shlex.split(flags)
    os.makedirs(args.out, exist_ok=True)
    args.command = shlex.join(["python", "bench/compare.py", *sys.argv[1:]])     # quoted: copy-paste runs it
    jobs = plan(args)
    clashes = [(run_dir(args.out, *j), c) for j in jobs for c in [protocol_clash(run_dir(args.out, *j), j, args)] if c]
    if clashes and not args.report_only:     # before any warm start: one line, never a silent reuse
        raise SystemExit(f"compare: {clashes[0][0]} was made with {clashes[0][1]}"
                         f"{f' (and {len(clashes) - 1} more runs)' if len(clashes) > 1 else ''}; use another --out")
    for j in jobs:                            # a kept summary from another protocol: one line, now
        load_summary(summary_path(args.out, "compare", job_name(j)), protocol(j, args))
    if not args.report_only:
        from tqdm import tqdm
        # the warm start is cached per env (--bc-seed 0): build it once per env first (`--iters 0`,
        # data parallel over the cores), so that every training can then run side by side
        for env, b in dict.fromkeys((e, bc_seed(args, s)) for e, _, s in jobs):
            if any(not done(j, args) for j in jobs if j[0] == env and bc_seed(args, j[2]) == b):
                print(warm_start(env, b, args), flush=True)
        bar = tqdm(total=len(jobs), desc="compare runs")
        with ThreadPoolExecutor(args.jobs) as ex:
            for j, rc, msg in ex.map(lambda j: launch(j, args), jobs):
                bar.update(1)
                bar.write(f"{j}: {msg}")
        bar.close()
    print(report(args, jobs))


if __name__ == "__main__":
    main()
