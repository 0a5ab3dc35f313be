"""What the training loop writes after each update: the metrics row, the credit record, the console line.

    out = RunLog(cfg, workers, start, resolved_config, segments_header, log)   # config.json, metrics cut at start
    out.update(tr, step, groups, adv_grpo, adv, counts, cstats, ustats, lab_stats, secs, evals, save)
    out.finish()                         # curves.png, report.html

Every worker calls every method (the rows are gathered over the data-parallel workers); the lead
worker writes metrics.jsonl, records.jsonl, the --log loggers, the console and the checkpoint (a
sharded one: every worker its shards). Method metrics are merged over workers by name: counts add
up, keys with mean/rate/len/share are averaged. `credit/share` = Σ|A − A^GRPO|·n / Σ|A^GRPO|·n
over the batch's tokens: how far the method moved the update from GRPO's own push.
Leaves out: anything a method computes itself (its metrics come in `cstats`).
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass

import grpo
from infra import build, dist, records, report, rundir
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
    """6. The update's metrics, gathered over the workers; the row on the lead (None elsewhere)."""
    eps = [Episode(t.success, t.score, len(t.turns), sum(not tn.valid for tn in t.turns),
                   int(sum(grpo.turn_penalty(tn, 0.0, 1.0) for tn in t.turns))) for g in groups for t in g]
    local = {"eps": eps, "mixed": sum(len({t.R for t in g}) > 1 for g in groups),   # groups with a GRPO signal
             "counts": counts, "credit": cstats, "lab": lab_stats}
    parts = tr.workers.gather(local)
    if not tr.workers.lead:
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
    """6. The update's credit record (records.py): each worker offers its best MAX_GROUPS groups,
    the lead keeps the best of all and returns the record (None elsewhere). Every worker calls it."""
    cfg = tr.cfg
    local = records.group_entries(groups, adv_grpo, adv, tr.run.records, cfg.min_success, cfg.max_success)
    parts = tr.workers.gather(local)
    return records.make_record(step, cfg.method, parts, row) if tr.workers.lead else None


def console():
    """The console line writer: above the progress bar on the lead worker, silent elsewhere (its
    RANK is set by torchrun or dist.launch before the process group exists)."""
    from tqdm import tqdm
    return tqdm.write if int(os.environ.get("RANK", "0")) == 0 else (lambda *a, **k: None)


class RunLog:
    """The run directory and the console as the loop sees them (module docstring)."""

    def __init__(self, cfg, workers, start: int, resolved: dict, segments_header: str | None, log):
        from tqdm import tqdm
        self.cfg, self.workers, self.log = cfg, workers, log
        self.rows = rundir.start_files(cfg.out, resolved, start, segments_header) if workers.lead else []
        # run time before this process (--resume): time/wall_s accumulates
        self.wall0 = float(self.rows[-1].get("time/wall_s", 0.0)) if start > 0 and self.rows else 0.0
        self.loggers = records.Loggers(cfg.log, cfg.out, asdict(cfg), start) if workers.lead and cfg.log else None
        # no terminal (a log file, CI): the bar's redraws would be hundreds of lines; the row's line is the progress
        self.bar = tqdm(total=cfg.iters, initial=start, desc="updates", disable=not workers.lead or not sys.stderr.isatty())

    def first(self, evals: dict) -> None:
        """The warm start's held-out success (step 0)."""
        if self.workers.lead:
            self.row({"step": 0, **evals, "tokens/rollout": 0, "tokens/verify": 0, "tokens/judge": 0})

    def update(self, tr, step: int, groups, adv_grpo, adv, counts, cstats, ustats, lab_stats, secs, evals, save: bool):
        """6. The update's row and record (gathered), written with the checkpoint (`save`)."""
        row = metrics_row(tr, step, groups, counts, cstats, ustats, lab_stats, secs)
        rec = update_record(tr, step, groups, adv_grpo, adv, row)
        if row is not None:
            row.update(evals)
        if self.workers.lead:
            # record, row, checkpoint in this order: a kill leaves lines past the checkpoint at
            # worst, which --resume drops and re-does (rundir.start_files)
            rundir.append_jsonl(self.cfg.out, "records.jsonl", records.dumps(rec))
            self.row(row)
        if save and (self.workers.lead or dist.is_sharded(tr.model)):   # sharded: every worker its shards
            rundir.save_checkpoint(self.cfg.out, tr.model, tr.tok, tr.opt, step, tr.run.agent.counter,
                                   build.rng_state(tr.py_rng))

    def interrupted(self, step: int) -> None:
        """Ctrl-C or SIGTERM in the loop: the lead says where the last complete checkpoint is."""
        self.bar.close()
        if self.workers.lead:
            s = rundir.checkpoint_step(self.cfg.out)
            print(f"\ninterrupted at update {step}; last complete checkpoint: "
                  + (f"{self.cfg.out}/checkpoint (step {s}); continue with --resume" if s is not None else "none yet"),
                  file=sys.stderr)
        if self.loggers is not None:                 # TensorBoard / wandb flush what they hold
            self.loggers.close()

    def finish(self) -> None:
        """curves.png and report.html, the loggers closed; every worker waits for the lead."""
        self.bar.close()
        if self.workers.lead and self.rows:
            rundir.plot_curves(self.cfg.out, self.rows)
            self.report()
        if self.loggers is not None:
            self.loggers.close()
        dist.barrier()

    def report(self) -> None:
        """report.html (report.py). A failure is logged to errors.log and the run goes on (--strict
        re-raises): the page is a view, never a reason to lose a run."""
        try:
            report.write(self.cfg.out)
        except Exception as e:
            if self.cfg.strict:
                raise
            rundir.log_error(self.cfg.out, self.rows[-1]["step"] if self.rows else 0, "report.html", e)
            self.log(f"report.html failed ({type(e).__name__}: {str(e)[:120]}); see errors.log")

    def row(self, row: dict) -> None:
        """One metrics row: metrics.jsonl, the loggers, the plots after an evaluation, the console."""
        row["time/wall_s"] = round(self.wall0 + time.time() - T_START, 1)
        row.setdefault("tokens/eval", 0)
        self.rows.append(row)
        rundir.append_row(self.cfg.out, row)
        if self.loggers is not None:                 # --log: TensorBoard / wandb get the same keys
            self.loggers.log(row)
        # curves.png and report.html after each evaluation (the end's redraw is finish()'s): a bounded
        # cost, ~0.3 s + ~0.1 s per evaluation, which itself takes far longer; every update would add
        # ~30% to a tiny-policy run
        if "eval/success" in row and row["step"] < self.cfg.iters:
            rundir.plot_curves(self.cfg.out, self.rows)
            self.report()
        log = self.log
        if row["step"] == 0:
            log(f"step 0 | eval {row['eval/success']:.3f} (warm start)")
            return
        self.bar.update(1)
        self.bar.set_postfix(train=f"{row['train/success']:.2f}",
                             **({"eval": f"{row['eval/success']:.2f}"} if "eval/success" in row else {}))
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
