"""ProVer's credit: propose → verify → add, on top of GRPO's advantages.

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

`credit` below is exactly that procedure. Each step asks a `Paper` object for its choice (which
groups to judge, which success, the verifier's call, the credit rule, which turns get the bonus);
`methods/prover_options.py` overrides those named points for the options beyond the paper
(--credit-test, --credit-scope, --focus, --negative-credit, --judge-success, --judge-max, CRN and
adaptive K, and `--method prover-plus`). With none of them set, the paper's choices run, bit for bit.

Costs: the judge's tokens under `tokens/judge` (its prompts under `tokens/judge_prompt`), the
continuations' under `tokens/verify` / `env_steps/verify`. Each judged group is written to
`segments.md` (the segment verbatim, Δ̂ ± SE, applied or why dropped) and to `run.records`
(records.jsonl, shown by report.html).

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


class Paper:
    """The paper's choice at each named point of `credit`. One object per batch (it may keep what
    it learnt in the batch, e.g. that the judge's endpoint is down)."""

    def __init__(self, cfg):
        self.cfg, self.refused = cfg, None

    def judged(self, groups, step: int) -> set[int] | None:
        return None                              # every eligible group is judged

    def propose(self, judge, group, sid: int, st: Counter):
        """(the judge's result, the success it is about)."""
        if self.refused is not None:
            # an endpoint that refused a connection (after its own retries and backoff) is down:
            # asking again for each remaining group would add its backoff each; the next update retries
            return self.refused.skipped(), sid
        jr = judge.propose(group, sid)
        if jr.reason_key == "connection error":
            self.refused = jr
        return jr, sid

    def verify(self, estimate, agent, envs, traj, p, seed: int):
        c = self.cfg
        return estimate(agent, envs, traj, p.start_turn, p.end_turn, c.verify_k, c.temperature, seed=seed)

    def decide(self, v) -> tuple[bool, float]:
        """(credit?, bonus): Δ̂ > margin (0 in the paper), bonus λ·Δ̂."""
        return v.delta > self.cfg.margin, self.cfg.lam * v.delta

    def targets(self, group, sid: int, p, adv_g, applied: bool, st: Counter) -> list[tuple[int, int]]:
        """The (trajectory, turn) pairs that get the bonus: τ*'s segment."""
        return [(sid, t) for t in range(p.start_turn, p.end_turn + 1)]

    def after(self, run, g, group, sid, p, v, applied, bonus, adv, st, seed) -> dict | None:
        """Anything beyond the paper for this verified proposal; returns what segments.md and the
        record should say of it (None: nothing beyond Δ̂ ± SE)."""
        return None

    def metrics(self) -> dict:
        return {}


def credit(groups, adv, run, rules: Paper | None = None, estimate=None) -> dict:
    """ProVer's credit for one batch: adv[g][i][t] (GRPO's per-turn advantages of trajectory i of
    group g) gains λ·Δ̂ on verified segments, in place. Returns this update's prover/* metrics.
    `estimate`: the verifier (verify.estimate; the lab's exact arms pass the exact ΔV)."""
    rules, estimate = rules or Paper(run.cfg), estimate or verify.estimate
    cfg, agent = rules.cfg, run.agent                   # the rules' config (prover-plus overrides some fields)
    st, deltas, report = Counter(), [], []
    chosen = rules.judged(groups, run.step)
    for g, group in enumerate(groups):
        if not eligible(group, cfg.min_success, cfg.max_success):
            continue
        st["eligible"] += 1
        if chosen is not None and g not in chosen:
            st["unjudged"] += 1
            continue
        sid = shortest_success(group)                                          # 1. τ*
        jr, sid = rules.propose(run.judge, group, sid, st)                      # 2. propose
        agent.counter["tokens/judge"] += jr.completion_tokens
        agent.counter["tokens/judge_prompt"] += jr.prompt_tokens
        st["proposals"] += 1
        if jr.proposal is None:
            st["dropped"] += 1
            st[f"dropped/{jr.reason_key or jr.reason}"] += 1
            report.append(segment_report(run.step, group, sid, jr, None, False))
            record(run, g, group, sid, jr, None, False)
            continue
        st["repaired" if jr.status == "repaired" else "valid"] += 1
        p = jr.proposal
        seed = hash((cfg.seed, run.step, group[sid].group_id)) & 0x7FFFFFFF    # 3. verify: K + K continuations
        v = rules.verify(estimate, agent, run.envs(2 * cfg.verify_k), group[sid], p, seed)
        deltas.append(v.delta)
        st["seg_turns"] += p.end_turn - p.start_turn + 1
        applied, bonus = rules.decide(v)                                        # 4. credit
        run.proposals.append((g, sid, p.start_turn, p.end_turn, v.delta, applied))
        targets = rules.targets(group, sid, p, adv[g], applied, st)
        if applied:
            st["credited"] += 1
            for j, t in targets:
                adv[g][j][t] += bonus
        extra = rules.after(run, g, group, sid, p, v, applied, bonus, adv, st, seed)
        report.append(segment_report(run.step, group, sid, jr, v, applied, extra))
        record(run, g, group, sid, jr, v, applied, extra)
    if report:
        rundir.append_segments(run.out, SEGMENTS_HEADER, [r + "\n" for r in report])
    return summary(st, deltas, rules.metrics())


def summary(st: Counter, deltas: list[float], extra: dict) -> dict:
    """The update's prover/* metrics from the step counts and the Δ̂s."""
    out = {f"prover/{k}": v for k, v in st.items() if k != "seg_turns"}
    for k in ("eligible", "proposals", "valid", "repaired", "dropped", "credited"):
        out[f"prover/{k}"] = st[k]
    if deltas:
        out["prover/delta_mean"] = sum(deltas) / len(deltas)
        out["prover/accept_rate"] = sum(d > 0 for d in deltas) / len(deltas)
        out["prover/seg_len_mean"] = st["seg_turns"] / (st["valid"] + st["repaired"])
    out.update(extra)
    return out


def record(run, g, group, sid, jr, v, applied, opt: dict | None = None) -> None:
    """What the credit step saw and did for group g, for records.jsonl (infra/records.py bounds
    it): the judged success, the proposal or the drop reason, the judge's tool calls and repairs,
    and once verified Δ̂ ± SE with the K pre / K post continuation outcomes; `opt`: what the
    options beyond the paper did (methods/prover_options.py)."""
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
    if getattr(jr, "success_note", None):
        r["choice"] = jr.success_note
    if opt is not None and v is not None:
        r.update(opt["record"])
    recs.append(r)


def segment_report(step, group, sid, jr, v, applied, opt: dict | None = None) -> str:
    """One segments.md entry: the group, the judged success, the segment verbatim and the verdict."""
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
    if opt is None:
        verdict = f"credit +{v.delta:.3f} applied" if applied else "no credit (Δ̂ ≤ margin)"
        lines.append(f"\nΔ̂ = {v.delta:+.3f} ± {v.se:.3f} (K={v.k}; SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {verdict}\n")
    else:
        lines.append(opt["report"])
    return "".join(lines)
