"""A credit method's error is confined to its group: the run goes on, the group keeps GRPO's advantages.

    cstats = guarded_credit(fn, run, groups, adv, step, log, strict)

`fn(groups, adv, run)` runs on the whole batch. If it raises, the batch is retried group by group:
a group that fails again keeps its GRPO advantages (the untouched copy `saved`), the traceback
goes to errors.log and the console says how many groups failed; `--strict` re-raises instead
(tests). The failed attempt's tokens are moved from tokens/* to credit/retry_tokens, so an
update's budget is what its credit actually used. Leaves out: retrying a group that failed twice.
"""
from __future__ import annotations

import copy

from infra import rundir
from infra.runlog import merge_method_stats


def guarded_credit(fn, run, groups: list, adv: list, step: int, log, strict: bool, saved: list | None = None) -> dict:
    """3. The method's credit on top of GRPO's advantages (in place). An error is confined to its
    group: the batch is retried group by group and a failing group keeps its GRPO advantages; the
    traceback goes to errors.log and the console says so (--strict re-raises instead)."""
    run.step, run.proposals, run.records = step, [], []
    saved = copy.deepcopy(adv) if saved is None else saved   # the GRPO advantages, untouched copy
    counter = run.agent.counter
    before = {k: v for k, v in counter.items() if k.startswith("tokens/")}
    try:
        return fn(groups, adv, run) or {}
    except Exception as e:
        if strict:
            raise
        rundir.log_error(run.out, step, f"credit ({run.cfg.method}), whole batch", e)
        log(f"step {step}: credit failed ({type(e).__name__}: {str(e)[:120]}); retrying group by group (errors.log)")
    # the failed attempt's tokens are void work: out of tokens/* (which the retry counts again, group
    # by group) into credit/retry_tokens, so the update's budget is what its credit actually used
    wasted = 0
    for k in [k for k in counter if k.startswith("tokens/")]:
        extra = counter[k] - before.get(k, 0)
        counter[k] -= extra
        wasted += extra
    counter["credit/retry_tokens"] += wasted
    adv[:] = copy.deepcopy(saved)             # a fresh copy: `saved` must stay the GRPO advantages
    run.proposals, run.records = [], []        # the failed attempt's entries are void
    n_groups, parts, errors = len(groups), [], 0
    for g in range(n_groups):
        sub_groups, sub_adv = [groups[g]], [adv[g]]
        n_p, n_r = len(run.proposals), len(run.records)
        try:
            parts.append(fn(sub_groups, sub_adv, run) or {})
        except Exception as e:
            errors += 1
            adv[g] = copy.deepcopy(saved[g])
            del run.proposals[n_p:], run.records[n_r:]      # this group kept GRPO: nothing was credited
            rundir.log_error(run.out, step, f"credit ({run.cfg.method}), group {g}", e)
            continue
        # the method saw a one-group batch: its entries say group 0, which is group g of the batch
        run.proposals[n_p:] = [(g, *p[1:]) for p in run.proposals[n_p:]]
        for r in run.records[n_r:]:
            r["g"] = g
        adv[g] = sub_adv[0]
        groups.extend(sub_groups[1:])          # rows a method added (grpo-matched)
        adv.extend(sub_adv[1:])
    run.agent.counter["credit/errors"] += errors
    log(f"step {step}: credit: {errors} of {n_groups} groups failed and kept their GRPO advantages")
    return {**merge_method_stats(parts), "credit/failed_groups": errors, "credit/retry_tokens": wasted}
