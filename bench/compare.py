"""bench/compare.py — the paper's comparison at laptop scale: methods × environments × seeds, with cost.

    python bench/compare.py                       # default preset: ALFWorld, grpo vs prover, 3 seeds (~1 h, 2 cores)
    python bench/compare.py --full                # every method on every env
    python bench/compare.py --methods grpo prover prover-random --envs alfworld --seeds 0 1 2 --iters 40

Each (env, method, seed) is one `train.py` run in `results/runs/<env>-<method>-s<seed>` with the
same number of updates, all starting from one warm-started policy (`--bc-seed 0`): seeds vary the
RL (tasks, sampling), methods differ only in credit assignment. That warm start is built first, once
per env, by a `train.py --iters 0` run with the default workers (`runs/<env>-warmstart`); then
`--jobs N` trainings run side by side (one CPU thread each) and load it from the cache. Finished
runs are skipped and interrupted ones resumed (`--resume`), so the command can be re-run until done.

Writes:
  results/compare.csv      one row per run: final held-out success/score, cost per update, wall time
  results/compare.md       per env: mean ± std over seeds of final held-out success (score for
                           WebShop), the average over envs, relative improvement over GRPO, generated
                           tokens and env steps per update relative to GRPO, wall time
  results/compare_updates.png, results/compare_tokens.png
                           held-out success against updates and against generated tokens, seeds shaded
Final held-out success = the mean of the last two evaluations (less noise than the last one alone).
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
    "criticsearch": ["--method", "criticsearch"],
}
DEFAULT = dict(envs=["alfworld"], methods=["grpo", "prover"], seeds=[0, 1, 2], iters=80)
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
             "--threads", "1", "--workers", "1", "--bc-seed", "0", *args.extra]  # one warm start shared by all seeds
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = run_train(d, flags, OMP_NUM_THREADS="1")
    with open(os.path.join(d, "wall.json"), "a") as f:
        f.write(json.dumps({"seconds": secs, "rc": rc}) + "\n")
    return job, rc, f"rc={rc} in {secs:.0f}s"


def warm_start(env: str, args) -> str:
    """Build (or find cached) the env's shared warm start: train.py with no updates, the same
    warm-start flags as every run (`--bc-seed 0` and the extra flags, which may change its cache
    key) and the default workers. Its log: runs/<env>-warmstart/stdout.log."""
    d = os.path.join(args.out, "runs", f"{env}-warmstart")
    rc, secs = run_train(d, ["--env", env, "--iters", "0", "--bc-seed", "0",
                             "--eval-episodes", str(args.eval_episodes), *args.extra])
    if rc != 0:
        raise SystemExit(f"compare: the {env} warm start failed (rc={rc}); see {d}/stdout.log")
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
    last = ev[-2:] if len(ev) >= 3 else ev[-1:]
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


def mean_std(xs):
    m = sum(xs) / len(xs)
    sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
    return m, sd


def report(args, jobs) -> str:
    res = {}
    with open(os.path.join(args.out, "compare.csv"), "w", newline="") as f:
        w = None
        for env, method, seed in jobs:
            s = summarize_run(run_dir(args.out, env, method, seed))
            if s is None or s["updates"] < args.iters:   # unfinished runs are not compared
                continue
            res[(env, method, seed)] = s
            row = {"env": env, "method": method, "seed": seed, **{k: v for k, v in s.items() if "curve" not in k}}
            if w is None:
                w = csv.DictWriter(f, fieldnames=list(row))
                w.writeheader()
            w.writerow(row)
    envs = [e for e in args.envs if any(k[0] == e for k in res)]
    methods = [m for m in args.methods if any(k[1] == m for k in res)]
    metric = {e: ("final_score" if e == "webshop" else "final_success") for e in envs}
    lines = [f"Final held-out {'/'.join(sorted(set(metric.values())))} (mean ± std over seeds; success for ALFWorld/SearchQA, "
             f"score for WebShop), {args.iters} updates each.\n",
             "| method | " + " | ".join(envs) + " | avg | rel. to GRPO | tokens/update (× GRPO) | env steps/update (× GRPO) | wall min/run |",
             "|---|" + "---|" * (len(envs) + 5)]
    base = {}
    for m in methods:
        cells, avgs, toks, steps, walls = [], [], [], [], []
        for e in envs:
            vals = [res[(e, m, s)][metric[e]] for s in args.seeds if (e, m, s) in res]
            if not vals:
                cells.append("–")
                continue
            mu, sd = mean_std(vals)
            cells.append(f"{100 * mu:.1f} ± {100 * sd:.1f} (n={len(vals)})")
            avgs.append(mu)
            toks += [res[(e, m, s)]["tokens_per_update"] for s in args.seeds if (e, m, s) in res]
            steps += [res[(e, m, s)]["env_steps_per_update"] for s in args.seeds if (e, m, s) in res]
            walls += [res[(e, m, s)]["wall_seconds"] / 60 for s in args.seeds if (e, m, s) in res]
        avg = sum(avgs) / len(avgs) if avgs else float("nan")
        t, st = sum(toks) / len(toks), sum(steps) / len(steps)
        if m == "grpo":
            base = {"avg": avg, "tok": t, "steps": st}
        rel = f"{100 * (avg / base['avg'] - 1):+.1f}%" if base and base["avg"] > 0 else "–"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {100 * avg:.1f} | {rel} | {t:.0f} ({t / base['tok']:.2f}×) | "
                     f"{st:.0f} ({st / base['steps']:.2f}×) | {sum(walls) / len(walls):.1f} |" if base else
                     f"| {m} | " + " | ".join(cells) + f" | {100 * avg:.1f} | – | {t:.0f} | {st:.0f} | {sum(walls) / len(walls):.1f} |")
    table = "\n".join(lines) + "\n"
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
        for env in dict.fromkeys(e for e, _, _ in jobs):
            if any(not finished(run_dir(args.out, env, m, s), args.iters) for e, m, s in jobs if e == env):
                print(warm_start(env, args), flush=True)
        bar = tqdm(total=len(jobs), desc="compare runs")
        with ThreadPoolExecutor(args.jobs) as ex:
            for j, rc, msg in ex.map(lambda j: launch(j, args), jobs):
                bar.update(1)
                bar.write(f"{j}: {msg}")
        bar.close()
    print(report(args, jobs))


if __name__ == "__main__":
    main()
