"""What the training loop writes after each update: the metrics row, the credit record, the console line.

    row = metrics_row(tr, step, groups, counts, cstats, ustats, lab_stats, secs)   # gathered over ranks
    rec = update_record(tr, step, groups, adv_grpo, adv, row)                       # records.jsonl
    log_row(tr, row, log, bar)           # metrics.jsonl, --log loggers, curves.png / report.html, console

Every function that gathers (`metrics_row`, `update_record`) must be called on every rank; rank 0
gets the result, the others None. Method metrics are merged over ranks by name: counts add up,
keys with mean/rate/len/share are averaged. `credit/share` = Σ|A − A^GRPO|·n / Σ|A^GRPO|·n over
the batch's tokens: how far the method moved the update from GRPO's own push.
Leaves out: anything a method computes itself (its metrics come in `cstats`).
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass

import grpo
from infra import dist, records, report, rundir
from lab import metrics as lab_metrics


def adv_stats(adv: list) -> dict:
    """The advantages this update trained on, per turn (adv[g][i][t]): their mean |A|, extremes and
    share below 0 — what AdamW sees of the credit's scale (the lab compares them across methods)."""
    xs = [a for group in adv for traj in group for a in traj]
    if not xs:
        return {}
    return {"adv/abs_mean": sum(map(abs, xs)) / len(xs), "adv/max": max(xs), "adv/min": min(xs),
            "adv/neg_share": sum(a < 0 for a in xs) / len(xs)}


@dataclass
class Episode:
    """What a metrics row needs of one training trajectory (gathered from every rank)."""
    success: float
    score: float
    turns: int
    invalid: int                      # turns without <action> tags
    inadmissible: int                 # well-formed turns whose action was not admissible


def metrics_row(tr, step: int, groups: list, counts: Counter, cstats: dict, ustats: dict,
                lab_stats: dict, secs: dict) -> dict | None:
    """6. The update's metrics, gathered over ranks; the row on rank 0 (None elsewhere)."""
    eps = [Episode(t.success, t.score, len(t.turns), sum(not tn.valid for tn in t.turns),
                   int(sum(grpo.turn_penalty(tn, 0.0, 1.0) for tn in t.turns))) for g in groups for t in g]
    local = {"eps": eps, "mixed": sum(len({t.R for t in g}) > 1 for g in groups),   # groups with a GRPO signal
             "counts": counts, "credit": cstats, "lab": lab_stats}
    parts = dist.gather(local, tr.world)
    if tr.rank != 0:
        return None
    eps = [e for p in parts for e in p["eps"]]
    d: Counter = Counter()
    for p in parts:
        d.update(p["counts"])
    n, turns = len(eps), max(1, sum(e.turns for e in eps))
    row = {"step": step, "train/success": sum(e.success for e in eps) / n, "train/score": sum(e.score for e in eps) / n,
           "train/episode_len": sum(e.turns for e in eps) / n,
           "train/invalid_format": sum(e.invalid for e in eps) / turns,
           "train/inadmissible": sum(e.inadmissible for e in eps) / turns,
           "train/mixed_groups": sum(p["mixed"] for p in parts),
           "tokens/rollout": d["tokens/rollout"], "tokens/verify": d["tokens/verify"], "tokens/judge": d["tokens/judge"],
           "env_steps/rollout": d["env_steps/rollout"],
           "env_steps/total": sum(v for k, v in d.items() if k.startswith("env_steps/") and k != "env_steps/eval"),
           **secs, **ustats}
    row.update(merge_method_stats([p["credit"] for p in parts]))
    row.update(lab_metrics.merge([p["lab"] for p in parts]))
    return row


def credit_share(groups, adv_grpo, adv) -> float:
    """Σ_tokens |A − A^GRPO| / Σ_tokens |A^GRPO| over every group of the batch (groups or rollouts a
    method appended, grpo-matched's, left out): how far the method moved the update from GRPO's own push,
    from all groups (records.jsonl keeps only a few, credited ones first, which biases a share
    computed from it upwards). With several ranks it is the mean of the ranks' shares."""
    moved = push = 0.0
    for g in range(min(len(adv_grpo), len(groups))):
        for i, tr in enumerate(groups[g][:len(adv_grpo[g])]):   # rollouts a method added to a group: not GRPO's
            for t, tn in enumerate(tr.turns):
                n = len(tn.action_ids)
                moved += abs(adv[g][i][t] - adv_grpo[g][i][t]) * n
                push += abs(adv_grpo[g][i][t]) * n
    return moved / push if push > 0 else 0.0


def merge_method_stats(parts: list[dict]) -> dict:
    """Method metrics from all ranks: counts add up; means and rates (keys with mean/rate/len)
    are averaged over the ranks that report them; strings are kept from the first rank."""
    out: dict = {}
    for k in dict.fromkeys(k for p in parts for k in p):
        vals = [p[k] for p in parts if k in p]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[k] = vals[0]
        elif any(s in k for s in ("mean", "rate", "len", "share")):
            out[k] = sum(vals) / len(vals)
        else:
            out[k] = sum(vals)
    return out


# launch time (the launcher's, for workers): time/wall_s counts the warm start, updates and
# evaluations, and a --resume adds its time to the run's earlier total
T_START = float(os.environ.get("PROVER_T0", time.time()))


def update_record(tr, step: int, groups: list, adv_grpo: list, adv: list, row: dict | None) -> dict | None:
    """6. The update's credit record (records.py): each rank offers its best MAX_GROUPS groups, rank
    0 keeps the best of all and returns the record (None elsewhere). Every rank must call it."""
    cfg = tr.cfg
    local = records.group_entries(groups, adv_grpo, adv, tr.run.records, cfg.min_success, cfg.max_success)
    parts = dist.gather(local, tr.world)
    return records.make_record(step, cfg.method, parts, row) if tr.rank == 0 else None


def write_report(tr, log) -> None:
    """report.html (report.py). A failure is logged to errors.log and the run goes on (--strict
    re-raises): the page is a view, never a reason to lose a run."""
    try:
        report.write(tr.cfg.out)
    except Exception as e:
        if tr.cfg.strict:
            raise
        rundir.log_error(tr.cfg.out, tr.rows[-1]["step"] if tr.rows else 0, "report.html", e)
        log(f"report.html failed ({type(e).__name__}: {str(e)[:120]}); see errors.log")


def log_row(tr, row: dict, log, bar) -> None:
    row["time/wall_s"] = round(tr.wall0 + time.time() - T_START, 1)
    row.setdefault("tokens/eval", 0)
    tr.rows.append(row)
    rundir.append_row(tr.cfg.out, row)
    if tr.loggers is not None:                 # --log: TensorBoard / wandb get the same keys
        tr.loggers.log(row)
    # curves.png and report.html after each evaluation (the end's redraw is train()'s): a bounded
    # cost, ~0.3 s + ~0.1 s per evaluation, which itself takes far longer; every update would add
    # ~30% to a tiny-policy run
    if "eval/success" in row and row["step"] < tr.cfg.iters:
        rundir.plot_curves(tr.cfg.out, tr.rows)
        write_report(tr, log)
    if row["step"] == 0:
        log(f"step 0 | eval {row['eval/success']:.3f} (warm start)")
        return
    bar.update(1)
    bar.set_postfix(train=f"{row['train/success']:.2f}", **({"eval": f"{row['eval/success']:.2f}"} if "eval/success" in row else {}))
    log(f"step {row['step']} | train {row['train/success']:.3f} | "
        + (f"eval {row['eval/success']:.3f} | " if "eval/success" in row else "")
        + f"tok {row['tokens/rollout']}+{row['tokens/verify']}v+{row['tokens/judge']}j | {row['time/iter_s']:.1f}s")
    failing = judge_failures(row)
    if failing:
        log(f"step {row['step']} | judge failing: {failing}")


# drop reasons that mean the judge's endpoint, not the proposal, failed (chat.py's error strings)
ENDPOINT_FAILURES = ("http", "endpoint timeout", "connection error", "timeout", "bad_response")


def judge_failures(row: dict) -> str:
    """'2 of 3 proposals dropped (connection error: 2)' when the judge's endpoint failed this
    update, else '' — so a judge that is down is said on the console, not only counted."""
    bad = {k.split("/", 2)[2]: v for k, v in row.items()
           if k.startswith("prover/dropped/") and k.split("/", 2)[2].startswith(ENDPOINT_FAILURES) and v}
    if not bad:
        return ""
    return (f"{sum(bad.values())} of {row.get('prover/proposals', 0)} proposals dropped ("
            + ", ".join(f"{k}: {v}" for k, v in sorted(bad.items())) + ")")
