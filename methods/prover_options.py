"""ProVer's options beyond the paper, hooked into prover.credit at its named points.

Notation: Δ̂ ± SE from verify.py, z = --credit-z, m = --margin, λ = --lam, H = the prompt's
history length; the prompt view of turn t of trajectory j, what the compact prompt is built from:
    κ(j, t) = (obs_t, admissible_t, the last H (obs, action) pairs before t)

judged    --judge-max N: judge a uniform draw of N eligible groups (seeded by --seed and the update).
propose   --judge-success judge: the judge sees every success's preview and names the one it
          examines (an invalid choice falls back to the shortest: prover/success_fallback/*).
verify    --verify-crn (common random numbers, paired SE), --verify-k-max (rounds until Δ̂ ≠ 0 and
          |Δ̂| ≥ z·SE), --verify-estimate fresh|pooled (verify.py); --trust-judge C: no verification,
          Δ̂ := C for every proposal (the ablation that shows what verification buys).
decide    --credit-test  positive: Δ̂ > m, b = λ·Δ̂ (paper) | se: also Δ̂ > z·SE, b = λ·Δ̂ |
          shrink: also Δ̂ > z·SE, b = λ·max(Δ̂ − z·SE, 0).
targets   --credit-scope matched: b also goes to every run u..u+(r−ℓ) of the group that took τ*'s
          segment actions from the same prompt views, κ(j, u+k) = κ(τ*, ℓ+k) (each turn once);
          --focus β: once credited, τ*'s turns outside the segment keep β·A^GRPO (format penalty whole).
after     --negative-credit: every failed (j, u) with κ(j, u) = κ(τ*, ℓ) and a different action a′
          is grouped by a′; each a′ is verified from the state after its first non-terminal
          occurrence against the shared V̂(s_pre): Â(a′) = V̂(s_after a′) − V̂(s_pre). The credit test
          runs on D = −Â(a′); where it passes, each such turn gets −λ·D (shrink: −λ·max(D − z·SE, 0)).

--method prover-plus = ProVer with PLUS: every mixed group eligible, --judge-success judge and
--credit-scope matched (these override the flags). Why: in the credit lab few groups have 1..3
successes of 8, the shortest success is often a lucky run, and a credited segment reaches one
rollout of eight; together they raise the credited pivotal turns per update by an order of
magnitude, for more verification tokens. results/prover_plus/ and results/prover_options/ hold
the paired studies.

Costs, all counted: every continuation (rounds, alternatives) under tokens/verify; the choice of
success in tokens/judge. Extra metrics appear only with their option: prover/bonus_mean,
prover/matched_turns|trajs, prover/verify_k_mean, prover/crn_se_mean, prover/neg_*,
prover/success_chosen, prover/success_fallback/*.
"""
from __future__ import annotations

import dataclasses
import random

import grpo
import prover
import verify

ALL_MIXED = 1 << 30             # --max-success with no upper bound: every group with a success and a failure
PLUS = {"max_success": ALL_MIXED, "judge_success": "judge", "credit_scope": "matched"}


def options_on(cfg) -> bool:
    """Any option away from the paper's default (then segments.md and the records say what it did)."""
    return (cfg.credit_test != "positive" or cfg.credit_scope != "segment" or cfg.negative_credit
            or cfg.focus != 1.0 or cfg.verify_crn or cfg.verify_k_max > 0 or cfg.judge_success != "shortest"
            or cfg.trust_judge > 0)


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


def credit_decision(delta: float, se: float, cfg) -> tuple[bool, float]:
    """(credit?, bonus) under --credit-test; positive is the paper's Δ̂ > margin, λ·Δ̂."""
    if cfg.credit_test == "positive":
        return delta > cfg.margin, cfg.lam * delta
    # verify.clears: strict and above rounding (a "positive" bound of ~1e-17 would credit a zero
    # bonus and still apply --focus to the rest of the trajectory)
    lcb = delta - cfg.credit_z * se
    ok = delta > cfg.margin and verify.clears(delta, se, cfg.credit_z)
    return ok, cfg.lam * (delta if cfg.credit_test == "se" else max(lcb, 0.0))


def judged_groups(groups, cfg, step: int) -> set[int]:
    """The eligible groups this update judges: all, or with --judge-max N > 0 a uniform draw of N
    (seeded by the run's seed and the update, so a resumed run draws the same)."""
    idx = [g for g, group in enumerate(groups) if prover.eligible(group, cfg.min_success, cfg.max_success)]
    if cfg.judge_max <= 0 or len(idx) <= cfg.judge_max:
        return set(idx)
    return set(random.Random(cfg.seed * 1_000_003 + step).sample(idx, cfg.judge_max))


class Options(prover.Paper):
    """The options' choices at prover.credit's named points (module docstring)."""

    def __init__(self, cfg, history_len: int):
        super().__init__(cfg)
        self.H = history_len
        self.extra: dict[str, list[float]] = {"bonus": [], "k": [], "crn_se": []}
        self.matched: list | None = None       # this proposal's matched runs (scope matched)
        self.targets_: list = []               # ... and the turns its bonus went to

    def judged(self, groups, step):
        return judged_groups(groups, self.cfg, step)

    def propose(self, judge, group, sid, st):
        if self.cfg.judge_success != "judge":
            return super().propose(judge, group, sid, st)
        if self.refused is not None:
            return self.refused.skipped(), sid
        shortest = sid
        jr = judge.propose(group, sid, choose_success=True)
        if jr.reason_key == "connection error":
            self.refused = jr
        if jr.success_id is not None and 0 <= jr.success_id < len(group) and group[jr.success_id].won:
            sid = jr.success_id
        st["success_chosen"] += sid != shortest
        if jr.success_note:
            st[f"success_fallback/{jr.success_note.split(':')[0]}"] += 1
        return jr, sid

    def verify(self, estimate, agent, envs, traj, p, seed):
        c = self.cfg
        if c.trust_judge > 0:           # no continuations: the judge's segment is worth C by fiat
            return verify.Verification(c.trust_judge, 0.0, 0.0, c.trust_judge, 0, [], [])
        return estimate(agent, envs, traj, p.start_turn, p.end_turn, c.verify_k, c.temperature, seed=seed,
                        crn=c.verify_crn, k_max=c.verify_k_max, z=c.credit_z, fresh=c.verify_estimate == "fresh")

    def decide(self, v):
        return credit_decision(v.delta, v.se, self.cfg)

    def targets(self, group, sid, p, adv_g, applied, st):
        """The bonus's turns (matched scope: every matching run); with --focus, applied here (before
        the bonus): β scales the outcome term only, a turn's format penalty stays whole."""
        c, seg = self.cfg, range(p.start_turn, p.end_turn + 1)
        out, self.matched = [(sid, t) for t in seg], None
        if c.credit_scope == "matched":
            self.matched = matched_segments(group, sid, p.start_turn, p.end_turn, self.H)
            out = list(dict.fromkeys((j, u + k) for j, u in self.matched for k in range(len(seg))))   # each turn once
        if applied and c.focus != 1.0:
            for t in range(len(group[sid].turns)):
                if t not in seg:
                    pen = grpo.turn_penalty(group[sid].turns[t], c.invalid_penalty, c.inadmissible_penalty)
                    adv_g[sid][t] = c.focus * (adv_g[sid][t] + pen) - pen
        self.targets_ = out
        return out

    def after(self, run, g, group, sid, p, v, applied, bonus, adv, st, seed):
        c = self.cfg
        if applied and c.credit_scope == "matched":
            st["matched_turns"] += len(self.targets_) - (p.end_turn - p.start_turn + 1)
            st["matched_trajs"] += len({j for j, _ in self.targets_} - {sid})
        if applied and c.credit_test != "positive":
            self.extra["bonus"].append(bonus)
        if c.verify_k_max:
            self.extra["k"].append(v.k)
        if c.verify_crn:
            self.extra["crn_se"].append(v.se)
        opt = {"test": c.credit_test, "bonus": bonus if applied else 0.0, "lam": c.lam, "focus": c.focus}
        if self.matched is not None:
            opt["matched"] = self.matched
        if c.negative_credit:
            opt["neg"] = negative_credit(run, c, g, group, sid, p.start_turn, self.H, v, seed, adv, st)
        if not options_on(c):         # --judge-max alone: the judged groups' entries are the paper's
            return None
        return {"record": record_fields(group, v, opt), "report": report_lines(group, sid, v, applied, opt)}

    def metrics(self):
        return {f"prover/{'verify_k' if k == 'k' else k}_mean": sum(xs) / len(xs) for k, xs in self.extra.items() if xs}


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
    res = verify.alternatives(run.agent, run.envs(v.k * len(todo)), v,
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


def record_fields(group, v, opt: dict) -> dict:
    """The record's extra fields: the bonus added, the test, CRN and rounds, matched turns, alternatives."""
    r = {"bonus": opt["bonus"], "test": opt["test"], "paired": v.paired, "se_unpaired": v.se_unpaired, "rounds": v.rounds}
    if "matched" in opt:
        r["matched"] = [[group[j].traj_id, u] for j, u in opt["matched"]]
    if "neg" in opt:
        r["neg"] = [{"action": x["action"], "occ": [[group[j].traj_id, u] for j, u in x["occ"]],
                     "delta": x["delta"], "se": x["se"], "applied": x["applied"], "penalty": x["penalty"]}
                    for x in opt["neg"]]
    return r


def report_lines(group, sid, v, applied, opt: dict) -> str:
    """segments.md's verdict with what each option did."""
    tr = group[sid]
    rule = {"positive": "Δ̂ > margin", "se": "Δ̂ > margin and Δ̂ > z·SE", "shrink": "Δ̂ > margin and Δ̂ > z·SE"}[opt["test"]]
    verdict = f"credit +{opt['bonus']:.3f} applied" if applied else f"no credit (not {rule})"
    se_txt = (f"paired SE {v.se:.3f} (CRN; unpaired {v.se_unpaired:.3f})" if v.paired else f"SE {v.se:.3f}")
    lines = [f"\nΔ̂ = {v.delta:+.3f}, {se_txt} (K={v.k} per side in {v.rounds} round{'s' * (v.rounds > 1)}; "
             f"SR pre {v.sr_pre:.3f} → post {v.sr_post:.3f}) → {verdict}\n"]
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


def rules_for(cfg, agent) -> prover.Paper:
    """The paper's rules, or the options' when any is set (--judge-max included)."""
    if options_on(cfg) or cfg.judge_max > 0:
        return Options(cfg, getattr(agent, "history_len", cfg.history_len))
    return prover.Paper(cfg)


def prover_credit(groups, adv, run, estimate=None) -> dict:
    """--method prover: prover.credit, with the options' rules when any option flag is set."""
    return prover.credit(groups, adv, run, rules_for(run.cfg, run.agent), estimate)


def plus_credit(groups, adv, run, estimate=None) -> dict:
    """--method prover-plus: prover.credit with PLUS overriding the config's values."""
    return prover.credit(groups, adv, run, rules_for(dataclasses.replace(run.cfg, **PLUS), run.agent), estimate)
