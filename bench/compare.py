"""bench/compare.py — the paper's comparison at laptop scale: methods × environments × paired seeds, with cost.

    python bench/compare.py                       # default preset: ALFWorld, grpo vs prover, 3 seeds
    python bench/compare.py --full                # every method on every env
    python bench/compare.py --methods grpo prover prover-random --envs keydoor --seeds 0 1 2 3 4 5 \
        --iters 40 --eval-repeats 4 -- --env-opt rooms=8

Paired protocol: for seed s every method's run is `train.py --seed s`, so all methods of a seed
play the same training tasks with the same sampling seeds in their first rollouts, and they start
from the same warm start — one shared by every seed (`--bc-seed 0`, built once per env by a
`train.py --iters 0` run; the default) or one per seed (`--warm-start per-seed`, `--bc-seed s`).
Methods then differ only in credit assignment, and the report compares each method with GRPO by
the per-seed differences (bench/paired.py: mean, 95% bootstrap CI, exact sign-flip p).

Each (env, method, seed) run lives in `<out>/runs/<env>-<method>-s<seed>`; `--jobs N` run side by
side (one CPU thread each). Finished runs are reused and interrupted ones resumed (`--resume`), so
a long study is built up over several sittings by re-running the same command.

Writes:
  <out>/compare.csv      one row per run: final held-out success/score, costs per update, wall time
  <out>/compare.md       per env: each method's final held-out success (mean [95% CI] (n)), its
                         paired difference to GRPO with CI and p, generated tokens and env steps
                         per update × GRPO; the average over envs and the relative change to GRPO
  <out>/compare_updates.png, <out>/compare_tokens.png   held-out success vs updates / tokens
The final held-out reading is the evaluation at the last update (`--eval-repeats R` plays every
evaluation task R times with different sampling seeds, for a less noisy reading).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "prover-random" is ProVer with the random-segment judge (the paper's ablation)
METHOD_ARGS = {
    "grpo": ["--method", "grpo"], "grpo-matched": ["--method", "grpo-matched"],
    "prover": ["--method", "prover"], "prover-random": ["--method", "prover", "--judge", "random"],
    "gigpo": ["--method", "gigpo"], "spo-chain": ["--method", "spo-chain"], "spo-tree": ["--method", "spo-tree"],
    "criticsearch": ["--method", "criticsearch"], "prover-plus": ["--method", "prover-plus"],
}
DEFAULT = dict(envs=["alfworld"], methods=["grpo", "prover"], seeds=[0, 1, 2], iters=80)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired  # noqa: E402  (bench/paired.py)
FULL = dict(envs=["alfworld", "webshop", "searchqa"], methods=list(METHOD_ARGS), seeds=[0, 1, 2], iters=60)


def run_dir(out, env, method, seed):
    return os.path.join(out, "runs", f"{env}-{method}-s{seed}")


def finished(d: str, iters: int) -> bool:
    p = os.path.join(d, "checkpoint", "state.json")
    return os.path.exists(p) and json.load(open(p))["step"] >= iters


def run_train(d: str, flags: list[str], **env_vars) -> tuple[int, float]:
    """`train.py <flags> --out d`, its output appended to d/stdout.log; returns (rc, seconds)."""
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    with open(os.path.join(d, "stdout.log"), "a") as log:
        rc = subprocess.call([sys.executable, os.path.join(ROOT, "train.py"), *flags, "--out", d], cwd=ROOT,
                             stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", **env_vars))
    return rc, time.time() - t0


def launch(job, args) -> tuple:
    env, method, seed = job
    d = run_dir(args.out, env, method, seed)
    if finished(d, args.iters):
        return job, 0, "skipped (done)"
    flags = ["--env", env, *METHOD_ARGS[method], "--seed", str(seed), "--iters", str(args.iters),
             "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
             "--eval-repeats", str(args.eval_repeats), "--threads", "1", "--workers", "1",
             "--bc-seed", str(bc_seed(args, seed)), *args.extra]
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = run_train(d, flags, OMP_NUM_THREADS="1")
    with open(os.path.join(d, "wall.json"), "a") as f:
        f.write(json.dumps({"seconds": secs, "rc": rc}) + "\n")
    return job, rc, f"rc={rc} in {secs:.0f}s"


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
    rc, secs = run_train(d, ["--env", env, "--iters", "0", "--bc-seed", str(b), "--eval-every", "0", *args.extra])
    if rc != 0:
        raise SystemExit(f"compare: the {env} warm start (bc seed {b}) failed (rc={rc}); see {d}/stdout.log")
    return f"{env} warm start ready in {secs:.0f}s"


def summarize_run(d: str) -> dict | None:
    p = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(p):
        return None
    rows = [json.loads(l) for l in open(p) if l.strip()]
    ev = [r for r in rows if "eval/success" in r]
    tr = [r for r in rows if r.get("step", 0) > 0]
    if not ev or not tr:
        return None
    last = ev[-1:]                                       # the evaluation at the last update
    wall = sum(json.loads(l)["seconds"] for l in open(os.path.join(d, "wall.json"))) if os.path.exists(os.path.join(d, "wall.json")) else float("nan")
    gen = [r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0) for r in tr]
    return {"updates": tr[-1]["step"], "init_success": ev[0]["eval/success"],
            "final_success": sum(r["eval/success"] for r in last) / len(last),
            "final_score": sum(r.get("eval/score", r["eval/success"]) for r in last) / len(last),
            "tokens_per_update": sum(gen) / len(tr), "rollout_tokens_per_update": sum(r.get("tokens/rollout", 0) for r in tr) / len(tr),
            "verify_tokens_per_update": sum(r.get("tokens/verify", 0) for r in tr) / len(tr),
            "judge_tokens_per_update": sum(r.get("tokens/judge", 0) for r in tr) / len(tr),
            "env_steps_per_update": sum(r.get("env_steps/total", 0) for r in tr) / len(tr),
            "iter_seconds": sum(r.get("time/iter_s", 0) for r in tr) / len(tr), "wall_seconds": wall,
            "curve": [(r["step"], r["eval/success"]) for r in ev],
            "tok_curve": cum_tokens(rows)}


def cum_tokens(rows):
    out, cum = [], 0
    for r in rows:
        cum += r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)
        if "eval/success" in r:
            out.append((cum, r["eval/success"]))
    return out


def write_csv(path: str, res: dict) -> None:
    with open(path, "w", newline="") as f:
        w = None
        for (env, method, seed), r in res.items():
            row = {"env": env, "method": method, "seed": seed, **{k: v for k, v in r.items() if "curve" not in k}}
            if w is None:
                w = csv.DictWriter(f, fieldnames=list(row), extrasaction="ignore")
                w.writeheader()
            w.writerow(row)


def collect(args, jobs) -> dict:
    """{(env, method, seed): summary} of the finished runs (unfinished ones are not compared)."""
    res = {}
    for env, method, seed in jobs:
        s = summarize_run(run_dir(args.out, env, method, seed))
        if s is not None and s["updates"] >= args.iters:
            res[(env, method, seed)] = s
    return res


def by_seed(res: dict, env: str, method: str, key: str) -> dict:
    return {s: r[key] for (e, m, s), r in res.items() if e == env and m == method}


def ratio(res, env, method, key) -> str:
    """Mean cost of `method` over its seeds, and × GRPO's."""
    a, b = by_seed(res, env, method, key), by_seed(res, env, "grpo", key)
    if not a:
        return "–"
    m = paired.mean(list(a.values()))
    return f"{m:.0f} ({m / paired.mean(list(b.values())):.2f}×)" if b and paired.mean(list(b.values())) > 0 else f"{m:.0f}"


def report(args, jobs) -> str:
    res = collect(args, jobs)
    write_csv(os.path.join(args.out, "compare.csv"), res)
    envs = [e for e in args.envs if any(k[0] == e for k in res)]
    methods = [m for m in args.methods if any(k[1] == m for k in res)]
    metric = {e: ("final_score" if e == "webshop" else "final_success") for e in envs}
    out = [f"Final held-out {'/'.join(sorted(set(metric.values())))} in points (success; WebShop: score) after "
           f"{args.iters} updates, evaluation tasks played {args.eval_repeats}× each. Cells: mean [95% bootstrap CI] "
           f"(n seeds). Δ vs GRPO: the mean paired difference over the seeds both have, its CI and the exact "
           f"sign-flip p. Costs per update, × GRPO.\n"]
    for e in envs:
        out += [f"## {e}\n", "| method | final held-out | Δ vs GRPO | p | generated tokens / update | env steps / update | wall min / run |",
                "|---|---|---|---|---|---|---|"]
        base = by_seed(res, e, "grpo", metric[e])
        for m in methods:
            vals = by_seed(res, e, m, metric[e])
            if not vals:
                continue
            d = paired.paired(vals, base) if m != "grpo" and base else None
            walls = [v / 60 for v in by_seed(res, e, m, "wall_seconds").values()]
            out.append(f"| {m} | {paired.fmt(paired.summary(list(vals.values())), 100)} | "
                       f"{paired.fmt(d, 100, sign=True) if d else '–'} | {paired.fmt_p(d.get('p')) if d else '–'} | "
                       f"{ratio(res, e, m, 'tokens_per_update')} | {ratio(res, e, m, 'env_steps_per_update')} | "
                       f"{paired.mean(walls):.1f} |")
        out.append("")
    if len(envs) > 1 and "grpo" in methods:   # the paper's headline: the average over benchmarks
        out += ["## average over benchmarks\n", "| method | mean final (points) | rel. to GRPO |", "|---|---|---|"]
        base = None
        for m in methods:
            per_env = [paired.mean(list(by_seed(res, e, m, metric[e]).values())) for e in envs if by_seed(res, e, m, metric[e])]
            if len(per_env) < len(envs):
                continue
            avg = paired.mean(per_env)
            base = avg if m == "grpo" else base
            out.append(f"| {m} | {100 * avg:.1f} | {f'{100 * (avg / base - 1):+.1f}%' if base else '–'} |")
    table = "\n".join(out) + "\n"
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(f"# Comparison\n\nCommand: `{' '.join(['python', 'bench/compare.py', *sys.argv[1:]])}`\n\n{table}")
    plot(args, res, envs, methods)
    return table


def plot(args, res, envs, methods):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for key, xl, fname in (("curve", "policy updates", "compare_updates.png"),
                           ("tok_curve", "generated tokens (rollout + verify + judge)", "compare_tokens.png")):
        fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
        for ax, e in zip(axes[0], envs):
            for m in methods:
                curves = [res[(e, m, s)][key] for s in args.seeds if (e, m, s) in res]
                if not curves:
                    continue
                n = min(len(c) for c in curves)
                xs = [sum(c[i][0] for c in curves) / len(curves) for i in range(n)]
                ys = [[c[i][1] for c in curves] for i in range(n)]
                mu = [sum(y) / len(y) for y in ys]
                lo, hi = [min(y) for y in ys], [max(y) for y in ys]
                line, = ax.plot(xs, mu, "o-", ms=3, label=f"{m} (n={len(curves)})")
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
            ax.set_title(e)
            ax.set_xlabel(xl)
            ax.set_ylabel("held-out success")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, fname), dpi=90)
        plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="methods × envs × seeds comparison (resumable)")
    p.add_argument("--full", action="store_true", help="every method on every env")
    p.add_argument("--envs", nargs="+")
    p.add_argument("--methods", nargs="+", choices=list(METHOD_ARGS))
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--iters", type=int)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--eval-repeats", type=int, default=1, help="play each evaluation task R times (train.py --eval-repeats)")
    p.add_argument("--warm-start", choices=["shared", "per-seed"], default="shared",
                   help="one warm start for every seed (--bc-seed 0) or one per seed (--bc-seed s); methods of a seed always share it")
    p.add_argument("--jobs", type=int, default=2, help="trainings run side by side (one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "results"))
    p.add_argument("--report-only", action="store_true", help="only rebuild the table and plots")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: extra train.py flags for every run")
    args = p.parse_args()
    preset = FULL if args.full else DEFAULT
    for k, v in preset.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.extra = [a for a in args.extra if a != "--"]
    jobs = [(e, m, s) for e in args.envs for s in args.seeds for m in args.methods]
    if not args.report_only:
        from tqdm import tqdm
        # the warm start is cached per env (--bc-seed 0): build it once per env first (`--iters 0`,
        # data parallel over the cores), so that every training can then run side by side
        for env, b in dict.fromkeys((e, bc_seed(args, s)) for e, _, s in jobs):
            if any(not finished(run_dir(args.out, e, m, s), args.iters) for e, m, s in jobs if e == env and bc_seed(args, s) == b):
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
