"""ProVer's credit, the paper's procedure: propose → verify → add, on top of GRPO's advantages.

For every rollout group whose outcome is mixed, with 1..3 successes of G = 8 (`eligible`):
    1. τ* = the shortest successful trajectory of the group
    2. PROPOSE  the judge (judge.py) contrasts τ* with the failures through its two tools
                (search_trajectory, get_segment) and names one segment (ℓ, r) of τ*'s turns:
                ≤ 4 turns, not the last, no error-producing turn; else the group is dropped
    3. VERIFY   Δ̂ = SR(s_{r+1}) − SR(s_ℓ): the success rate of K = 8 current-policy
                continuations from the restored state after the segment, minus before it
                (verify.py, with its standard error)
    4. CREDIT   if Δ̂ > 0:   A_t ← A^GRPO_t + λ·Δ̂   for every policy token of τ*'s turns ℓ..r (λ = 1)
Every other token keeps A^GRPO; the continuations are not training data; the loss is unchanged.

Toy example (the paper's): 2 of 4 continuations succeed from s_ℓ and 3 of 4 from s_{r+1}, so
Δ̂ = 0.75 − 0.5 = +0.25 is added to the advantage of the segment's tokens.

`credit` below is exactly that procedure, top to bottom. The options beyond the paper (--credit-test,
--credit-scope, --focus, --negative-credit, --judge-success, --judge-max, --trust-judge, CRN and
adaptive K, and `--method prover-plus`) are methods/prover_options.py, which reuses the pieces
here; `--method prover` runs it instead of `credit` when one of their flags is set (methods/__init__.py).

Costs: the judge's tokens under `tokens/judge` (its prompts under `tokens/judge_prompt`), the
continuations' under `tokens/verify` / `env_steps/verify`. Each judged group is written to
`segments.md` (the segment verbatim, Δ̂ ± SE, the bonus λ·Δ̂ added or why none was) and to
`run.records` (records.jsonl, shown by report.html).

Leaves out: more than one segment per group, judging groups with no success or no failure (they
carry no contrast), and training on the continuations.
"""
from __future__ import annotations

from collections import Counter

import verify
from infra import rundir
from rollout import shortest_success

SEGMENTS_HEADER = ("# Credited segments\n\nEach entry: the judge's proposal on one eligible group, the "
                   "segment's turns verbatim, the verified advantage Δ̂ ± SE, and whether credit was "
                   "applied (or why the proposal was dropped).\n\n")


def eligible(group, min_success: int, max_success: int) -> bool:
    """Mixed outcome with min..max successes (the paper: 1..3 of 8)."""
    n = sum(t.success for t in group)
    return 0 < n < len(group) and min_success <= n <= max_success


def credit(groups, adv, run, estimate=None) -> dict:
    """ProVer's credit for one batch: adv[g][i][t] (GRPO's per-turn advantages of trajectory i of
    group g; t is a turn, one float each: grpo.collate spreads it onto the turn's tokens) gains λ·Δ̂
    on verified segments, in place. Returns this update's prover/* metrics. Eligibility and τ* follow
    `won`; A^GRPO and Δ̂ follow the outcome R (`--reward`: success, or WebShop's score).
    `estimate`: the verifier (verify.estimate; the lab's exact arms pass the exact ΔV)."""
    cfg, estimate = run.cfg, estimate or verify.estimate
    judge = BatchJudge(run.judge)
    st, deltas, report = Counter(), [], []
    for g, group in enumerate(groups):
        if not eligible(group, cfg.min_success, cfg.max_success):               # a mixed group
            continue
        st["eligible"] += 1
        sid = shortest_success(group)                                          # 1. τ*
        jr = judge.propose(group, sid)                                         # 2. propose (ℓ, r)
        count_proposal(run, st, jr)
        if jr.proposal is None:
            report.append(segment_report(run.step, group, sid, jr))
            record(run, g, group, sid, jr)
            continue
        p = jr.proposal
        v = estimate(run.agent, run.envs(2 * cfg.verify_k), group[sid], p.start_turn, p.end_turn,   # 3. verify:
                     cfg.verify_k, cfg.temperature, seed=verify_seed(run, group[sid]))           # K + K runs
        deltas.append(v.delta)
        applied, bonus = v.delta > cfg.margin, cfg.lam * v.delta                 # 4. credit
        run.proposals.append((g, sid, p.start_turn, p.end_turn, v.delta, applied))
        if applied:
            st["credited"] += 1
            for t in range(p.start_turn, p.end_turn + 1):
                adv[g][sid][t] += bonus
        report.append(segment_report(run.step, group, sid, jr, v, applied, bonus))
        record(run, g, group, sid, jr, v, applied, bonus)
    return finish(run, st, deltas, report)


# ---------------------------------------------------------------------------------------------
# The pieces `credit` and methods/prover_options.py share: the batch's judge, the counts, the
# verification seed, the metrics, segments.md and the records
# ---------------------------------------------------------------------------------------------
class BatchJudge:
    """The run's judge for one batch. An endpoint that refused a connection (after its own retries
    and backoff) is down: asking again for each remaining group would add its backoff each, so
    they are dropped unasked (the drop says so); the next update asks again."""

    def __init__(self, judge):
        self.judge, self.refused = judge, None

    def propose(self, group, sid: int, **kw):
        if self.refused is not None:
            return self.refused.skipped()
        jr = self.judge.propose(group, sid, **kw)
        if jr.reason_key == "connection error":
            self.refused = jr
        return jr


def count_proposal(run, st: Counter, jr) -> None:
    """The judge's tokens and the proposal's fate (valid, repaired, or dropped with its reason)."""
    run.agent.counter["tokens/judge"] += jr.completion_tokens
    run.agent.counter["tokens/judge_prompt"] += jr.prompt_tokens
    st["proposals"] += 1
    if jr.proposal is None:
        st["dropped"] += 1
        st[f"dropped/{jr.reason_key or jr.reason}"] += 1
    else:
        st["repaired" if jr.status == "repaired" else "valid"] += 1
        st["seg_turns"] += jr.proposal.end_turn - jr.proposal.start_turn + 1


def verify_seed(run, traj) -> int:
    """The continuations' seed: per (run seed, update, group) — ints only (str hashes vary per process)."""
    return hash((run.cfg.seed, run.step, traj.group_id)) & 0x7FFFFFFF


def finish(run, st: Counter, deltas: list[float], report: list[str], extra: dict | None = None) -> dict:
    """Appends the batch's entries to segments.md; returns the update's prover/* metrics."""
    if report:
        rundir.append_segments(run.out, SEGMENTS_HEADER, [r + "\n" for r in report])
    out = {f"prover/{k}": v for k, v in st.items() if k != "seg_turns"}
    for k in ("eligible", "proposals", "valid", "repaired", "dropped", "credited"):
        out[f"prover/{k}"] = st[k]
    if deltas:
        out["prover/delta_mean"] = sum(deltas) / len(deltas)
        out["prover/accept_rate"] = sum(d > 0 for d in deltas) / len(deltas)
        out["prover/seg_len_mean"] = st["seg_turns"] / (st["valid"] + st["repaired"])
    out.update(extra or {})
    return out


def record(run, g, group, sid, jr, v=None, applied=False, bonus=0.0, extra: dict | None = None) -> None:
    """What the credit step saw and did for group g, for records.jsonl (infra/records.py bounds
    it): the judged success, the proposal or the drop reason, the judge's tool calls and repairs,
    and once verified Δ̂ ± SE with the K pre / K post continuation outcomes and the bonus added;
    `extra`: what the options beyond the paper did (methods/prover_options.py)."""
    recs = getattr(run, "records", None)
    if recs is None:                  # a caller's own Run without the list: nothing to record
        return
    r = {"g": g, "sid": sid, "traj": group[sid].traj_id if sid is not None else None, "status": jr.status,
         "reason": jr.reason, "repairs": jr.repairs, "tool_calls": jr.tool_calls, "start": None, "end": None}
    if jr.proposal is not None:
        p = jr.proposal
        r.update(start=p.start_turn, end=p.end_turn, failure_mode=p.failure_mode, rationale=p.rationale)
    if v is not None:
        r.update(delta=v.delta, se=v.se, sr_pre=v.sr_pre, sr_post=v.sr_post, k=v.k, pre=list(v.pre),
                 post=list(v.post), applied=applied, bonus=bonus if applied else 0.0, test="positive",
                 paired=v.paired, se_unpaired=v.se_unpaired, rounds=v.rounds)
    if getattr(jr, "success_note", None):
        r["choice"] = jr.success_note
    if extra is not None and v is not None:
        r.update(extra)
    recs.append(r)


def segment_report(step, group, sid, jr, v=None, applied=False, bonus=0.0, verdict: str | None = None) -> str:
    """One segments.md entry: the group, the judged success, the segment verbatim and the verdict
    (the bonus added); `verdict`: the options' own lines instead of the paper's."""
    tr = group[sid]
    n_succ = int(sum(t.success for t in group))
    head = (f"## step {step} · group {tr.group_id} · task {tr.task} ({tr.task_type}) · "
            f"{n_succ}/{len(group)} successes · judged traj {tr.traj_id} ({len(tr.turns)} turns)\n\n"
            f"Task: {tr.task_text}\n\n")
    if getattr(jr, "success_id", None) is not None:
        head += (f"Success chosen by the judge: traj {tr.traj_id}"
                 + (f" (its choice was not used: {jr.success_note})" if jr.success_note else "") + "\n\n")
    if jr.proposal is None:
        return head + f"**Dropped**: {jr.reason} (after {jr.repairs} repair turns, {jr.tool_calls} tool calls)\n"
    p = jr.proposal
    lines = [head, f"Failure mode: {p.failure_mode}\n\n", f"Rationale: {p.rationale}\n\n",
             f"Segment: turns {p.start_turn}–{p.end_turn} ({jr.status}, {jr.repairs} repairs, {jr.tool_calls} tool calls)\n\n"]
    for t in range(p.start_turn, p.end_turn + 1):
        tn = tr.turns[t]
        lines.append(f"- turn {t}: `{tn.action}` → {tn.next_obs[:300]}\n")
    if verdict is None:
        said = f"credit +{bonus:.3f} applied" if applied else "no credit (Δ̂ ≤ margin)"     # bonus = λ·Δ̂
        verdict = f"\nΔ̂ = {v.delta:+.3f} ± {v.se:.3f} (K={v.k}; SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {said}\n"
    lines.append(verdict)
    return "".join(lines)
