"""ProVer's options beyond the paper: `credit` is prover.credit's steps, each with its options.

Notation: Δ̂ ± SE from verify.py, z = --credit-z, m = --margin, λ = --lam, H = the prompt's
history length; the prompt view of turn t of trajectory j, what the compact prompt is built from:
    κ(j, t) = (obs_t, admissible_t, the last H (obs, action) pairs before t)

eligible  --judge-max N: judge a uniform draw of N eligible groups (seeded by --seed and the update).
propose   --judge-success judge: the judge sees every success's preview and names the one it
          examines (an invalid choice falls back to the shortest: prover/success_fallback/*).
verify    --verify-crn, --verify-k-max, --verify-estimate fresh|pooled (methods/verify_options.py);
          --trust-judge C: no verification, Δ̂ := C for every proposal (what verification buys).
credit    --credit-test  positive: Δ̂ > m, b = λ·Δ̂ (paper) | se: also Δ̂ > z·SE, b = λ·Δ̂ |
          shrink: also Δ̂ > z·SE, b = λ·max(Δ̂ − z·SE, 0).
          --credit-scope matched: b also goes to every run u..u+(r−ℓ) of the group that took τ*'s
          segment actions from the same prompt views, κ(j, u+k) = κ(τ*, ℓ+k) (each turn once);
          --focus β: once credited, τ*'s turns outside the segment keep β·A^GRPO (format penalty whole).
          --negative-credit: every failed (j, u) with κ(j, u) = κ(τ*, ℓ) and a different action a′
          is grouped by a′; each a′ is verified from the state after its first non-terminal
          occurrence against the shared V̂(s_pre): Â(a′) = V̂(s_after a′) − V̂(s_pre). The credit test
          runs on D = −Â(a′); where it passes, each such turn gets −λ·D (shrink: −λ·max(D − z·SE, 0)).

--method prover runs `credit` instead of prover.credit when any of these flags is set
(`beyond_paper`; methods/__init__.py). --method prover-plus = `credit` with PLUS: every mixed
group eligible, --judge-success judge and --credit-scope matched (these override the flags). Why:
in the credit lab few groups have 1..3 successes of 8, the shortest success is often a lucky run,
and a credited segment reaches one rollout of eight; together they raise the credited pivotal
turns per update by an order of magnitude, for more verification tokens. results/prover_plus/ and
results/prover_options/ hold the paired studies.

Costs, all counted: every continuation (rounds, alternatives) under tokens/verify; the choice of
success in tokens/judge. Extra metrics appear only with their option: prover/bonus_mean,
prover/matched_turns|trajs, prover/verify_k_mean, prover/crn_se_mean, prover/neg_*,
prover/success_chosen, prover/success_fallback/*.
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter

import grpo
import prover
import methods.verify_options as verify_options
from rollout import shortest_success
from verify import Verification

ALL_MIXED = 1 << 30             # --max-success with no upper bound: every group with a success and a failure
PLUS = {"max_success": ALL_MIXED, "judge_success": "judge", "credit_scope": "matched"}


def options_on(cfg) -> bool:
    """An option that changes what a judged group's entry says (segments.md, the records)."""
    return (cfg.credit_test != "positive" or cfg.credit_scope != "segment" or cfg.negative_credit
            or cfg.focus != 1.0 or cfg.verify_crn or cfg.verify_k_max > 0 or cfg.judge_success != "shortest"
            or cfg.trust_judge > 0)


def beyond_paper(cfg) -> bool:
    """Any flag beyond the paper (--judge-max too): `--method prover` then runs `credit` below."""
    return options_on(cfg) or cfg.judge_max > 0


def credit(groups, adv, run, estimate=None, cfg=None) -> dict:
    """prover.credit with the options of `cfg` (default: the run's), in place; returns the update's
    prover/* metrics. `estimate`: the verifier (verify_options.estimate; the lab's exact ΔV)."""
    cfg, estimate = cfg or run.cfg, estimate or verify_options.estimate
    H = getattr(run.agent, "history_len", cfg.history_len)
    judge = prover.BatchJudge(run.judge)
    st, deltas, report, extra = Counter(), [], [], {"bonus": [], "k": [], "crn_se": []}
    todo = [g for g, group in enumerate(groups) if prover.eligible(group, cfg.min_success, cfg.max_success)]
    judged = judged_groups(todo, cfg, run.step)                                  # --judge-max
    for g in todo:
        group = groups[g]
        st["eligible"] += 1
        if g not in judged:
            st["unjudged"] += 1
            continue
        jr, sid = propose(judge, group, shortest_success(group), cfg, st)       # --judge-success
        prover.count_proposal(run, st, jr)
        if jr.proposal is None:
            report.append(prover.segment_report(run.step, group, sid, jr))
            prover.record(run, g, group, sid, jr)
            continue
        p = jr.proposal
        seg = range(p.start_turn, p.end_turn + 1)
        if cfg.trust_judge > 0:           # no continuations: the judge's segment is worth C by fiat
            v = Verification(cfg.trust_judge, 0.0, 0.0, cfg.trust_judge, 0, [], [])
        else:
            v = estimate(run.agent, run.envs(2 * cfg.verify_k), group[sid], p.start_turn, p.end_turn, cfg.verify_k,
                         cfg.temperature, seed=prover.verify_seed(run, group[sid]), crn=cfg.verify_crn,
                         k_max=cfg.verify_k_max, z=cfg.credit_z, fresh=cfg.verify_estimate == "fresh")
        deltas.append(v.delta)
        applied, bonus = credit_decision(v.delta, v.se, cfg)                     # --credit-test
        run.proposals.append((g, sid, p.start_turn, p.end_turn, v.delta, applied))
        opt = {"test": cfg.credit_test}
        targets = [(sid, t) for t in seg]
        if cfg.credit_scope == "matched":
            opt["matched"] = matched_segments(group, sid, p.start_turn, p.end_turn, H)
            targets = list(dict.fromkeys((j, u + k) for j, u in opt["matched"] for k in range(len(seg))))   # each turn once
        if applied:
            if cfg.focus != 1.0:
                focus(adv[g][sid], group[sid], seg, cfg)
            st["credited"] += 1
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
            opt["neg"] = negative_credit(run, cfg, g, group, sid, p.start_turn, H, v, prover.verify_seed(run, group[sid]), adv, st)
        verdict = report_lines(group, sid, v, applied, bonus, cfg, opt) if options_on(cfg) else None
        report.append(prover.segment_report(run.step, group, sid, jr, v, applied, bonus, verdict))
        prover.record(run, g, group, sid, jr, v, applied, bonus, record_fields(group, opt))
    metrics = {f"prover/{'verify_k' if k == 'k' else k}_mean": sum(xs) / len(xs) for k, xs in extra.items() if xs}
    return prover.finish(run, st, deltas, report, metrics)


def plus_credit(groups, adv, run, estimate=None) -> dict:
    """--method prover-plus: `credit` with PLUS overriding the config's values."""
    return credit(groups, adv, run, estimate, dataclasses.replace(run.cfg, **PLUS))


def judged_groups(todo: list[int], cfg, step: int) -> set[int]:
    """The eligible groups `todo` this update judges: all, or with --judge-max N > 0 a uniform draw
    of N (seeded by the run's seed and the update, so a resumed run draws the same)."""
    if cfg.judge_max <= 0 or len(todo) <= cfg.judge_max:
        return set(todo)
    return set(random.Random(cfg.seed * 1_000_003 + step).sample(todo, cfg.judge_max))


def propose(judge: prover.BatchJudge, group, sid: int, cfg, st: Counter):
    """(the judge's result, the success it is about): τ*, or with --judge-success judge the success
    the judge names (a valid choice: a success of the group)."""
    if cfg.judge_success != "judge":
        return judge.propose(group, sid), sid
    jr, shortest = judge.propose(group, sid, choose_success=True), sid
    if jr.success_id is not None and 0 <= jr.success_id < len(group) and group[jr.success_id].won:
        sid = jr.success_id
    st["success_chosen"] += sid != shortest
    if jr.success_note:
        st[f"success_fallback/{jr.success_note.split(':')[0]}"] += 1
    return jr, sid


def credit_decision(delta: float, se: float, cfg) -> tuple[bool, float]:
    """(credit?, bonus) under --credit-test; positive is the paper's Δ̂ > margin, λ·Δ̂."""
    if cfg.credit_test == "positive":
        return delta > cfg.margin, cfg.lam * delta
    # verify_options.clears: strict and above rounding (a "positive" bound of ~1e-17 would credit a
    # zero bonus and still apply --focus to the rest of the trajectory)
    lcb = delta - cfg.credit_z * se
    ok = delta > cfg.margin and verify_options.clears(delta, se, cfg.credit_z)
    return ok, cfg.lam * (delta if cfg.credit_test == "se" else max(lcb, 0.0))


def view_key(tr, t: int, history_len: int) -> tuple:
    """κ(j, t), from the restore handle's history when the turn has one, else rebuilt from the
    trajectory's earlier turns (the same pairs for an episode from reset)."""
    tn = tr.turns[t]
    hist = tn.state.history if tn.state is not None else tuple((x.obs, x.action) for x in tr.turns[:t])
    return tn.obs, tuple(tn.admissible), tuple(hist[max(0, len(hist) - history_len):])


def matched_segments(group, sid: int, start: int, end: int, history_len: int) -> list[tuple[int, int]]:
    """(j, u) of every run of turns that took τ*'s segment actions from the same prompt views
    (format-valid turns only); τ*'s own (sid, start) is one of them."""
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


def focus(adv_i: list[float], tr, seg: range, cfg) -> None:
    """--focus β on the credited success's turns outside the segment, before the bonus: β scales
    the outcome term only, a turn's format penalty stays whole."""
    for t in range(len(tr.turns)):
        if t not in seg:
            pen = grpo.turn_penalty(tr.turns[t], cfg.invalid_penalty, cfg.inadmissible_penalty)
            adv_i[t] = cfg.focus * (adv_i[t] + pen) - pen


def alternatives_at(group, sid: int, start: int, history_len: int) -> dict[str, list[tuple[int, int]]]:
    """action a′ → the (j, u) of failed runs that, at τ*'s view κ(τ*, ℓ), took a format-valid a′ ≠ a_{τ*,ℓ}
    (a malformed reply is no alternative action: its format penalty already says what was wrong)."""
    succ = group[sid]
    key, a0 = view_key(succ, start, history_len), succ.turns[start].action
    alts: dict[str, list[tuple[int, int]]] = {}
    for j, tr in enumerate(group):
        if tr.won:
            continue
        for u, tn in enumerate(tr.turns):
            if tn.valid and tn.action != a0 and tn.obs == key[0] and view_key(tr, u, history_len) == key:
                alts.setdefault(tn.action, []).append((j, u))
    return alts


def negative_credit(run, cfg, g, group, sid, start, H, v, seed, adv, st) -> list[dict]:
    """--negative-credit for one verified proposal: verify each failure's alternative at κ(τ*, ℓ)
    against the shared V̂(s_pre) and penalise it where it is verifiably worse."""
    todo = []
    for a, occ in alternatives_at(group, sid, start, H).items():
        # restore from the first occurrence that has a state after it (a terminal turn has none)
        src = next(((j, u) for j, u in occ if u + 1 < len(group[j].turns) and group[j].turns[u + 1].state is not None), None)
        if src is None:
            st["neg_terminal"] += 1
            continue
        todo.append((a, occ, src))
    res = verify_options.alternatives(run.agent, run.envs(v.k * len(todo)), v, [group[j].turns[u + 1].state for _, _, (j, u) in todo],
                                      cfg.temperature, seed) if todo else []
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


def record_fields(group, opt: dict) -> dict:
    """The record's fields beyond the paper's: the credit test, matched turns, alternatives."""
    r = {"test": opt["test"]}
    if "matched" in opt:
        r["matched"] = [[group[j].traj_id, u] for j, u in opt["matched"]]
    if "neg" in opt:
        r["neg"] = [{"action": x["action"], "occ": [[group[j].traj_id, u] for j, u in x["occ"]],
                     "delta": x["delta"], "se": x["se"], "applied": x["applied"], "penalty": x["penalty"]}
                    for x in opt["neg"]]
    return r


def report_lines(group, sid, v, applied, bonus, cfg, opt: dict) -> str:
    """segments.md's verdict with what each option did."""
    tr = group[sid]
    rule = {"positive": "Δ̂ > margin", "se": "Δ̂ > margin and Δ̂ > z·SE", "shrink": "Δ̂ > margin and Δ̂ > z·SE"}[opt["test"]]
    verdict = f"credit +{bonus:.3f} applied" if applied else f"no credit (not {rule})"
    se_txt = (f"paired SE {v.se:.3f} (CRN; unpaired {v.se_unpaired:.3f})" if v.paired else f"SE {v.se:.3f}")
    lines = [f"\nΔ̂ = {v.delta:+.3f}, {se_txt} (K={v.k} per side in {v.rounds} round{'s' * (v.rounds > 1)}; "
             f"SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {verdict}\n"]
    if opt["test"] == "shrink" and applied:
        lines.append(f"- shrunk bonus: λ·max(Δ̂ − z·SE, 0) = {bonus:.3f} (λ·Δ̂ = {cfg.lam * v.delta:.3f})\n")
    if "matched" in opt:
        others = [(group[j].traj_id, u) for j, u in opt["matched"] if j != sid]
        lines.append(f"- matched scope: {len(others)} other run(s) took the segment's actions from the same "
                     f"prompt views: " + (", ".join(f"traj {i} turn {u}" for i, u in others) or "none")
                     + (" (credited alike)" if applied and others else "") + "\n")
    if applied and cfg.focus != 1.0:
        lines.append(f"- focus: traj {tr.traj_id}'s other turns keep {cfg.focus:g} × their GRPO advantage\n")
    for x in opt.get("neg", []):
        where = ", ".join(f"traj {group[j].traj_id} turn {u}" for j, u in x["occ"])
        lines.append(f"- negative credit: alternative `{x['action']}` ({where}): Â = {x['delta']:+.3f} ± {x['se']:.3f}"
                     f" (SR after it {x['sr']:.3f}) → "
                     + (f"penalty {x['penalty']:+.3f}" if x["applied"] else "not verifiably worse") + "\n")
    return "".join(lines)
