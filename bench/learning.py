"""bench/learning.py — does the README's first command learn? Held-out success of the default
`train.py` run, per seed, against updates and wall-clock time.

    python bench/learning.py                                # ALFWorld, seeds 0 1 2, one after another
    python bench/learning.py --env webshop --seeds 0        # any benchmark; extra train.py flags after --
    python bench/learning.py --dirs runs/a runs/b           # only summarise existing run directories
    python bench/learning.py --dirs runs/a runs/b --recheck 4 --recheck-episodes 140   # + precise gains

Each seed is `python train.py --env <env> --seed <s> --out results/learning/runs/learning-<env>-s<s>` with
every other flag at its default (its own warm start, as a user gets it; a cached warm start is
reused). Finished runs are not re-run; a run with a checkpoint short of the requested updates
continues with --resume (its minutes accumulate). Writes:

  results/learning/learning_<env>.md    per seed: warm-start held-out success (score), every evaluation
                                        with its update and minute, the best and last values and their
                                        gain over the warm start, and the last evaluation within --minutes
  results/learning/learning_<env>.json  the same numbers, machine-readable
  results/learning/learning_<env>.png   held-out success against updates and against minutes, one line
                                        per seed
(--out: the folder; its runs/ holds the run directories, git-ignored)

`--recheck N` then re-evaluates each run's warm start and its checkpoint (the policy at the run's
last checkpoint: with a run stopped at --minutes, the 30-minute policy) with bench/diagnose.py at
the evaluation temperature, N times with different sampling seeds on `--recheck-episodes` held-out
tasks (default: the run's --eval-episodes; 140 = all of ALFWorld's valid_seen), and reports both
success rates and the gain with its standard error. Why: one evaluation of 128 episodes has a
sampling sd of ~4.4 points, so a gain read off the curve (a difference of two of them) is ±6.

Minutes are `time/wall_s` (process start to the evaluation: warm start + updates + evaluations).
Each run uses every core by itself (`--workers` = one local data-parallel process per core), so the
seeds run one after another by default; `--jobs N` runs N side by side, and then they share the
cores and each is slower than a user's single run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)      # config.py (the flags; no torch)


def run_seed(env: str, seed: int, out: str, extra: list[str]) -> int:
    """Run (or finish) one seed: a run that already has a checkpoint continues with --resume up to
    the iters this command asks for (train.py's default for the env unless --iters is passed)."""
    import config
    want = config.parse_args(["--env", env, *extra]).iters
    state = os.path.join(out, "checkpoint", "state.json")
    done = json.load(open(state))["step"] if os.path.exists(state) else None
    if done is not None and done >= want:
        return 0
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--env", env, "--seed", str(seed), "--out", out, *extra]
    if done is not None:
        cmd.append("--resume")
    with open(os.path.join(os.path.dirname(out), f"{os.path.basename(out)}.log"), "w") as log:
        return subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def curve(d: str) -> dict:
    rows = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl")) if line.strip()]
    ev = [r for r in rows if "eval/success" in r]
    if not ev or ev[0]["step"] != 0:
        raise ValueError(f"{d}: no warm-start evaluation (step 0) in metrics.jsonl")
    pts = [{"step": r["step"], "minutes": round(r["time/wall_s"] / 60, 1) if "time/wall_s" in r else None,
            "approx": bool(r.get("time/wall_s_reconstructed")),    # minutes rebuilt from the run's log
            "success": r["eval/success"], "score": r["eval/score"]} for r in ev]
    cfg = json.load(open(os.path.join(d, "config.json")))
    return {"dir": d, "seed": cfg["seed"], "flags": nondefault_flags(cfg), "points": pts}


# Config fields that name a run rather than change what it trains
_RUN_ONLY = {"seed", "out", "resume", "cache_dir", "threads", "workers", "checkpoint_every"}


def _diagnosed(run: str, model: str, episodes: int, temperature: float, seed: int) -> tuple[float, int]:
    """(success, episodes played) of `model` (a warm start; "" = the run's checkpoint) on the run's
    held-out split, by bench/diagnose.py (a finite split caps the episodes at its size)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, os.path.join(ROOT, "bench", "diagnose.py"), run, "--episodes", str(episodes),
               "--temperatures", str(temperature), "--seed", str(seed), "--out-dir", tmp] + (["--model", model] if model else [])
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"bench/diagnose.py failed for {model or run}: {r.stderr.strip().splitlines()[-1:]}")
        out = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".json"))
        m = json.load(open(out))["by_temperature"][str(float(temperature))]
    return m["success"], m["episodes"]


def recheck(c: dict, n: int, episodes: int, jobs: int) -> dict:
    """Warm start vs checkpoint, each evaluated n times (sampling seeds 0..n-1) on the same tasks.
    Pooled success rates; the standard errors are binomial over the episodes played (the tasks
    are fixed, so sampling is the only noise), and the gain's is sqrt(se_w² + se_f²)."""
    import math
    cfg = json.load(open(os.path.join(c["dir"], "config.json")))
    warm_model = cfg.get("model_dir") or cfg.get("model")
    if not warm_model:
        raise ValueError(f"{c['dir']}: config.json names no starting policy (model_dir / model) to re-evaluate")
    step = json.load(open(os.path.join(c["dir"], "checkpoint", "state.json")))["step"]
    T = cfg["eval_temperature"]
    todo = [(m, k) for m in (warm_model, "") for k in range(n)]
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        res = list(ex.map(lambda mk: _diagnosed(c["dir"], mk[0], episodes or cfg["eval_episodes"], T, mk[1]), todo))
    played = res[0][1]
    w, f = (sum(sr for sr, _ in part) / n for part in (res[:n], res[n:]))
    se = lambda p: math.sqrt(max(p * (1 - p), 1e-12) / (n * played))
    row = next((p for p in c["points"] if p["step"] == step), None)
    return {"step": step, "minutes": row["minutes"] if row else None, "episodes": played, "samplings": n,
            "warm": w, "final": f, "warm_runs": [sr for sr, _ in res[:n]], "final_runs": [sr for sr, _ in res[n:]],
            "gain": f - w, "gain_se": math.sqrt(se(w) ** 2 + se(f) ** 2)}


def nondefault_flags(cfg: dict) -> str:
    """The flags a run's config.json differs in from `train.py --env <env>`'s defaults (per-benchmark
    defaults included), e.g. "--tiny-hidden 128", so a summary says what it measured."""
    import config
    base = vars(config.parse_args(["--env", cfg["env"]]))
    return " ".join(f"--{k.replace('_', '-')} {cfg[k]}" for k in sorted(base)
                    if k not in _RUN_ONLY and k in cfg and cfg[k] != base[k])


def summarise(curves: list[dict], minutes: float) -> dict:
    for c in curves:
        p0, pts = c["points"][0], c["points"]
        best = max(pts[1:] or pts, key=lambda p: p["success"])
        inside = [p for p in pts if p["minutes"] is not None and p["minutes"] <= minutes]
        c.update(warm=p0["success"], warm_score=p0["score"], last=pts[-1]["success"], last_score=pts[-1]["score"],
                 best=best["success"], best_step=best["step"], gain_last=pts[-1]["success"] - p0["success"],
                 gain_best=best["success"] - p0["success"])
        if inside:
            c.update(within=inside[-1]["success"], within_score=inside[-1]["score"], within_step=inside[-1]["step"],
                     gain_within=inside[-1]["success"] - p0["success"],
                     gain_within_score=inside[-1]["score"] - p0["score"])
    return {"minutes": minutes, "runs": curves}


def write(env: str, s: dict, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    flags = sorted({c.get("flags", "") for c in s["runs"]})
    common = flags[0] if len(flags) == 1 else None         # "" = every run at the defaults
    what = (f"the default `train.py --env {env}` run" if common == "" else
            f"`train.py --env {env} {common}` (not the default)" if common else
            f"`train.py --env {env}` runs with different flags (see each seed)")
    lines = [f"# Held-out success (score) of {what}\n",
             "| seed | warm start | best success (update) | last | last − warm | within "
             f"{s['minutes']:g} min (update) | within − warm |", "|---|---|---|---|---|---|---|"]
    for c in s["runs"]:
        w = (f"{c['within']:.3f} ({c['within_score']:.3f}) @ {c['within_step']} | {c['gain_within']:+.3f} "
             f"({c['gain_within_score']:+.3f})" if "within" in c else "n/a | n/a")
        lines.append(f"| {c['seed']} | {c['warm']:.3f} ({c['warm_score']:.3f}) | {c['best']:.3f} ({c['best_step']}) | "
                     f"{c['last']:.3f} ({c['last_score']:.3f}) | {c['gain_last']:+.3f} | {w} |")
    if any("recheck" in c for c in s["runs"]):
        r0 = next(c["recheck"] for c in s["runs"] if "recheck" in c)
        lines += ["", f"Re-evaluated (`--recheck`): warm start and the run's checkpoint, each {r0['samplings']} × "
                  f"{r0['episodes']} held-out episodes (sampling seeds 0..{r0['samplings'] - 1}, same tasks); ± is "
                  "the standard error:", "",
                  "| seed | warm start | checkpoint (update @ min) | gain | per sampling seed: warm → checkpoint |",
                  "|---|---|---|---|---|"]
        for c in s["runs"]:
            r = c.get("recheck")
            if r:
                at = f"{r['step']}" + (f" @ {r['minutes']:g}" if r["minutes"] is not None else "")
                per = ", ".join(f"{a:.3f} → {b:.3f}" for a, b in zip(r["warm_runs"], r["final_runs"]))
                lines.append(f"| {c['seed']} | {r['warm']:.3f} | {r['final']:.3f} ({at}) | {r['gain']:+.3f} ± {r['gain_se']:.3f} | {per} |")
    lines.append("\nEvery evaluation (update: success / score @ minutes since launch; ~ = minutes rebuilt from "
                 "the run's log, see `time/wall_s_reconstructed` in its metrics):\n")
    for c in s["runs"]:
        pts = ", ".join(f"{p['step']}: {p['success']:.3f}/{p['score']:.3f}"
                        + (f" @{'~' if p['approx'] else ''}{p['minutes']:g}" if p["minutes"] is not None else "")
                        for p in c["points"])
        lines.append(f"- seed {c['seed']} (`{c['dir']}`{', ' + c['flags'] if common is None and c.get('flags') else ''}): {pts}")
    md = os.path.join(out_dir, f"learning_{env}.md")
    open(md, "w").write("\n".join(lines) + "\n")
    json.dump(s, open(os.path.join(out_dir, f"learning_{env}.json"), "w"), indent=1)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for c in s["runs"]:
        xs = [p["step"] for p in c["points"]]
        ax[0].plot(xs, [p["success"] for p in c["points"]], marker="o", ms=3, label=f"seed {c['seed']}")
        tm = [(p["minutes"], p["success"]) for p in c["points"] if p["minutes"] is not None]
        if tm:
            ax[1].plot(*zip(*tm), marker="o", ms=3, label=f"seed {c['seed']}")
    ax[0].set_xlabel("updates"), ax[1].set_xlabel("minutes since launch")
    ax[1].axvline(s["minutes"], color="grey", ls=":", lw=1)
    for a in ax:
        a.set_ylabel("held-out success"), a.grid(alpha=0.3), a.legend()
    fig.suptitle(f"train.py --env {env} " + ("(defaults)" if common == "" else common or "(mixed flags)"))
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"learning_{env}.png"), dpi=110)
    return md


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="alfworld")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="runs side by side (each one uses every core by itself)")
    p.add_argument("--minutes", type=float, default=30.0, help="report the last evaluation within this many minutes")
    p.add_argument("--dirs", nargs="+", help="summarise these run directories instead of running")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "learning"))
    p.add_argument("--recheck", type=int, default=0, help="re-evaluate each warm start and checkpoint this many times (sampling seeds)")
    p.add_argument("--recheck-episodes", type=int, default=0, help="held-out episodes per re-evaluation (0 = the run's --eval-episodes)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra train.py flags")
    a = p.parse_args(argv)
    extra = a.extra[1:] if a.extra[:1] == ["--"] else a.extra
    dirs = a.dirs
    if not dirs:
        dirs = [os.path.join(a.out, "runs", f"learning-{a.env}-s{s}") for s in a.seeds]
        for d in dirs:
            os.makedirs(os.path.dirname(d), exist_ok=True)
        with ThreadPoolExecutor(a.jobs) as ex:
            codes = list(ex.map(lambda sd: run_seed(a.env, sd[0], sd[1], extra), zip(a.seeds, dirs)))
        if any(codes):
            sys.exit(f"bench/learning.py: error: train.py failed for seeds "
                     f"{[s for s, c in zip(a.seeds, codes) if c]} (see results/learning/runs/*.log)")
    s = summarise([curve(d) for d in dirs], a.minutes)
    if a.recheck > 0:
        for c in s["runs"]:
            c["recheck"] = recheck(c, a.recheck, a.recheck_episodes, a.jobs)
    md = write(a.env, s, a.out)
    print(open(md).read())


if __name__ == "__main__":
    main()
