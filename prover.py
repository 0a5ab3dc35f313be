"""ProVer: propose → verify → credit, on top of GRPO.

    for each rollout group with 1..3 successes of G (DESIGN §4; flags --min-success/--max-success):
        1. take the shortest successful trajectory τ*
        2. PROPOSE  judge.propose(group, τ*)  → segment (ℓ, r) of τ*'s turns, or None (+ reason)
                    (the judge contrasts τ* with the failures through search_trajectory/get_segment;
                     its output is validated and repaired up to 3 times, see judge.py)
        3. VERIFY   Δ̂ = SR(s_{r+1}) − SR(s_ℓ) from K current-policy continuations each (verify.py)
        4. CREDIT   if Δ̂ > margin (0 in the paper):  A_t ← A^GRPO_t + λ·Δ̂  for every policy token of
                    turns ℓ..r of τ*  (λ = 1). Nothing else changes: other tokens keep A^GRPO, the
                    continuations are not training data, the loss (clip, ratios) is unchanged.

Toy example from the paper: 2/4 continuations succeed from s_ℓ, 3/4 from s_{r+1} → the segment's
tokens get +0.25 on top of their GRPO advantage.

Everything spent is counted: judge tokens under `tokens/judge`, continuations under
`tokens/verify` / `env_steps/verify`. Each proposal — applied or not, or dropped with its reason —
is written to `segments.md` in the run directory so a reader can see which decisions got credit,
and kept as a dict in `run.records` (one per judged group: the proposal, tool calls, Δ̂ ± SE and
the continuations' outcomes), which train.py turns into the update's line of records.jsonl
(records.py) and report.html shows (report.py).
"""
from __future__ import annotations

from collections import Counter

import rundir
import verify
from rollout import shortest_success

SEGMENTS_HEADER = ("# Credited segments\n\nEach entry: the judge's proposal on one eligible group, the "
                   "segment's turns verbatim, the verified advantage Δ̂ ± SE, and whether credit was "
                   "applied (or why the proposal was dropped).\n\n")


def eligible(group, min_success: int, max_success: int) -> bool:
    """Mixed outcome with min..max successes (the paper: 1..3 of 8)."""
    n = sum(t.success for t in group)
    return 0 < n < len(group) and min_success <= n <= max_success


def credit(groups, adv, run) -> dict:
    """ProVer credit for one batch. `adv[g][i][t]` (GRPO per-turn advantages) is updated in place;
    returns the metrics of this step (prover/*)."""
    cfg, agent = run.cfg, run.agent
    st: Counter = Counter()
    deltas: list[float] = []
    report: list[str] = []
    for g, group in enumerate(groups):
        if not eligible(group, cfg.min_success, cfg.max_success):
            continue
        st["eligible"] += 1
        sid = shortest_success(group)
        # 2. propose
        jr = run.judge.propose(group, sid)
        agent.counter["tokens/judge"] += jr.completion_tokens
        agent.counter["tokens/judge_prompt"] += jr.prompt_tokens
        st["proposals"] += 1
        if jr.proposal is None:
            st["dropped"] += 1
            st[f"dropped/{getattr(jr, 'reason_key', None) or jr.reason}"] += 1
            report.append(segment_report(run.step, group, sid, jr, None, False))
            _record(run, g, group, sid, jr, None, False)
            continue
        st["repaired" if jr.status == "repaired" else "valid"] += 1
        p = jr.proposal
        # 3. verify: 2K continuations from the restored boundary states
        v = verify.estimate(agent, run.envs(2 * cfg.verify_k), group[sid], p.start_turn, p.end_turn,
                            cfg.verify_k, cfg.temperature, seed=hash((cfg.seed, run.step, group[sid].group_id)) & 0x7FFFFFFF)
        deltas.append(v.delta)
        st["seg_turns"] += p.end_turn - p.start_turn + 1
        # 4. credit (only if the segment verifiably helps)
        applied = v.delta > cfg.margin
        run.proposals.append((g, sid, p.start_turn, p.end_turn, v.delta, applied))   # (for lab.py's hit rate)
        if applied:
            st["credited"] += 1
            for t in range(p.start_turn, p.end_turn + 1):
                adv[g][sid][t] += cfg.lam * v.delta
        report.append(segment_report(run.step, group, sid, jr, v, applied))
        _record(run, g, group, sid, jr, v, applied)
    if report:
        rundir.append_segments(run.out, SEGMENTS_HEADER, [r + "\n" for r in report])
    n_valid = st["valid"] + st["repaired"]
    out = {f"prover/{k}": v for k, v in st.items() if k != "seg_turns"}
    out.update({"prover/eligible": st["eligible"], "prover/proposals": st["proposals"],
                "prover/valid": st["valid"], "prover/repaired": st["repaired"], "prover/dropped": st["dropped"],
                "prover/credited": st["credited"]})
    if deltas:
        out["prover/delta_mean"] = sum(deltas) / len(deltas)
        out["prover/accept_rate"] = sum(d > 0 for d in deltas) / len(deltas)
        out["prover/seg_len_mean"] = st["seg_turns"] / n_valid
    return out


def _record(run, g, group, sid, jr, v, applied) -> None:
    """What the credit step saw and did for group g, for records.jsonl (records.judge_entry bounds
    it): the judged success, the proposal or the drop reason, the judge's tool calls and repairs,
    and, once verified, Δ̂ ± SE with the K pre / K post continuation outcomes."""
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
                 post=list(v.post), applied=applied)
    recs.append(r)


def segment_report(step, group, sid, jr, v, applied) -> str:
    tr = group[sid]
    n_succ = int(sum(t.success for t in group))
    head = (f"## step {step} · group {tr.group_id} · task {tr.task} ({tr.task_type}) · "
            f"{n_succ}/{len(group)} successes · judged traj {tr.traj_id} ({len(tr.turns)} turns)\n\n"
            f"Task: {tr.task_text}\n\n")
    if jr.proposal is None:
        return head + f"**Dropped**: {jr.reason} (after {jr.repairs} repair turns, {jr.tool_calls} tool calls)\n"
    p = jr.proposal
    lines = [head, f"Failure mode: {p.failure_mode}\n\n", f"Rationale: {p.rationale}\n\n",
             f"Segment: turns {p.start_turn}–{p.end_turn} ({jr.status}, {jr.repairs} repairs, {jr.tool_calls} tool calls)\n\n"]
    for t in range(p.start_turn, p.end_turn + 1):
        tn = tr.turns[t]
        lines.append(f"- turn {t}: `{tn.action}` → {tn.next_obs[:300]}\n")
    verdict = f"credit +{v.delta:.3f} applied" if applied else "no credit (Δ̂ ≤ margin)"
    lines.append(f"\nΔ̂ = {v.delta:+.3f} ± {v.se:.3f} (K={v.k}; SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {verdict}\n")
    return "".join(lines)
