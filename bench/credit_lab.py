"""bench/credit_lab.py — the credit lab study: does a method's credit land on the decisions that matter?

    python bench/credit_lab.py                                   # rooms 4, 8, 16 × 7 methods × 10 seeds
    python bench/credit_lab.py --rooms 4 8 --methods grpo prover prover-random --seeds 0 1 2 3
    python bench/credit_lab.py --report-only                     # rebuild the table and plot

In `keydoor` (keydoor.py) the pivotal decision is known: `take key` in the first room; the door at
the end of a corridor of `rooms` rooms opens with p_key if the key is held, else p_nokey, drawn
per episode. The sweep parameter is the horizon (rooms between the decision and the outcome),
with a distractor object in every room. For every (rooms, method, seed) this runs
`train.py --env keydoor --env-opt rooms=R --method M --seed S` (paired seeds as in
bench/compare.py: the methods of a seed share the warm start and the first rollouts) and reads
from its metrics.jsonl:

    updates to q ≥ 0.9   first update where lab/q_key (the policy's exact probability of taking
                         the key on fixed pivot-room prompts) reaches 0.9; a run that never does
                         counts as --iters + 1 (censored; the table says how many reached it)
    final success        held-out success at the last update
    judge hit / accept   share of ProVer's proposals containing the key turn (lab/judge_hit), and
                         of verified proposals with Δ̂ > 0 (prover/accept_rate), builtin vs random
    credit precision     share of the method's per-turn credit mass on pivotal turns (lab.py)
    cost                 generated tokens (rollout + verify + judge) and env steps per update

Per horizon and method against GRPO: the paired differences (bench/paired.py: mean, 95%
bootstrap CI, exact sign-flip p). Writes results/credit_lab.{md,csv,png}; runs live in
results/credit_lab/runs/ and finished ones are reused, so the study can be built over sittings.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench/compare.py: METHOD_ARGS, run_train, finished)
import paired  # noqa: E402

METHODS = ["grpo", "grpo-matched", "prover", "prover-random", "gigpo", "spo-chain", "criticsearch"]
Q_TARGET = 0.9


def run_dir(out: str, rooms: int, method: str, seed: int) -> str:
    return os.path.join(out, "credit_lab", "runs", f"keydoor-r{rooms}-{method}-s{seed}")


def env_flags(rooms: int, args) -> list[str]:
    return ["--env", "keydoor", "--env-opt", f"rooms={rooms}", *args.extra]


def warm_start(rooms: int, seed: int, args) -> None:
    """The warm start the methods of (rooms, seed) share, built once (train.py --iters 0)."""
    d = os.path.join(args.out, "credit_lab", "runs", f"keydoor-r{rooms}-warmstart-s{seed}")
    if os.path.exists(os.path.join(d, "config.json")):
        return
    rc, _ = compare.run_train(d, [*env_flags(rooms, args), "--iters", "0", "--eval-every", "0", "--bc-seed", str(seed),
                                  "--workers", "1", "--threads", "1"], OMP_NUM_THREADS="1")
    if rc != 0:
        raise SystemExit(f"credit_lab: warm start rooms={rooms} seed={seed} failed (rc={rc}); see {d}/stdout.log")


def launch(job, args) -> str:
    rooms, method, seed = job
    d = run_dir(args.out, rooms, method, seed)
    if compare.finished(d, args.iters):
        return "skipped (done)"
    flags = [*env_flags(rooms, args), *compare.METHOD_ARGS[method], "--seed", str(seed), "--bc-seed", str(seed),
             "--iters", str(args.iters), "--eval-every", str(args.eval_every), "--eval-repeats", str(args.eval_repeats),
             "--checkpoint-every", str(args.eval_every), "--workers", "1", "--threads", "1"]
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = compare.run_train(d, flags, OMP_NUM_THREADS="1")
    with open(os.path.join(d, "wall.json"), "a") as f:
        f.write(json.dumps({"seconds": secs, "rc": rc}) + "\n")
    return f"rc={rc} in {secs:.0f}s"


def mean_of(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if key in r]
    return sum(v) / len(v) if v else None


def summarize(d: str, iters: int) -> dict | None:
    p = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(p):
        return None
    rows = [json.loads(line) for line in open(p) if line.strip()]
    tr = [r for r in rows if r.get("step", 0) > 0]
    ev = [r for r in rows if "eval/success" in r]
    if not tr or tr[-1]["step"] < iters or not ev:
        return None
    hit = next((r["step"] for r in tr if r.get("lab/q_key", 0.0) >= Q_TARGET), None)
    wall = sum(json.loads(line)["seconds"] for line in open(os.path.join(d, "wall.json"))) if os.path.exists(os.path.join(d, "wall.json")) else float("nan")
    return {"updates_to_q": hit if hit is not None else iters + 1, "reached": hit is not None,
            "q_key_final": tr[-1].get("lab/q_key"), "q_key_init": tr[0].get("lab/q_key"),
            "final_success": ev[-1]["eval/success"], "init_success": ev[0]["eval/success"],
            "judge_hit": mean_of(tr, "lab/judge_hit"), "accept_rate": mean_of(tr, "prover/accept_rate"),
            "credit_precision": mean_of(tr, "lab/credit_precision"),
            "tokens_per_update": sum(r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0) for r in tr) / len(tr),
            "env_steps_per_update": sum(r.get("env_steps/total", 0) for r in tr) / len(tr),
            "iter_seconds": sum(r.get("time/iter_s", 0) for r in tr) / len(tr), "wall_seconds": wall,
            "q_curve": [(r["step"], r.get("lab/q_key")) for r in tr]}


def optional(x, fmt="{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def report(args, jobs) -> str:
    res = {}
    for rooms, m, s in jobs:
        r = summarize(run_dir(args.out, rooms, m, s), args.iters)
        if r is not None:
            res[(rooms, m, s)] = r
    with open(os.path.join(args.out, "credit_lab.csv"), "w", newline="") as f:
        w = csv.writer(f)
        keys = [k for k in next(iter(res.values()), {}) if k != "q_curve"]
        w.writerow(["rooms", "method", "seed", *keys])
        for (rooms, m, s), r in sorted(res.items()):
            w.writerow([rooms, m, s, *(r[k] for k in keys)])

    def col(rooms, m, key):
        return {s: r[key] for (ro, mm, s), r in res.items() if ro == rooms and mm == m and r[key] is not None}

    lines = [f"Key-to-door, {args.iters} updates per run, paired seeds (the methods of a seed share its warm start and "
             f"first rollouts). Cells: mean [95% bootstrap CI] (n seeds); Δ: paired difference to GRPO with the exact "
             f"sign-flip p. Updates to q ≥ {Q_TARGET}: a run that never reaches it counts as {args.iters + 1}.\n"]
    for rooms in args.rooms:
        if not any(k[0] == rooms for k in res):
            continue
        lines += [f"## rooms = {rooms}\n",
                  "| method | updates to q ≥ 0.9 (reached) | Δ updates vs GRPO (p) | final q_key | Δ final q_key vs GRPO (p) | "
                  "final success | Δ success vs GRPO (p) | judge hit | accept | credit precision | tokens / update (× GRPO) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        g_upd, g_succ, g_tok = col(rooms, "grpo", "updates_to_q"), col(rooms, "grpo", "final_success"), col(rooms, "grpo", "tokens_per_update")
        for m in args.methods:
            upd = col(rooms, m, "updates_to_q")
            if not upd:
                continue
            reached = sum(col(rooms, m, "reached").values())
            succ, tok = col(rooms, m, "final_success"), col(rooms, m, "tokens_per_update")
            du = paired.paired(upd, g_upd) if m != "grpo" and g_upd else None
            qk, g_qk = col(rooms, m, "q_key_final"), col(rooms, "grpo", "q_key_final")
            dq = paired.paired(qk, g_qk) if m != "grpo" and g_qk else None
            ds = paired.paired(succ, g_succ) if m != "grpo" and g_succ else None
            tk = paired.mean(list(tok.values()))
            rel = f" ({tk / paired.mean(list(g_tok.values())):.2f}×)" if g_tok else ""
            lines.append(
                f"| {m} | {paired.fmt(paired.summary(list(upd.values())))} ({reached}/{len(upd)}) | "
                + (f"{paired.fmt(du, sign=True)} ({paired.fmt_p(du.get('p'))})" if du else "–") + " | "
                f"{paired.fmt(paired.summary(list(qk.values())), digits=3)} | "
                + (f"{paired.fmt(dq, digits=4, sign=True)} ({paired.fmt_p(dq.get('p'))})" if dq else "–") + " | "
                f"{paired.fmt(paired.summary(list(succ.values())), 100)} | "
                + (f"{paired.fmt(ds, 100, sign=True)} ({paired.fmt_p(ds.get('p'))})" if ds else "–") + " | "
                f"{optional(paired.mean(list(col(rooms, m, 'judge_hit').values())) if col(rooms, m, 'judge_hit') else None)} | "
                f"{optional(paired.mean(list(col(rooms, m, 'accept_rate').values())) if col(rooms, m, 'accept_rate') else None)} | "
                f"{optional(paired.mean(list(col(rooms, m, 'credit_precision').values())) if col(rooms, m, 'credit_precision') else None)} | "
                f"{tk:.0f}{rel} |")
        lines.append("")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "credit_lab.md"), "w") as f:
        f.write(f"# Credit lab\n\nCommand: `{' '.join(['python', 'bench/credit_lab.py', *sys.argv[1:]])}`\n\n{table}")
    plot(args, res, col)
    return table


def plot(args, res, col):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for m in args.methods:
        xs, ys, lo, hi = [], [], [], []
        for rooms in args.rooms:
            v = list(col(rooms, m, "updates_to_q").values())
            if not v:
                continue
            s = paired.summary(v)
            xs.append(rooms)
            ys.append(s["mean"])
            lo.append(s["mean"] - s.get("lo", s["mean"]))
            hi.append(s.get("hi", s["mean"]) - s["mean"])
        if xs:
            ax[0].errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=m)
        curves = [r["q_curve"] for (ro, mm, s), r in res.items() if mm == m and ro == max(args.rooms)]
        if curves:
            n = min(len(c) for c in curves)
            ax[1].plot([curves[0][i][0] for i in range(n)], [sum(c[i][1] for c in curves) / len(curves) for i in range(n)],
                       label=f"{m} (n={len(curves)})")
    ax[0].set_xlabel("rooms (horizon)")
    ax[0].set_ylabel(f"updates until q_key ≥ {Q_TARGET} (95% CI)")
    ax[0].set_xscale("log", base=2)
    ax[1].set_xlabel("policy updates")
    ax[1].set_ylabel(f"q_key, rooms = {max(args.rooms)} (mean over seeds)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "credit_lab.png"), dpi=90)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="credit lab: horizon sweep × methods × paired seeds on keydoor (resumable)")
    p.add_argument("--rooms", nargs="+", type=int, default=[4, 8, 16])
    p.add_argument("--methods", nargs="+", choices=list(compare.METHOD_ARGS), default=METHODS)
    p.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-repeats", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side (one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "results"))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: extra train.py flags for every run")
    args = p.parse_args()
    args.extra = [a for a in args.extra if a != "--"]
    jobs = [(r, m, s) for r in args.rooms for s in args.seeds for m in args.methods]
    if not args.report_only:
        from tqdm import tqdm
        t0 = time.time()
        todo = [j for j in jobs if not compare.finished(run_dir(args.out, *j), args.iters)]
        with ThreadPoolExecutor(args.jobs) as ex:      # warm starts first, each once per (rooms, seed)
            list(ex.map(lambda rs: warm_start(*rs, args), dict.fromkeys((r, s) for r, _, s in todo)))
        bar = tqdm(total=len(jobs), desc="credit lab runs")
        with ThreadPoolExecutor(args.jobs) as ex:
            for j, msg in zip(jobs, ex.map(lambda j: launch(j, args), jobs)):
                bar.update(1)
                bar.write(f"{j}: {msg}")
        bar.close()
        print(f"credit lab: {len(todo)} runs in {(time.time() - t0) / 60:.1f} min")
    print(report(args, jobs))


if __name__ == "__main__":
    main()
