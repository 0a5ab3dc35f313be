"""bench/credit_lab.py — the credit lab study: does a method's credit land on the decisions that matter?

    python bench/credit_lab.py                                   # rooms 4, 8, 16 × the 7 default methods × 10 seeds
    # (results/credit_lab/credit_lab.md ran 9: the default 7 with prover-plus and grpo-matched-plus; its command heads the file)
    python bench/credit_lab.py --rooms 4 8 --methods grpo prover prover-random --seeds 0 1 2 3
    python bench/credit_lab.py --report-only                     # rebuild the table and plot
    python bench/credit_lab.py --name prover_options/prover_options --rooms 8 16 --methods grpo prover prover-allmixed \
        prover-matched prover-se prover-shrink prover-crn prover-adaptive-k prover-neg prover-focus0 \
        prover-judge-success --versus grpo prover                # each option alone
    python bench/credit_lab.py --name prover_plus/prover_plus --rooms 4 --methods grpo prover prover-plus \
        prover-plus-ak --versus grpo prover                      # ProVer's options (results/prover_plus/)

In keydoor (sims/keydoor.py) the pivotal decision is known: `take key` in the first room; the
door at the end of `rooms` rooms opens with p_key if the key is held, else p_nokey. The sweep is
the horizon (rooms between decision and outcome). For every (rooms, method, seed) this runs
`train.py --env keydoor --env-opt rooms=R --method M --seed S` (paired seeds as in
bench/compare.py) and reads from its metrics.jsonl:

    updates to q ≥ 0.9   first update where lab/q_key reaches 0.9 (censored at --iters + 1)
    updates to GRPO's    first update where q_key reaches GRPO's final q_key of the same seed, and
      final q            the per-seed ratio to GRPO's own updates to it (< 1 = faster than GRPO)
    final success        held-out success at the last update
    judge hit / accept   share of proposals containing the key turn (lab/judge_hit); of verified
                         proposals with Δ̂ > 0 (prover/accept_rate)
    credit precision     share of per-turn credit mass on pivotal turns (lab/metrics.py)
    cost                 generated tokens and env steps per update; verify tokens per credited segment

Per horizon and method against GRPO (and each --versus method): paired differences (bench/paired.py).
Writes results/NAME.{md,csv,png} (--name: default credit_lab/credit_lab). Resumable as
bench/compare.py (bench/runs.py): runs in results/credit_lab/runs/ (git-ignored), summaries in
results/summaries/credit_lab/ and warm starts in results/warmstarts/ (committed); a seed whose
methods started from different weights is left out, named under its table.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench/compare.py: METHOD_ARGS)
import runs  # noqa: E402  (bench/runs.py)
import paired  # noqa: E402

METHODS = ["grpo", "grpo-matched", "prover", "prover-random", "gigpo", "spo-chain", "criticsearch"]
# Lab variants beyond bench/compare.py's methods: prover-plus's three options spelled as flags (PP),
# one option at a time on top, the cost arm (CRN + adaptive K from 4), GRPO at 3× the learning rate
# (is a faster learner just a larger step?) and GRPO with prover-plus's extra generated tokens.
PP = ["--method", "prover", "--max-success", "7", "--judge-success", "judge", "--credit-scope", "matched"]
VARIANTS = {
    "prover-allmixed": ["--method", "prover", "--max-success", "7"],
    "prover-plus-flags": PP,
    "prover-plus-neg": [*PP, "--negative-credit"],
    "prover-plus-lam3": [*PP, "--lam", "3"],
    "prover-plus-lam3-neg": [*PP, "--lam", "3", "--negative-credit"],
    "prover-plus-lam3-focus0": [*PP, "--lam", "3", "--focus", "0"],
    "prover-plus-ak-se": [*PP, "--verify-crn", "--verify-k", "4", "--verify-k-max", "16", "--credit-test", "se"],
    # matched scope, shrink test, CRN and focus 0.5 together (a row of results/prover_plus/prover_plus.md)
    "prover-plus-v0": ["--method", "prover", "--credit-scope", "matched", "--credit-test", "shrink", "--verify-crn",
                       "--focus", "0.5"],
    "prover-plus-ak": ["--method", "prover-plus", "--verify-crn", "--verify-k", "4", "--verify-k-max", "16"],
    # adaptive K in rounds of 2 (most proposals settle after one round), and rounds of 4 with a
    # stricter stop (|Δ̂| ≥ 2·SE: one discordant pair of four no longer settles the sign)
    "prover-plus-ak2": ["--method", "prover-plus", "--verify-crn", "--verify-k", "2", "--verify-k-max", "16"],
    "prover-plus-ak-z2": ["--method", "prover-plus", "--verify-crn", "--verify-k", "4", "--verify-k-max", "16",
                          "--credit-z", "2"],
    # each option beyond the paper alone on top of the paper's ProVer (the "options alone" study;
    # --max-success 7 alone is prover-allmixed above)
    "prover-matched": ["--method", "prover", "--credit-scope", "matched"],
    "prover-se": ["--method", "prover", "--credit-test", "se"],
    "prover-shrink": ["--method", "prover", "--credit-test", "shrink"],
    "prover-crn": ["--method", "prover", "--verify-crn"],
    "prover-adaptive-k": ["--method", "prover", "--verify-k", "4", "--verify-k-max", "16"],
    "prover-neg": ["--method", "prover", "--negative-credit"],
    "prover-focus0": ["--method", "prover", "--focus", "0"],
    "prover-judge-success": ["--method", "prover", "--judge-success", "judge"],
    "grpo-lr3x": ["--method", "grpo", "--lr", "3e-4"],
    "grpo-matched-plus": ["--method", "grpo-matched", "--matched-extra", "1.6"],
}
# The adaptive-K arms above are pinned to `--verify-estimate pooled` (Δ̂ over the stopping rounds:
# biased towards large |Δ̂|, verify.py), the estimator their committed rows measured, so that their
# names keep meaning those rows. The `-fresh` arms are the same with train.py's default, the
# unbiased second batch.
for _name in [n for n, f in VARIANTS.items() if "--verify-k-max" in f]:
    VARIANTS[_name] = [*VARIANTS[_name], "--verify-estimate", "pooled"]
    VARIANTS[f"{_name}-fresh"] = [*VARIANTS[_name][:-1], "fresh"]
ARGS = {**compare.METHOD_ARGS, **VARIANTS}
Q_TARGET = 0.9


# under every table's heading: what q_key measures, and what supersedes it
Q_KEY_NOTE = "**What `q_key` measures here:** `lab/q_key` is π(`take key` as the *first* action) on fixed pivot-room prompts, not the decision: a policy that takes the key later in the room (after a distractor or an invalid turn) is not counted, so these tables' q ≈ 0.78–0.85 plateaus are partly the metric's ceiling. `lab/p_key_held` (the exact probability that the key is held when the agent leaves the pivot room, oracle.py) supersedes it; runs made before it existed do not log it.\n\n"

def run_dir(out: str, rooms: int, method: str, seed: int) -> str:
    return os.path.join(out, "credit_lab", "runs", f"keydoor-r{rooms}-{method}-s{seed}")


def env_flags(rooms: int, args) -> list[str]:
    return ["--env", "keydoor", "--env-opt", f"rooms={rooms}", *args.extra]


def protocol(job, args) -> dict:
    """What makes a lab run comparable: its horizon, the method's train.py flags as VARIANTS spells
    them now (a variant redefined since is not reused), the seed, updates, evaluation, extra flags."""
    rooms, method, seed = job
    return {"rooms": rooms, "method": method, "flags": list(ARGS[method]), "seed": seed, "iters": args.iters,
            "eval_every": args.eval_every, "eval_repeats": args.eval_repeats, "extra": list(args.extra)}


def kept(job, args) -> str:
    rooms, method, seed = job
    return runs.summary_path(args.out, "credit_lab", f"keydoor-r{rooms}-{method}-s{seed}")


def result(job, args) -> dict | None:
    """A finished run's summary: from its run directory when it is there (and then kept), else from
    the kept summary (refused with one line if made under another protocol); None if not finished."""
    r = summarize(run_dir(args.out, *job), args.iters)
    if r is not None:
        if r["q_curve"][-1][0] == args.iters:       # a longer run is reported here but not kept as this protocol's
            runs.save_summary(kept(job, args), protocol(job, args), r)
        return r
    return runs.load_summary(kept(job, args), protocol(job, args))


def from_table(args) -> dict:
    """{(rooms, method, seed): row} of the study's own committed CSV (results/NAME.csv): the record
    of runs whose run directory and summary are both gone (lab runs made before summaries/ existed
    were lost with their machine). A report rebuilt with --report-only reads those runs' per-seed
    figures from it rather than drop them; such a row has no q_key curve (the plot's curve panels
    leave it out) and carries the speed figures computed when its curves existed. It is preferred to
    a kept summary of the same job that records another run (another study's re-run: same_run)."""
    path = os.path.join(args.out, f"{args.name}.csv")
    if not os.path.exists(path):
        return {}

    def value(x: str):
        if x == "":
            return None
        if x in ("True", "False"):
            return x == "True"
        for kind in (int, float):
            try:
                return kind(x)
            except ValueError:
                pass
        return x

    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            r = {k: value(v) for k, v in row.items() if k not in ("rooms", "method", "seed")}
            r["q_curve"] = None
            out[int(row["rooms"]), row["method"], int(row["seed"])] = r
    return out


def same_run(r: dict, rec: dict) -> bool:
    """Whether a summary and a CSV row record the same run: equal update-0 and final figures."""
    return all(rec.get(k) is not None and abs(r[k] - rec[k]) < 1e-9 for k in ("init_success", "final_success", "q_key_final"))


def done(job, args) -> bool:
    return runs.finished(run_dir(args.out, *job), args.iters) or os.path.exists(kept(job, args))


def warm_start(rooms: int, seed: int, args) -> None:
    """The warm start the methods of (rooms, seed) share, built once (train.py --iters 0)."""
    d = os.path.join(args.out, "credit_lab", "runs", f"keydoor-r{rooms}-warmstart-s{seed}")
    if os.path.exists(os.path.join(d, "config.json")):
        return
    rc, _ = runs.run_train(d, [*env_flags(rooms, args), "--iters", "0", "--eval-every", "0", "--bc-seed", str(seed),
                                  "--workers", "1", "--threads", "1", "--cache-dir", runs.warm_dir(args)], OMP_NUM_THREADS="1")
    if rc != 0:
        raise SystemExit(f"credit_lab: warm start rooms={rooms} seed={seed} failed (rc={rc}); see {d}/stdout.log")


def launch(job, args) -> str:
    rooms, method, seed = job
    d = run_dir(args.out, rooms, method, seed)
    if done(job, args):
        return "skipped (done)"
    flags = [*env_flags(rooms, args), *ARGS[method], "--seed", str(seed), "--bc-seed", str(seed),
             "--iters", str(args.iters), "--eval-every", str(args.eval_every), "--eval-repeats", str(args.eval_repeats),
             "--checkpoint-every", str(args.eval_every), "--workers", "1", "--threads", "1",
             "--cache-dir", runs.warm_dir(args)]
    if os.path.exists(os.path.join(d, "checkpoint", "state.json")):
        flags.append("--resume")
    rc, secs = runs.run_train(d, flags, OMP_NUM_THREADS="1")
    with open(os.path.join(d, "wall.json"), "a") as f:
        f.write(json.dumps({"seconds": secs, "rc": rc}) + "\n")
    result(job, args)                                   # keep its summary as soon as it has finished
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
    credited = sum(r.get("prover/credited", 0) for r in tr)
    return {"updates_to_q": hit if hit is not None else iters + 1, "reached": hit is not None,
            "q_key_final": tr[-1].get("lab/q_key"), "q_key_init": tr[0].get("lab/q_key"),
            # the headline speed measure (absent in older runs' rows)
            "p_key_final": tr[-1].get("lab/p_key_held"),
            "p_curve": [(r["step"], r.get("lab/p_key_held")) for r in tr if "lab/p_key_held" in r],
            "expected_success_final": next((r["eval/expected_success"] for r in reversed(tr) if "eval/expected_success" in r), None),
            "final_success": ev[-1]["eval/success"], "init_success": ev[0]["eval/success"],
            "judge_hit": mean_of(tr, "lab/judge_hit"), "accept_rate": mean_of(tr, "prover/accept_rate"),
            # verification's discrimination (means over the updates that had such proposals)
            "credited_pivotal": mean_of(tr, "lab/credited_pivotal"), "credited_other": mean_of(tr, "lab/credited_other"),
            # one unit, two columns: the policy's generated tokens (rollouts + verification) and the judge's
            "policy_tokens_per_update": sum(r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) for r in tr) / len(tr),
            "judge_tokens_per_update": sum(r.get("tokens/judge", 0) + r.get("tokens/judge_prompt", 0) for r in tr) / len(tr),
            "credit_precision": mean_of(tr, "lab/credit_precision"),
            "tokens_per_update": sum(r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0) for r in tr) / len(tr),
            "verify_tokens_per_credit": sum(r.get("tokens/verify", 0) for r in tr) / credited if credited else None,
            "credited_per_update": credited / len(tr),
            "env_steps_per_update": sum(r.get("env_steps/total", 0) for r in tr) / len(tr),
            "iter_seconds": sum(r.get("time/iter_s", 0) for r in tr) / len(tr), "wall_seconds": wall,
            "q_curve": [(r["step"], r.get("lab/q_key")) for r in tr], "warm_start": runs.warm_start_id(d)}


def updates_to(curve: list[tuple[int, float]], target: float, censor: int) -> int:
    """First update whose q_key reaches `target` (a curve that never does counts as `censor`)."""
    return next((step for step, q in curve if q is not None and q >= target - 1e-9), censor)


def to_reference_final(res: dict, rooms: int, method: str, iters: int) -> tuple[dict, dict]:
    """Per seed: updates until `method` reaches GRPO's final q_key of the same seed, and the ratio
    to GRPO's own updates to it (the issue's "≤ 0.6× GRPO's updates"; < 1 = faster than GRPO)."""
    upd, ratio = {}, {}
    for (ro, m, s), r in res.items():
        g = res.get((ro, "grpo", s))
        if ro != rooms or m != method or g is None:
            continue
        if r["q_curve"] is None or g["q_curve"] is None:     # a row read back from the CSV (from_table)
            if r.get("updates_to_grpo_final_q") is not None:
                upd[s], ratio[s] = int(r["updates_to_grpo_final_q"]), r["ratio_to_grpo"]
            continue
        target = g["q_key_final"]
        upd[s] = updates_to(r["q_curve"], target, iters + 1)
        ratio[s] = upd[s] / updates_to(g["q_curve"], target, iters + 1)
    return upd, ratio


def optional(x, fmt="{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def report(args, jobs) -> str:
    res = {}
    table_rows = from_table(args)
    for rooms, m, s in jobs:
        # which record of a run: its run directory here (the newest), else a kept summary (it has the
        # curves) when it is the run this study's own CSV recorded, else that CSV row — summaries are
        # shared by every study of the lab, and one may be another study's re-run of the same job
        # (another machine's figures); a table pairs within its own study
        rec = table_rows.get((rooms, m, s))
        here = os.path.exists(os.path.join(run_dir(args.out, rooms, m, s), "metrics.jsonl"))
        r = result((rooms, m, s), args)
        if r is not None and rec is not None and not here and not same_run(r, rec):
            r = None
        if r is not None:
            r["q_key_mid"] = dict(r["q_curve"]).get(args.mid_update)       # q_key at --mid-update
            res[(rooms, m, s)] = r
        elif (rooms, m, s) in table_rows:
            res[(rooms, m, s)] = table_rows[rooms, m, s]
    from_csv = sum(r["q_curve"] is None for r in res.values())
    # every figure here is paired per seed, so a seed whose methods started from different warm
    # starts (rebuilt on another machine: runs.unpaired_seeds) is left out of the whole report
    unpaired = {rooms: runs.unpaired_seeds(res, rooms) for rooms in {k[0] for k in res}}
    res = {k: r for k, r in res.items() if k[2] not in unpaired[k[0]]}
    speed = {(rooms, m): to_reference_final(res, rooms, m, args.iters) for rooms, m, _ in res}
    os.makedirs(os.path.dirname(os.path.join(args.out, args.name)), exist_ok=True)      # NAME may name a folder
    with open(os.path.join(args.out, f"{args.name}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        keys = [k for k in next(iter(res.values()), {}) if k not in ("q_curve", "updates_to_grpo_final_q", "ratio_to_grpo")]
        w.writerow(["rooms", "method", "seed", *keys, "updates_to_grpo_final_q", "ratio_to_grpo"])
        for (rooms, m, s), r in sorted(res.items()):
            upd, ratio = speed[(rooms, m)]
            w.writerow([rooms, m, s, *(r.get(k, "") for k in keys), upd.get(s, ""), ratio.get(s, "")])

    def col(rooms, m, key):
        return {s: r[key] for (ro, mm, s), r in res.items() if ro == rooms and mm == m and r[key] is not None}

    def cell_mean(rooms, m, key, fmt="{:.2f}"):
        c = col(rooms, m, key)
        return optional(paired.mean(list(c.values())) if c else None, fmt)

    def raw_delta(rooms, m, ref, key):
        a, b = col(rooms, m, key), col(rooms, ref, key)
        return paired.paired(a, b) if m != ref and a and b else None

    # Holm's family: one column of one rooms table (one question: "does method m move this figure
    # vs ref at this horizon?"), i.e. every method's test in that column
    holm: dict = {}

    def family(rooms, ref, key):
        if (rooms, ref, key) not in holm:
            holm[rooms, ref, key] = paired.holm_family({m: raw_delta(rooms, m, ref, key) for m in args.methods})
        return holm[rooms, ref, key]

    def delta(rooms, m, ref, key, scale=1.0, digits=1):
        d = raw_delta(rooms, m, ref, key)
        if not d or not d["n"]:
            return "–"
        ph = family(rooms, ref, key).get(m)
        p = f"p {paired.fmt_p(d.get('p'))}" + (f", Holm {paired.fmt_p(ph)}" if ph is not None else "")
        return f"{paired.fmt(d, scale, digits=digits, sign=True)} ({p})"

    def same_seed_ratio(a: dict, b: dict) -> str:
        """mean(a)/mean(b) over the seeds both have (a ratio to GRPO never mixes seed sets)."""
        shared = sorted(set(a) & set(b))
        bm = paired.mean([b[s] for s in shared]) if shared else 0.0
        return f" ({paired.mean([a[s] for s in shared]) / bm:.2f}×)" if bm > 0 else ""

    lines = [f"Key-to-door, {args.iters} updates per run, paired seeds (the methods of a seed share its warm start and "
             f"first rollouts). Cells: mean [95% t CI] (n seeds); Δ: paired difference with the exact sign-flip p and its Holm-adjusted "
             f"p (family: one column of one rooms table, i.e. every method's test of that figure at that horizon). "
             f"Ratios to GRPO (tokens) are over the seeds both ran. "
             f"Updates to q ≥ {Q_TARGET}, and to GRPO's final q_key of the same seed: a run that never reaches it counts as "
             f"{args.iters + 1}; × GRPO is the per-seed ratio to GRPO's own updates to that value (< 1 = faster). "
             f"Off by one, on purpose: the lab's metrics of the row `step N` are measured during update N, before its "
             f"gradient step, i.e. on the policy after N − 1 updates; so \"at update {args.mid_update}\" is after "
             f"{args.mid_update - 1} updates and \"final\" after {args.iters - 1}.\n"]
    for rooms in args.rooms:
        if not any(k[0] == rooms for k in res):
            continue
        vs = [v for v in args.versus if col(rooms, v, "q_key_final")]
        lines += [f"## rooms = {rooms}\n",
                  "| method | updates to q ≥ 0.9 (reached) | updates to GRPO's final q (× GRPO) | "
                  f"Δ q_key vs GRPO at update {args.mid_update} (after {args.mid_update - 1}) (p) | final q_key | "
                  + "".join(f"Δ final q_key vs {v} (p) | " for v in vs)
                  + "final success | Δ success vs GRPO (p) | judge hit | accept | credit precision | credited / update | "
                  "verify tokens / credited | tokens / update (× GRPO) |",
                  "|" + "---|" * (13 + len(vs))]
        g_tok = col(rooms, "grpo", "tokens_per_update")
        for m in args.methods:
            upd = col(rooms, m, "updates_to_q")
            if not upd:
                continue
            reached = sum(col(rooms, m, "reached").values())
            succ, tok, qk = col(rooms, m, "final_success"), col(rooms, m, "tokens_per_update"), col(rooms, m, "q_key_final")
            u_ref, ratio = speed[(rooms, m)]
            tk = paired.mean(list(tok.values()))
            rel = same_seed_ratio(tok, g_tok) if g_tok else ""
            lines.append(
                f"| {m} | {paired.fmt(paired.summary(list(upd.values())))} ({reached}/{len(upd)}) | "
                + (f"{paired.fmt(paired.summary(list(u_ref.values())))} ({paired.fmt(paired.summary(list(ratio.values())), digits=2)})"
                   if u_ref else "–") + " | "
                f"{delta(rooms, m, 'grpo', 'q_key_mid', digits=4)} | "
                f"{paired.fmt(paired.summary(list(qk.values())), digits=3)} | "
                + "".join(f"{delta(rooms, m, v, 'q_key_final', digits=4)} | " for v in vs)
                + f"{paired.fmt(paired.summary(list(succ.values())), 100)} | {delta(rooms, m, 'grpo', 'final_success', 100)} | "
                f"{cell_mean(rooms, m, 'judge_hit')} | {cell_mean(rooms, m, 'accept_rate')} | "
                f"{cell_mean(rooms, m, 'credit_precision')} | {cell_mean(rooms, m, 'credited_per_update', '{:.1f}')} | "
                f"{cell_mean(rooms, m, 'verify_tokens_per_credit', '{:.0f}')} | {tk:.0f}{rel} |")
        for sd, inits in unpaired.get(rooms, {}).items():
            lines.append(f"\nNot paired, left out: seed {sd} started from different warm starts (update-0 held-out "
                         + ", ".join(f"{m} {100 * v:.1f}" for m, v in inits.items()) + ").")
        lines.append("")
    if from_csv:
        lines.insert(1, f"{from_csv} of the {len(res)} runs are read from this study's own record, {os.path.basename(args.name)}.csv "
                        f"(the per-run rows its report wrote; their run directories are not on this machine, and kept "
                        f"summaries may be other studies' re-runs: bench/credit_lab.py's from_table): their per-seed "
                        f"figures as recorded; the plot's q_key-curve panels show only the runs that kept curves.\n")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write(f"# {args.title}\n\n{Q_KEY_NOTE}Command: `{' '.join(['python', 'bench/credit_lab.py', *sys.argv[1:]])}`\n\n{table}")
    plot(args, res, speed)
    return table


def delta_curve(res: dict, rooms: int, method: str) -> list[tuple[int, dict]]:
    """Per update t: the paired q_key(method, t) − q_key(GRPO, t) over the seeds both have (summary
    with CI) — where in training a method's credit moves the pivotal decision."""
    by_seed = {s: dict(r["q_curve"]) for (ro, m, s), r in res.items() if ro == rooms and m == method and r["q_curve"]}
    ref = {s: dict(r["q_curve"]) for (ro, m, s), r in res.items() if ro == rooms and m == "grpo" and r["q_curve"]}
    seeds = sorted(set(by_seed) & set(ref))
    if not seeds:
        return []
    steps = sorted(set.intersection(*(set(by_seed[s]) & set(ref[s]) for s in seeds)))
    return [(t, paired.summary([by_seed[s][t] - ref[s][t] for s in seeds])) for t in steps]


def plot(args, res, speed):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curve_rooms = args.curve_rooms or max(args.rooms)
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.2))
    shown = args.plot_methods or args.methods
    colors = {m: f"C{i % 10}" for i, m in enumerate(shown)}       # one colour per method in every panel
    for i, m in enumerate(shown):
        xs, ys, lo, hi = [], [], [], []
        for rooms in args.rooms:
            v = list(speed.get((rooms, m), ({}, {}))[1].values())       # per-seed ratio to GRPO's updates
            if not v:
                continue
            s = paired.summary(v)
            xs.append(rooms * 2 ** (0.03 * (i - len(shown) / 2)))         # side by side, not on top
            ys.append(s["mean"])
            lo.append(s["mean"] - s.get("lo", s["mean"]))
            hi.append(s.get("hi", s["mean"]) - s["mean"])
        if xs:
            ax[0].errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=m, color=colors[m])
        curves = [r["q_curve"] for (ro, mm, s), r in res.items() if mm == m and ro == curve_rooms and r["q_curve"]]
        if curves:
            n = min(len(c) for c in curves)
            ax[1].plot([curves[0][i][0] for i in range(n)], [sum(c[i][1] for c in curves) / len(curves) for i in range(n)],
                       label=f"{m} (n={len(curves)})", color=colors[m])
        dc = delta_curve(res, curve_rooms, m) if m != "grpo" else []
        if dc and dc[0][1]["n"] >= 2:
            t = [x for x, _ in dc]
            ax[2].plot(t, [d["mean"] for _, d in dc], label=f"{m} (n={dc[0][1]['n']})", color=colors[m])
            ax[2].fill_between(t, [d["lo"] for _, d in dc], [d["hi"] for _, d in dc], color=colors[m], alpha=0.15)
    ax[0].axhline(1.0, color="k", lw=0.8)
    ax[0].set_xlabel("rooms (horizon)")
    ax[0].set_ylabel("updates to GRPO's final q_key, × GRPO (95% CI)")
    ax[0].set_xscale("log", base=2)
    ax[0].set_xticks(list(args.rooms), [str(r) for r in args.rooms])
    ax[1].set_xlabel("policy updates")
    ax[1].set_ylabel(f"q_key, rooms = {curve_rooms} (mean over seeds)")
    ax[2].axhline(0.0, color="k", lw=0.8)
    ax[2].set_xlabel("policy updates")
    ax[2].set_ylabel(f"paired Δ q_key vs GRPO, rooms = {curve_rooms} (95% CI)")
    for a in ax:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:     # no empty legend (and no warning) on a panel without labelled curves
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, f"{args.name}.png"), dpi=90)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description="credit lab: horizon sweep × methods × paired seeds on keydoor (resumable)")
    p.add_argument("--rooms", nargs="+", type=int, default=[4, 8, 16])
    p.add_argument("--methods", nargs="+", choices=list(ARGS), default=METHODS)
    p.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-repeats", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side (one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "results"))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--versus", nargs="+", choices=list(ARGS), default=["grpo"],
                   help="reference methods for the paired Δ final q_key columns (GRPO is always the cost and speed reference)")
    p.add_argument("--mid-update", type=int, default=10,
                   help="the update of the table's mid-training Δ q_key column (credit often shows early, before GRPO catches up)")
    p.add_argument("--plot-methods", nargs="+", choices=list(ARGS), default=None,
                   help="the methods the plot shows (default: all of --methods; the tables always have all)")
    p.add_argument("--curve-rooms", type=int, default=0,
                   help="the horizon whose q_key curves the plot's right panels show (default: the largest of --rooms)")
    p.add_argument("--name", default="credit_lab/credit_lab",
                   help="the report's path stem under --out: writes results/NAME.{md,csv,png} (e.g. prover_plus/prover_plus); "
                        "the runs are shared in results/credit_lab/runs/")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: extra train.py flags for every run")
    args = p.parse_args()
    args.extra = [a for a in args.extra if a != "--"]
    stem = os.path.basename(args.name)
    args.title = "Credit lab" if stem == "credit_lab" else f"Credit lab: {stem}"
    jobs = [(r, m, s) for r in args.rooms for s in args.seeds for m in args.methods]
    for j in jobs:                        # a kept summary from another protocol: one line, before any run
        runs.load_summary(kept(j, args), protocol(j, args))
    if not args.report_only:
        t0 = time.time()
        todo = [j for j in jobs if not done(j, args)]
        # warm starts first, each once per (rooms, seed)
        runs.run_jobs(jobs, list(dict.fromkeys((r, s) for r, _, s in todo)), lambda r, s: warm_start(r, s, args),
                         lambda j: launch(j, args), args.jobs, "credit lab runs")
        print(f"credit lab: {len(todo)} runs in {(time.time() - t0) / 60:.1f} min")
    print(report(args, jobs))


if __name__ == "__main__":
    main()
