"""bench/credit_phase.py — where does credit decide learning speed? GRPO vs exact credit over keydoor regimes.

    python bench/credit_phase.py --cells rooms=4 rooms=8 --lr-mult 1 3 10 --seeds 0 1 2 3 --iters 20
    python bench/credit_phase.py --cells rooms=4 rooms=4,p_key=0.6,p_nokey=0.4 rooms=4,group_size=4
    python bench/credit_phase.py --report-only ...          # rebuild the table and the heat map

A coarse, cheap screen: for every cell × learning-rate multiplier × method × seed it
runs `train.py --env keydoor --method M --seed S --lr (m × the default)` with the cell's options and
reads `lab/p_key_held` (oracle.py's exact probability that the key is held when the agent leaves
the pivot room) at every update. No verification, no judge: the methods are the two ends of the
credit ladder, GRPO (one outcome advantage on every turn) and `oracle` (A*(s_t, a_t) = Q^π − V^π
exactly, alone: perfect credit), plus any other train.py method named with --methods.

A cell is comma-separated KEY=VALUE items: keys of keydoor's options (rooms, pivot, p_key,
p_nokey, distractors, trap, ...) go to `--env-opt`, keys of train.py's config (group_size,
tasks_per_iter, max_steps, temperature, ...) to the flag of that name; they are checked before
anything runs. Paired seeds as in bench/credit_lab.py: the runs of a (cell, seed) share one warm
start (built once, cached under results/warmstarts/) and the first rollouts.

Per (cell, lr multiplier), paired over seeds against GRPO at the same multiplier:

    speed   updates until the method's p_key_held first reaches GRPO's final p_key_held of the same
            seed (a run that never does counts as --iters + 1), over GRPO's own updates to it;
            < 1 = faster than GRPO, ≤ 0.5 = "at least twice as fast"; the target moves with the
            horizon (GRPO's final point of a curve still rising)
    half-way  median updates until p_key_held is half the way from the warm start to exact credit's
            final mean in the cell (a target fixed by the regime); censored runs sort last
    AUC     mean p_key_held of the policies after 0..iters − 1 updates (taken before each update); Δ AUC vs GRPO with its 95% t CI, exact
            sign-flip p and its Holm adjustment (family: every Δ AUC of the table)
    best lr GRPO's multiplier with the highest AUC per cell (the lab must not handicap GRPO)

Writes results/NAME.{md,csv,png} (--name, a path under --out: default credit_phase/credit_phase, the
study's folder and its stem; csv: one row per run; png: a heat
map of the mean speed ratio, cells × multipliers, for each non-GRPO method). Runs live in
results/credit_phase/runs/ (git-ignored); each finished run's summary is kept in
results/summaries/credit_phase/ with the protocol it ran under, so the screen resumes over sittings
and on a fresh clone (finished runs are never re-run).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import os
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import runs  # noqa: E402  (bench/runs.py)
import credit_lab  # noqa: E402  (summarize: a lab run's metrics)
import paired  # noqa: E402

METHODS = ["grpo", "oracle"]
STUDY = "credit_phase"


def parse_cell(cell: str) -> tuple[list[str], list[str]]:
    """'rooms=4,p_nokey=0.4,group_size=4' → (env-opt items, train.py flags); one clear error line
    naming a key that is neither a keydoor option nor a config field."""
    import config
    from sims import keydoor
    fields = {f.name for f in dataclasses.fields(config.Config)}
    opts, flags = [], []
    for item in filter(None, cell.split(",")):
        if "=" not in item:
            raise SystemExit(f"credit_phase: cell {cell!r}: item {item!r} is not KEY=VALUE")
        k, v = item.split("=", 1)
        if k in keydoor.OPTIONS:
            opts.append(f"{k}={v}")
        elif k in fields and k not in NOT_VARIED:
            flags += [f"--{k.replace('_', '-')}", v]
        else:
            raise SystemExit(f"credit_phase: cell {cell!r}: {k!r} is neither a keydoor option "
                             f"({', '.join(keydoor.OPTIONS)}) nor a train.py setting this screen may vary")
    return opts, flags


NOT_VARIED = ("env", "method", "seed", "lr", "iters", "out", "env_opt")


def parse_arm(arm: str) -> tuple[str, list[str]]:
    """An arm is a train.py method, optionally with settings of its own after a colon:
    'prover-plus:verify_crn=true,verify_k=4' → ('prover-plus', ['--verify-crn', '--verify-k', '4']).
    Why: a ProVer option (CRN, K, negative credit …) is compared with the other arms on the same seeds
    and cells without becoming a cell of its own (which would re-run GRPO and the oracle for it).
    Booleans take true/false. One clear line for a key that is not a config field."""
    import config
    method, _, spec = arm.partition(":")
    fields = {f.name: f for f in dataclasses.fields(config.Config)}
    flags = []
    for item in filter(None, spec.split(",")):
        k, eq, v = item.partition("=")
        if not eq or k not in fields or k in NOT_VARIED:
            raise SystemExit(f"credit_phase: arm {arm!r}: {item!r} is not KEY=VALUE of a train.py setting an arm may set")
        if str(fields[k].type) in ("bool", "<class 'bool'>"):
            if v.lower() not in ("true", "false"):
                raise SystemExit(f"credit_phase: arm {arm!r}: {k} takes true or false, not {v!r}")
            flags.append(f"--{'' if v.lower() == 'true' else 'no-'}{k.replace('_', '-')}")
        else:
            flags += [f"--{k.replace('_', '-')}", v]
    return method, flags


def check_arms(arms: list[str], prog: str) -> None:
    """Every arm names a train.py method and its settings pass train.py's own checks (before any run)."""
    import config
    for a in arms:
        method, flags = parse_arm(a)
        if method not in config.CHOICES["method"]:
            raise SystemExit(f"{prog}: --methods: {method!r} is not a train.py method")
        try:
            config.validate(config.parse_args(["--env", "keydoor", "--method", method, *flags]))
        except (ValueError, SystemExit) as e:
            raise SystemExit(f"{prog}: arm {a!r}: {e}")


def check_cells(cells: list[str]) -> None:
    """Every cell parses and its options and flags pass train.py's own checks (before any run)."""
    import config
    for c in cells:
        opts, flags = parse_cell(c)
        argv = ["--env", "keydoor", *[x for o in opts for x in ("--env-opt", o)], *flags]
        try:
            config.validate(config.parse_args(argv))
        except (ValueError, SystemExit) as e:
            raise SystemExit(f"credit_phase: cell {c!r}: {e}")


def slug(cell: str) -> str:
    s = cell.replace("=", "").replace(",", "-").replace(".", "p")
    return s if len(s) <= 60 else s[:40] + "-" + hashlib.sha1(cell.encode()).hexdigest()[:8]


def lr_of(mult: float) -> float:
    import config
    return config.Config().lr * mult


def name_of(job) -> str:
    cell, mult, method, seed = job
    return f"{slug(cell)}-lr{mult:g}-{slug(method.replace(':', '-'))}-s{seed}"


def run_dir(out: str, job) -> str:
    return os.path.join(out, STUDY, "runs", name_of(job))


def protocol(job, args) -> dict:
    """What a kept summary must match to be reused: the job, the run length, the extra flags and,
    for an arm whose credit was revised (ladder.REVISION), that revision."""
    from lab import ladder
    cell, mult, method, seed = job
    p = {"cell": cell, "lr_mult": mult, "method": method, "seed": seed, "iters": args.iters,
         "eval_every": args.eval_every, "extra": list(args.extra)}
    base = parse_arm(method)[0]
    if base in ladder.REVISION:
        p["credit_rev"] = ladder.REVISION[base]
    return p


def kept(job, args) -> str:
    return runs.summary_path(args.out, STUDY, name_of(job))


def result(job, args) -> dict | None:
    r = credit_lab.summarize(run_dir(args.out, job), args.iters)
    if r is not None and r["p_curve"]:
        runs.save_summary(kept(job, args), protocol(job, args), r)
        return r
    return runs.load_summary(kept(job, args), protocol(job, args))


def base_flags(cell: str, seed: int, args) -> list[str]:
    opts, flags = parse_cell(cell)
    return ["--env", "keydoor", *[x for o in opts for x in ("--env-opt", o)], *flags, "--seed", str(seed),
            "--bc-seed", str(seed), "--workers", "1", "--threads", "1", "--cache-dir", runs.warm_dir(args), *args.extra]


def warm_start(cell: str, seed: int, args) -> None:
    """The (cell, seed)'s warm start, built once into the shared cache (train.py --iters 0)."""
    d = os.path.join(args.out, STUDY, "runs", f"{slug(cell)}-warmstart-s{seed}")
    if os.path.exists(os.path.join(d, "config.json")):
        return
    rc, _ = runs.run_train(d, [*base_flags(cell, seed, args), "--iters", "0", "--eval-every", "0"], OMP_NUM_THREADS="1")
    if rc != 0:
        raise SystemExit(f"credit_phase: warm start {cell} seed {seed} failed (rc={rc}); see {d}/stdout.log")


def launch(job, args) -> str:
    cell, mult, method, seed = job
    if result(job, args) is not None:
        return "skipped (done)"
    d = run_dir(args.out, job)
    base, arm_flags = parse_arm(method)
    flags = [*base_flags(cell, seed, args), "--method", base, *arm_flags, "--lr", f"{lr_of(mult):.6g}", "--iters", str(args.iters),
             "--eval-every", str(args.eval_every), "--checkpoint-every", str(max(1, args.iters // 4))]
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = runs.run_train(d, flags, OMP_NUM_THREADS="1")
    r = result(job, args)
    return f"rc={rc} in {secs:.0f}s" + ("" if r is not None else " (not finished: see its stdout.log)")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def first_reach(curve: list, target: float, censor: int) -> int:
    return next((t for t, v in curve if v is not None and v >= target - 1e-12), censor)


def auc(curve: list) -> float:
    vals = [v for _, v in curve if v is not None]
    return sum(vals) / len(vals)


def speed(res: dict, cell, mult, method, iters: int) -> dict:
    """{seed: updates of `method` to GRPO's final p_key_held / GRPO's own updates to it}."""
    out = {}
    for (c, m, me, s), r in res.items():
        g = res.get((c, m, "grpo", s))
        if (c, m, me) != (cell, mult, method) or g is None:
            continue
        target = g["p_curve"][-1][1]
        out[s] = first_reach(r["p_curve"], target, iters + 1) / first_reach(g["p_curve"], target, iters + 1)
    return out


def halfway(res: dict, cell, mult, method, frac: float = 0.5) -> dict:
    """{seed: updates u (the policy after u updates; the curve's x − 1) at which `method`'s p first
    reaches p_init + frac·(exact credit's final mean − p_init), None if it never does}: a target
    fixed by the warm start and the oracle runs of the cell, so it does not move with the horizon
    the way GRPO's own final point (of a curve still rising) does; None = censored."""
    fin = [r["p_curve"][-1][1] for (c, m, me, s), r in res.items() if (c, m, me) == (cell, mult, "oracle")]
    if not fin:
        return {}
    top = sum(fin) / len(fin)
    out = {}
    for (c, m, me, s), r in res.items():
        if (c, m, me) == (cell, mult, method):
            p0 = r["p_curve"][0][1]
            x = first_reach(r["p_curve"], p0 + frac * (top - p0), 0)
            out[s] = x - 1 if x else None
    return out


def fmt_halfway(h: dict) -> str:
    """'median (reached k of n)'; censored runs sort last, so a median among them reads '> last'."""
    if not h:
        return "–"
    import statistics
    n, reached = len(h), [v for v in h.values() if v is not None]
    vals = sorted(reached) + [float("inf")] * (n - len(reached))
    med = statistics.median(vals)
    return f"{'never' if med == float('inf') else format(med, 'g')} ({len(reached)} of {n})"


def collect(args, jobs) -> dict:
    """{job: summary} of every finished job (its run directory, else its kept summary)."""
    return {j: r for j in jobs if (r := result(j, args)) is not None}


def report(args, jobs) -> str:
    res = collect(args, jobs)
    os.makedirs(os.path.dirname(os.path.join(args.out, args.name)), exist_ok=True)      # NAME may name a folder
    with open(os.path.join(args.out, f"{args.name}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "lr_mult", "method", "seed", "p_key_init", "p_key_final", "auc", "updates_to_grpo_final",
                    "speed_ratio", "final_success", "tokens_per_update", "iter_seconds", "updates_to_halfway"])
        for (c, m, me, s), r in sorted(res.items(), key=lambda kv: tuple(map(str, kv[0]))):
            g = res.get((c, m, "grpo", s))
            u = first_reach(r["p_curve"], g["p_curve"][-1][1], args.iters + 1) if g else ""
            sp = speed(res, c, m, me, args.iters).get(s, "")
            hw = halfway(res, c, m, me).get(s)
            w.writerow([c, m, me, s, r["p_curve"][0][1], r["p_curve"][-1][1], auc(r["p_curve"]), u, sp,
                        r["final_success"], r["tokens_per_update"], r["iter_seconds"], "" if hw is None else hw])
    cells = [c for c in args.cells if any(k[0] == c for k in res)]
    deltas = {}
    for c in cells:
        for m in args.lr_mult:
            base = {s: auc(r["p_curve"]) for (cc, mm, me, s), r in res.items() if (cc, mm, me) == (c, m, "grpo")}
            for me in args.methods:
                if me == "grpo":
                    continue
                a = {s: auc(r["p_curve"]) for (cc, mm, mme, s), r in res.items() if (cc, mm, mme) == (c, m, me)}
                if a and base:
                    deltas[c, m, me] = paired.paired(a, base)
    adj = paired.holm_family(deltas)
    lines = [f"Key-to-door, {args.iters} updates per run, paired seeds (the runs of a cell and seed share their warm "
             f"start and first rollouts). p = `lab/p_key_held`, the exact probability that the key is held when the agent "
             f"leaves the pivot room (oracle.py). speed: per seed, updates until the method's p reaches GRPO's final p of "
             f"the same seed and multiplier (never: {args.iters + 1}), over GRPO's own updates to it — mean [95% t CI] "
             f"(n); ≤ 0.5 = at least twice as fast (the seeds where it is: next column). This target moves with the horizon "
             f"(GRPO's final point of a curve still rising) and a run that never reaches it counts as {args.iters + 1}; "
             f"half-way does not move: the median updates until p reaches half the way from the warm start to exact "
             f"credit's final mean in the cell (censored runs sort last; reached k of n). AUC: mean p of the policies after "
             f"0..{args.iters - 1} updates (measured before each update); Δ AUC vs GRPO at the same "
             f"multiplier with the exact two-sided sign-flip p and Holm's adjustment over the table's {len(adj)} Δ AUC tests. "
             f"lr multiplier × train.py's default --lr {lr_of(1.0):g}.\n",
             "| cell | lr × | method | p init → final | AUC | speed (× GRPO's updates) | seeds ≥ 2× faster | updates to half-way | Δ AUC vs GRPO | p | p (Holm) | s / update |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        for m in args.lr_mult:
            for me in args.methods:
                rs = {s: r for (cc, mm, mme, s), r in res.items() if (cc, mm, mme) == (c, m, me)}
                if not rs:
                    continue
                p0 = paired.mean([r["p_curve"][0][1] for r in rs.values()])
                p1 = paired.mean([r["p_curve"][-1][1] for r in rs.values()])
                sp = speed(res, c, m, me, args.iters) if me != "grpo" else {}
                d = deltas.get((c, m, me))
                lines.append(f"| {c} | {m:g} | {me} | {p0:.3f} → {p1:.3f} | "
                             f"{paired.fmt(paired.summary([auc(r['p_curve']) for r in rs.values()]), digits=3)} | "
                             f"{paired.fmt(paired.summary(list(sp.values())), digits=2) if sp else '–'} | "
                             f"{f'{sum(v <= 0.5 for v in sp.values())} of {len(sp)}' if sp else '–'} | "
                             f"{fmt_halfway(halfway(res, c, m, me))} | "
                             f"{paired.fmt(d, digits=3, sign=True) if d else '–'} | {paired.fmt_p(d.get('p')) if d else '–'} | "
                             f"{paired.fmt_p(adj.get((c, m, me))) if d else '–'} | "
                             f"{paired.mean([r['iter_seconds'] for r in rs.values()]):.1f} |")
        best = {m: paired.mean([auc(r["p_curve"]) for (cc, mm, me, s), r in res.items() if (cc, mm, me) == (c, m, "grpo")])
                for m in args.lr_mult if any((k[0], k[1], k[2]) == (c, m, "grpo") for k in res)}
        if best:
            lines.append(f"| {c} | GRPO's best lr × by AUC: {max(best, key=best.get):g} | | | | | | | | | | |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write(f"# Where credit decides learning: GRPO vs exact credit over keydoor regimes\n\n"
                f"Command: `{' '.join(['python', 'bench/credit_phase.py', *sys.argv[1:]])}`\n\n{table}")
    if res:
        plot(args, res, cells)
    return table


def plot(args, res, cells):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    others = [m for m in args.methods if m != "grpo"]
    fig, axes = plt.subplots(1, len(others) + 1, figsize=(4 + 3.2 * len(args.lr_mult) * (len(others) + 1) / 2, 1.2 + 0.5 * len(cells)),
                             squeeze=False)
    for ax, me in zip(axes[0], others):
        z = np.full((len(cells), len(args.lr_mult)), np.nan)
        for i, c in enumerate(cells):
            for j, m in enumerate(args.lr_mult):
                sp = list(speed(res, c, m, me, args.iters).values())
                if sp:
                    z[i, j] = sum(sp) / len(sp)
        im = ax.imshow(z, cmap="RdBu", vmin=0, vmax=2, aspect="auto")
        for i in range(len(cells)):
            for j in range(len(args.lr_mult)):
                if z[i, j] == z[i, j]:
                    ax.text(j, i, f"{z[i, j]:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(args.lr_mult)), [f"lr ×{m:g}" for m in args.lr_mult])
        # long cells wrap at their commas, so the labels stay inside the figure
        ax.set_yticks(range(len(cells)), [textwrap.fill(c.replace(",", ", "), 30).replace(", ", ",") for c in cells], fontsize=7)
        ax.set_title(f"{me}: updates to GRPO's final p_key_held\n× GRPO's own (< 1 faster; mean over seeds)", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.04)
    ax = axes[0][-1]                       # the curves of the first cell, every method and multiplier
    c = cells[0]
    for m in args.lr_mult:
        for me in args.methods:
            curves = [r["p_curve"] for (cc, mm, mme, s), r in res.items() if (cc, mm, mme) == (c, m, me)]
            if curves:
                n = min(len(x) for x in curves)
                ax.plot([curves[0][i][0] for i in range(n)], [sum(x[i][1] for x in curves) / len(curves) for i in range(n)],
                        ls="-" if me == "grpo" else "--", label=f"{me} lr×{m:g} (n={len(curves)})")
    ax.set_title(f"p_key_held, {c} (mean over seeds)", fontsize=8)
    ax.set_xlabel("p_key_held measured before update x (the policy after x − 1 updates)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, f"{args.name}.png"), dpi=90)
    plt.close(fig)


def parse_common(p, methods: list, seeds: list, iters: int, name: str, prog: str, required: list):
    """The flags this screen shares with bench/credit_ladder.py (they run the same runs), parsed and checked."""
    p.add_argument("--methods", nargs="+", default=methods,
                   help=f"arms: train.py methods, each optionally with settings of its own, METHOD:KEY=VALUE,... "
                        f"(e.g. prover-plus:verify_crn=true); must include {' and '.join(required)}")
    p.add_argument("--seeds", nargs="+", type=int, default=seeds)
    p.add_argument("--iters", type=int, default=iters)
    p.add_argument("--eval-every", type=int, default=0,
                   help="held-out evaluation every N updates (0: --iters, i.e. before the first update and after the last)")
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side (one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "results"))
    p.add_argument("--name", default=name, help="the report's path stem under --out: writes NAME.{md,csv,png} there")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: extra train.py flags for every run")
    args = p.parse_args()
    args.extra = [a for a in args.extra if a != "--"]
    args.eval_every = args.eval_every or args.iters
    if not set(required) <= set(args.methods):
        raise SystemExit(f"{prog}: --methods must include {' and '.join(required)}")
    check_arms(args.methods, prog)
    if args.iters < 2:
        raise SystemExit(f"{prog}: --iters must be >= 2")
    return args


def run_study(args, jobs, label: str) -> None:
    """Run every job not yet finished (warm starts first, --jobs side by side); a kept summary made
    under another protocol is refused with one line before any run. Shared by credit_phase,
    credit_ladder and credit_parts, whose runs are the same runs."""
    for j in jobs:
        runs.load_summary(kept(j, args), protocol(j, args))
    if args.report_only:
        return
    t0 = time.time()
    todo = [j for j in jobs if result(j, args) is None]
    runs.run_jobs(jobs, list(dict.fromkeys((c, s) for c, _, _, s in todo)), lambda c, s: warm_start(c, s, args),
                  lambda j: launch(j, args), args.jobs, f"{label} runs", name_of)
    print(f"{label}: {len(todo)} runs in {(time.time() - t0) / 60:.1f} min (--jobs {args.jobs} side by side)")


def main():
    p = argparse.ArgumentParser(description="GRPO vs exact credit over keydoor regimes and learning rates (resumable)")
    p.add_argument("--cells", nargs="+", default=["rooms=4", "rooms=8"],
                   help="regimes: comma-separated KEY=VALUE of keydoor options and train.py settings")
    p.add_argument("--lr-mult", nargs="+", type=float, default=[1.0], help="learning rates as multiples of the default --lr")
    args = parse_common(p, METHODS, [0, 1, 2, 3], 20, f"{STUDY}/{STUDY}", "credit_phase", ["grpo"])
    if any(m <= 0 for m in args.lr_mult):
        raise SystemExit("credit_phase: every --lr-mult must be > 0")
    check_cells(args.cells)
    jobs = [(c, m, me, s) for c in args.cells for s in args.seeds for m in args.lr_mult for me in args.methods]
    run_study(args, jobs, "credit phase")
    print(report(args, jobs))


if __name__ == "__main__":
    main()
