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

Options (issue #22; every default is the paper's procedure above, bit for bit)
----------------------------------------------------------------------------
Notation: Δ̂ ± SE from verify.py, z = --credit-z, m = --margin, λ = --lam, H = the prompt's
history length. The prompt view of turn t of trajectory j is what the compact prompt is built from,

    κ(j, t) = (obs_t, admissible_t, the last H (obs, action) pairs before t)

(the state GiGPO anchors on; the chat prompt's step counter is not part of it).

--judge-success shortest|judge   τ* = the shortest success (paper) | the success the judge names
    (it sees every success's preview; judge.py validates the choice, and an invalid one falls back
    to the shortest with reason key "success_choice", counted as prover/success_fallback/*).

--judge-max N   (default 0 = all) judge at most N of the update's eligible groups, a uniform draw
    seeded by (--seed, update); the others are counted as prover/unjudged. The judge's and the
    verification's tokens scale with the groups judged, so this is the knob that trades credit
    for cost.

--credit-test positive|se|shrink  (with --credit-z z, default 1) the credit rule of step 4:
    positive   credit iff Δ̂ > m,                 bonus b = λ·Δ̂          (paper)
    se         credit iff Δ̂ > m and Δ̂ > z·SE,    bonus b = λ·Δ̂
    shrink     credit iff Δ̂ > m and Δ̂ > z·SE,    bonus b = λ·max(Δ̂ − z·SE, 0)
    (se and shrink stop zero-value segments from earning a positive expected bonus from noise;
    shrink also scales the bonus by how clearly it is positive.)

--credit-scope segment|matched   who gets b:
    segment    A_{τ*,t} += b  for t = ℓ..r                               (paper)
    matched    A_{j,u+k} += b for k = 0..r−ℓ and every (j, u) of the group with
               κ(j, u+k) = κ(τ*, ℓ+k) and a_{j,u+k} = a_{τ*,ℓ+k} (format-valid) for all k:
               every rollout that took the segment's actions from the same prompt-visible states
               made the same verified decision (τ*'s own (ℓ, r) included; a turn gets b once).

--focus β   (default 1) when the segment is credited, τ*'s other turns keep β·A^GRPO:
               A_{τ*,t} ← β·A_{τ*,t}  for t ∉ [ℓ, r]   (before the bonuses are added)
    so the success's outcome advantage concentrates on the verified decision.

--negative-credit   the alternatives the failures took at the segment's start: every failed j and
    turn u with κ(j, u) = κ(τ*, ℓ) and a_{j,u} ≠ a_{τ*,ℓ} is grouped by its action a′; each distinct
    a′ is verified from the state after the first such turn that is not terminal (verify.alternatives,
    K continuations, V̂(s_pre) shared with the main estimate):
        Â(a′) = V̂(s_after a′) − V̂(s_pre) ± SE
    The credit test above is applied to D = −Â(a′) = V̂(s_pre) − V̂(s_after a′) (is a′ verifiably
    worse?); where it passes, each such turn gets the bonus with the sign flipped:
        A_{j,u} −= λ·D (positive, se)   |   A_{j,u} −= λ·max(D − z·SE, 0) (shrink)
    An alternative whose every occurrence is the failure's last turn cannot be continued and is
    skipped (prover/neg_terminal). This runs for every verified proposal, credited or not.

--verify-crn, --verify-k-max   common random numbers and adaptive K in the verification (verify.py):
    Δ̂ = mean_k (R_post,k − R_pre,k) with the paired SE, and rounds of K continuations until
    Δ̂ ≠ 0 and |Δ̂| ≥ z·SE, or K_max per side; with --verify-estimate fresh (the default) the
    rounds only choose k and Δ̂ comes from a second batch of k (the pooled Δ̂ is biased upward).

--method prover-plus   ProVer with `PLUS` (our departure from the paper; the options it combines
    override the config's values, the other options apply as given):
        every mixed group is eligible   (--max-success: no upper bound; the paper takes 1..3 of 8)
        --judge-success judge           (the judge names the success it examines)
        --credit-scope matched          (the verified bonus goes to every rollout that took the
                                         segment's actions from the same prompt-visible states)
    Why these three: in the credit lab (keydoor, where the pivotal turn is known) the paper's
    procedure credits almost nothing. With the policy succeeding on most tasks, few groups have
    1..3 successes; in about half of those the shortest success is a lucky run that never took the
    key, so the judge finds no decision the failures lacked and the group is dropped; and a
    credited segment reaches one rollout of eight. The three options together raise the credited
    key turns per update by an order of magnitude, for more verification tokens. The other
    options are left to the user: --lam 3 with --negative-credit on top raises the early gain
    further but not the end of training; alone on the paper's ProVer, --focus 0, --credit-test
    se|shrink (which credit fewer segments), --verify-crn and --verify-k-max move the early gain
    less than matched scope or negative credit, and none moves the end of training.
    results/prover_plus.md has the paired study of the combinations, results/prover_options.md each
    option alone (their commands at the top; bench/credit_lab.py --name ... re-runs them).

Cost of the options, all counted: continuations (every round, every alternative) under
`tokens/verify` / `env_steps/verify`; the judge's choice of success adds its searches (builtin) or
the longer prompt and answer (LLM judges) to `tokens/judge`. The matching, the credit tests and
--focus cost nothing. Extra metrics appear only with their option: prover/bonus_mean (non-positive
tests), prover/matched_turns / matched_trajs, prover/verify_k_mean and prover/crn_se_mean,
prover/neg_*, prover/success_chosen, prover/success_fallback/*.

An endpoint that refuses a connection (after its own retries and backoff) is not asked again in
the same update: the update's remaining eligible groups are dropped with the same reason, so a dead
judge costs one proposal's backoff per update rather than one per group.

Everything spent is counted: judge tokens under `tokens/judge`, continuations under
`tokens/verify` / `env_steps/verify`. Each proposal — applied or not, or dropped with its reason —
is written to `segments.md` in the run directory so a reader can see which decisions got credit
(with the options' extra lines: the matched trajectories, the shrunk bonus, CRN's paired SE next
to the unpaired one, the negative-credit alternatives), and kept as a dict in `run.records` (one
per judged group: the proposal, tool calls, Δ̂ ± SE and the continuations' outcomes), which
train.py turns into the update's line of records.jsonl (records.py) and report.html shows
(report.py).
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter

import grpo
from infra import rundir
import verify
from rollout import shortest_success

SEGMENTS_HEADER = ("# Credited segments\n\nEach entry: the judge's proposal on one eligible group, the "
                   "segment's turns verbatim, the verified advantage Δ̂ ± SE, and whether credit was "
                   "applied (or why the proposal was dropped).\n\n")

# --method prover-plus: these override the config's values (the docstring says why these)
ALL_MIXED = 1 << 30             # --max-success with no upper bound: every group with a success and a failure
PLUS = {"max_success": ALL_MIXED, "judge_success": "judge", "credit_scope": "matched"}


def eligible(group, min_success: int, max_success: int) -> bool:
    """Mixed outcome with min..max successes (the paper: 1..3 of 8)."""
    n = sum(t.success for t in group)
    return 0 < n < len(group) and min_success <= n <= max_success


def view_key(tr, t: int, history_len: int) -> tuple:
    """κ(j, t): the prompt-visible state of turn t (observation, admissible list, the last
    `history_len` (obs, action) pairs), from the restore handle's history when the turn has one,
    else rebuilt from the trajectory's earlier turns (the same pairs for an episode from reset)."""
    tn = tr.turns[t]
    hist = tn.state.history if tn.state is not None else tuple((x.obs, x.action) for x in tr.turns[:t])
    return tn.obs, tuple(tn.admissible), tuple(hist[max(0, len(hist) - history_len):])


def matched_segments(group, sid: int, start: int, end: int, history_len: int) -> list[tuple[int, int]]:
    """(j, u) of every run of turns u..u+(end−start) in the group that took τ*'s segment actions
    from the same prompt views (format-valid turns only); τ*'s own (sid, start) is one of them."""
    succ, n = group[sid], end - start + 1
    want = [(succ.turns[t].action, view_key(succ, t, history_len)) for t in range(start, end + 1)]
    out = []
    for j, tr in enumerate(group):
        for u in range(len(tr.turns) - n + 1):
            # the action first: cheap, and it rules out almost every turn
            if all(tr.turns[u + k].valid and tr.turns[u + k].action == want[k][0]
                   and view_key(tr, u + k, history_len) == want[k][1] for k in range(n)):
                out.append((j, u))
    return out


def alternatives_at(group, sid: int, start: int, history_len: int) -> dict[str, list[tuple[int, int]]]:
    """action a′ → the (j, u) of failed runs that, at τ*'s view κ(τ*, ℓ), took a format-valid a′ ≠ a_{τ*,ℓ}."""
    succ = group[sid]
    key, a0 = view_key(succ, start, history_len), succ.turns[start].action
    alts: dict[str, list[tuple[int, int]]] = {}
    for j, tr in enumerate(group):
        if tr.won:
            continue
        for u, tn in enumerate(tr.turns):
            # format-valid turns only (as matched_segments): a malformed reply is not an alternative
            # action, and its format penalty already says what was wrong with it
            if tn.valid and tn.action != a0 and tn.obs == key[0] and view_key(tr, u, history_len) == key:
                alts.setdefault(tn.action, []).append((j, u))
    return alts


def options_on(cfg) -> bool:
    """Any issue-#22 option away from the paper's default (then segments.md and the records say
    what it did; with none, both are exactly the paper's)."""
    return (cfg.credit_test != "positive" or cfg.credit_scope != "segment" or cfg.negative_credit
            or cfg.focus != 1.0 or cfg.verify_crn or cfg.verify_k_max > 0 or cfg.judge_success != "shortest")


def credit_decision(delta: float, se: float, cfg) -> tuple[bool, float]:
    """(credit?, bonus) under --credit-test (docstring): positive is the paper's Δ̂ > margin, λ·Δ̂."""
    if cfg.credit_test == "positive":
        return delta > cfg.margin, cfg.lam * delta
    # verify.clears: the rule adaptive K stops on, strict and above rounding (a "positive" bound of
    # ~1e-17 would credit a zero bonus and still apply --focus to the rest of the trajectory)
    lcb = delta - cfg.credit_z * se
    ok = delta > cfg.margin and verify.clears(delta, se, cfg.credit_z)
    return ok, cfg.lam * (delta if cfg.credit_test == "se" else max(lcb, 0.0))


def judged_groups(groups, cfg, step: int) -> set[int]:
    """The eligible groups this update judges: all of them, or with --judge-max N > 0 a uniform
    draw of N (seeded by the run's seed and the update, so a resumed run draws the same)."""
    idx = [g for g, group in enumerate(groups) if eligible(group, cfg.min_success, cfg.max_success)]
    if cfg.judge_max <= 0 or len(idx) <= cfg.judge_max:
        return set(idx)
    return set(random.Random(cfg.seed * 1_000_003 + step).sample(idx, cfg.judge_max))


def credit(groups, adv, run, overrides: dict | None = None, estimate=None) -> dict:
    """ProVer credit for one batch. `adv[g][i][t]` (GRPO per-turn advantages) is updated in place;
    returns the metrics of this step (prover/*). `overrides`: config fields to replace for this
    call (prover-plus's PLUS). `estimate`: the verifier, verify.estimate's signature (default it;
    ladder.py's prover-exact passes the exact ΔV)."""
    estimate = estimate or verify.estimate
    cfg, agent = run.cfg, run.agent
    if overrides:
        cfg = dataclasses.replace(cfg, **overrides)
    H = getattr(agent, "history_len", cfg.history_len)      # the view the prompt is built from
    st: Counter = Counter()
    deltas: list[float] = []
    report: list[str] = []
    extra: dict[str, list[float]] = {"bonus": [], "k": [], "crn_se": []}
    refused = None       # the judge's endpoint refused a connection in this update (see below)
    chosen = judged_groups(groups, cfg, run.step)
    for g, group in enumerate(groups):
        if not eligible(group, cfg.min_success, cfg.max_success):
            continue
        st["eligible"] += 1
        if g not in chosen:                    # --judge-max: over this update's judging budget
            st["unjudged"] += 1
            continue
        sid = shortest_success(group)
        # 2. propose
        if refused is not None:
            # An endpoint that refused a connection (after its retries and backoff) is down: asking
            # again for each remaining group would only add ~14 s of backoff each. The rest of this
            # update's groups are dropped with the same reason; the next update tries again.
            jr = dataclasses.replace(refused, reason=f"{refused.reason_key}: skipped, the endpoint "
                                     "refused a connection earlier in this update", prompt_tokens=0,
                                     completion_tokens=0, transcript=[], tool_calls=0)
        elif cfg.judge_success == "judge":
            shortest = sid
            jr = run.judge.propose(group, sid, choose_success=True)
            if jr.success_id is not None and 0 <= jr.success_id < len(group) and group[jr.success_id].won:
                sid = jr.success_id
            st["success_chosen"] += sid != shortest
            if jr.success_note:
                st[f"success_fallback/{jr.success_note.split(':')[0]}"] += 1
        else:
            jr = run.judge.propose(group, sid)
        agent.counter["tokens/judge"] += jr.completion_tokens
        agent.counter["tokens/judge_prompt"] += jr.prompt_tokens
        st["proposals"] += 1
        if jr.proposal is None:
            if jr.reason_key == "connection error":
                refused = jr
            st["dropped"] += 1
            st[f"dropped/{getattr(jr, 'reason_key', None) or jr.reason}"] += 1
            report.append(segment_report(run.step, group, sid, jr, None, False))
            _record(run, g, group, sid, jr, None, False)
            continue
        st["repaired" if jr.status == "repaired" else "valid"] += 1
        p = jr.proposal
        # 3. verify: 2K continuations from the restored boundary states
        seed = hash((cfg.seed, run.step, group[sid].group_id)) & 0x7FFFFFFF
        v = estimate(agent, run.envs(2 * cfg.verify_k), group[sid], p.start_turn, p.end_turn,
                            cfg.verify_k, cfg.temperature, seed=seed,
                            crn=cfg.verify_crn, k_max=cfg.verify_k_max, z=cfg.credit_z,
                            fresh=cfg.verify_estimate == "fresh")
        deltas.append(v.delta)
        st["seg_turns"] += p.end_turn - p.start_turn + 1
        # 4. credit (only if the segment verifiably helps)
        applied, bonus = credit_decision(v.delta, v.se, cfg)
        run.proposals.append((g, sid, p.start_turn, p.end_turn, v.delta, applied))   # (for lab.py's hit rate)
        seg = range(p.start_turn, p.end_turn + 1)
        opt = {"test": cfg.credit_test, "bonus": bonus if applied else 0.0, "lam": cfg.lam}
        targets = [(sid, t) for t in seg]
        if cfg.credit_scope == "matched":
            occ = matched_segments(group, sid, p.start_turn, p.end_turn, H)
            targets = list(dict.fromkeys((j, u + k) for j, u in occ for k in range(len(seg))))   # each turn once
            opt["matched"] = occ
        if applied:
            st["credited"] += 1
            if cfg.focus != 1.0:
                # β scales the outcome term only: a turn's format penalty (grpo.turn_penalty) is
                # about that turn's text, not its credit, and stays whole
                for t in range(len(group[sid].turns)):
                    if t not in seg:
                        pen = grpo.turn_penalty(group[sid].turns[t], cfg.invalid_penalty, cfg.inadmissible_penalty)
                        adv[g][sid][t] = cfg.focus * (adv[g][sid][t] + pen) - pen
            for j, t in targets:
                adv[g][j][t] += bonus
            if cfg.credit_scope == "matched":
                st["matched_turns"] += len(targets) - len(seg)
                st["matched_trajs"] += len({j for j, _ in targets} - {sid})
            if cfg.credit_test != "positive":
                extra["bonus"].append(bonus)
        if cfg.verify_k_max:
            extra["k"].append(v.k)
        if cfg.verify_crn:
            extra["crn_se"].append(v.se)
        if cfg.negative_credit:
            opt["neg"] = _negative_credit(run, cfg, agent, g, group, sid, p.start_turn, H, v, seed, adv, st)
        opt["focus"] = cfg.focus
        if not options_on(cfg):
            opt = None                    # the paper's procedure: nothing beyond Δ̂ ± SE to report
        report.append(segment_report(run.step, group, sid, jr, v, applied, opt))
        _record(run, g, group, sid, jr, v, applied, opt)
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
    for k, xs in extra.items():
        if xs:
            out[f"prover/{'verify_k' if k == 'k' else k}_mean"] = sum(xs) / len(xs)
    return out


def _negative_credit(run, cfg, agent, g, group, sid, start, H, v, seed, adv, st) -> list[dict]:
    """--negative-credit for one verified proposal (docstring): verify each failure's alternative
    at κ(τ*, ℓ) against the shared V̂(s_pre) and penalise it where it is verifiably worse."""
    alts, todo = alternatives_at(group, sid, start, H), []
    for a, occ in alts.items():
        # restore from the first occurrence that has a state after it (a terminal turn has none)
        src = next(((j, u) for j, u in occ if u + 1 < len(group[j].turns) and group[j].turns[u + 1].state is not None), None)
        if src is None:
            st["neg_terminal"] += 1
            continue
        todo.append((a, occ, src))
    res = verify.alternatives(agent, run.envs(v.k * len(todo)), v,
                              [group[j].turns[u + 1].state for _, _, (j, u) in todo], cfg.temperature, seed) if todo else []
    out = []
    for (a, occ, src), av in zip(todo, res):
        st["neg_alts"] += 1
        worse, amount = credit_decision(-av.delta, av.se, cfg)      # D = V̂(s_pre) − V̂(s_after a′)
        if worse:
            st["neg_credited"] += 1
            st["neg_turns"] += len(occ)
            for j, u in occ:
                adv[g][j][u] -= amount
        out.append({"action": a, "occ": occ, "src": src, "delta": av.delta, "se": av.se, "sr": av.sr_post,
                    "applied": worse, "penalty": -amount if worse else 0.0})
    return out


def credit_plus(groups, adv, run) -> dict:
    """--method prover-plus: ProVer with PLUS overriding the config (docstring). A run built for
    another method name may have no judge yet (build.judge_setup makes one for "prover"): make it."""
    if run.judge is None:
        from infra import build
        gen = run.agent.gen
        run.judge = build.judge_setup(dataclasses.replace(run.cfg, method="prover"), getattr(gen, "model", None),
                                      run.agent.tok)
    return credit(groups, adv, run, overrides=PLUS)


def _record(run, g, group, sid, jr, v, applied, opt: dict | None = None) -> None:
    """What the credit step saw and did for group g, for records.jsonl (records.judge_entry bounds
    it): the judged success, the proposal or the drop reason, the judge's tool calls and repairs,
    and, once verified, Δ̂ ± SE with the K pre / K post continuation outcomes (and, with the
    issue-#22 options, the bonus, matched turns, CRN and adaptive-K details and alternatives)."""
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
        r.update(bonus=opt["bonus"], test=opt["test"], paired=v.paired, se_unpaired=v.se_unpaired, rounds=v.rounds)
        if "matched" in opt:
            r["matched"] = [[group[j].traj_id, u] for j, u in opt["matched"]]
        if "neg" in opt:
            r["neg"] = [{"action": x["action"], "occ": [[group[j].traj_id, u] for j, u in x["occ"]],
                         "delta": x["delta"], "se": x["se"], "applied": x["applied"], "penalty": x["penalty"]}
                        for x in opt["neg"]]
    recs.append(r)


def segment_report(step, group, sid, jr, v, applied, opt: dict | None = None) -> str:
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
        return "".join(lines)
    # the issue-#22 options: say what each one did
    rule = {"positive": "Δ̂ > margin", "se": "Δ̂ > margin and Δ̂ > z·SE", "shrink": "Δ̂ > margin and Δ̂ > z·SE"}[opt["test"]]
    verdict = f"credit +{opt['bonus']:.3f} applied" if applied else f"no credit (not {rule})"
    se_txt = (f"paired SE {v.se:.3f} (CRN; unpaired {v.se_unpaired:.3f})" if v.paired else f"SE {v.se:.3f}")
    lines.append(f"\nΔ̂ = {v.delta:+.3f}, {se_txt} (K={v.k} per side in {v.rounds} round{'s' * (v.rounds > 1)}; "
                 f"SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {verdict}\n")
    if opt["test"] == "shrink" and applied:
        lines.append(f"- shrunk bonus: λ·max(Δ̂ − z·SE, 0) = {opt['bonus']:.3f} (λ·Δ̂ = {opt['lam'] * v.delta:.3f})\n")
    if "matched" in opt:
        others = [(group[j].traj_id, u) for j, u in opt["matched"] if j != sid]
        lines.append(f"- matched scope: {len(others)} other run(s) took the segment's actions from the same "
                     f"prompt views: " + (", ".join(f"traj {i} turn {u}" for i, u in others) or "none")
                     + (" (credited alike)" if applied and others else "") + "\n")
    if applied and opt["focus"] != 1.0:
        lines.append(f"- focus: traj {tr.traj_id}'s other turns keep {opt['focus']:g} × their GRPO advantage\n")
    for x in opt.get("neg", []):
        where = ", ".join(f"traj {group[j].traj_id} turn {u}" for j, u in x["occ"])
        lines.append(f"- negative credit: alternative `{x['action']}` ({where}): Â = {x['delta']:+.3f} ± {x['se']:.3f}"
                     f" (SR after it {x['sr']:.3f}) → "
                     + (f"penalty {x['penalty']:+.3f}" if x["applied"] else "not verifiably worse") + "\n")
    return "".join(lines)
