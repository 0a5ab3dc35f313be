"""ladder.py — the credit ladder's lab-only arms: credit that needs the env's truth (keydoor only).

Each rung removes one source of error between GRPO and perfect credit (oracle.py computes
A*(s, a) = Q^π(s, a) − V^π(s) exactly for the policy that sampled the batch):

    grpo          A_t = R − mean_g R                               (outcome noise, no per-turn credit)
    oracle-rb     A_t = E[R | decisions] − mean_g E[R | decisions]  (the door's draw removed: E[R|·]
                  = door_chance(key, coin) if the door was opened, else 0; outcome noise gone)
    prover        + λ·Δ̂ on the judge's segment                      (selection, coverage, estimation)
    prover-exact  + λ·ΔV on the judge's segment, ΔV = V^π(s_{r+1}) − V^π(s_ℓ) exact
                  (ProVer's judge, segment, scope and credit rule; no estimation noise)
    prover-plus-exact  the same for prover-plus (every mixed group eligible)
    oracle-add    A_t = A^GRPO_t + λ·A*(s_t, a_t) on every turn       (coverage: every turn)
    oracle        A_t = A*(s_t, a_t)                                 (perfect credit, alone; the update's
                                                                     format penalty kept, as in every arm)

So the table of a study splits the gap between GRPO and perfect credit into outcome noise
(grpo → oracle-rb), estimation (prover → prover-exact, prover-plus → prover-plus-exact), selection and coverage (prover-exact →
oracle-add) and the outcome term itself (oracle-add → oracle).

Every arm follows the protocol of methods/__init__.py: fn(groups, adv, run) updates adv[g][i][t] in place and
returns metrics (oracle/*: the DP's size, its pruning bound and residual mass). The oracle is
rebuilt for every call (the policy changed since the last one) at the rollout temperature.
Leaves out: every env but keydoor (config.validate refuses them with one line before set-up).
"""
from __future__ import annotations

import grpo
from lab import oracle
from methods import credit_fn, prover_options
import verify

def make_oracle(run) -> oracle.Oracle:
    """The oracle of the policy that sampled this batch (the generator's model)."""
    model = getattr(run.agent.gen, "model", None)
    if model is None:
        raise ValueError("the ladder's oracle arms need the policy's weights in this process (--rollout hf)")
    return oracle.Oracle(run.env_kwargs, oracle.ModelPolicy(model, run.agent, run.cfg.temperature),
                         history_len=run.agent.history_len, eps=run.cfg.oracle_eps)


def _stats(orc: oracle.Oracle, roots) -> dict:
    s = orc.stats
    return {"oracle/nodes": s["nodes"], "oracle/bound_max": orc.max_bound(roots),
            "oracle/residual_mean": s["residual_mass"] / max(1, s["scored"])}


def oracle_rb(groups, adv, run) -> dict:
    """GRPO on E[R | decisions]: the trajectories' R is replaced and GRPO's advantages recomputed
    (format penalties as GRPO's)."""
    for group in groups:
        for tr in group:
            tr.R = oracle.expected_reward(tr, run.env_kwargs)
    cfg = run.cfg
    new = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    for g in range(len(groups)):
        adv[g] = new[g]
    return {"oracle/expected_R_mean": sum(tr.R for gr in groups for tr in gr) / max(1, sum(map(len, groups)))}


def _exact(groups, adv, run, add: bool) -> dict:
    """oracle-add: A^GRPO_t + λ·A*_t. oracle: A*_t − penalty_t, where penalty_t is the update's format
    penalty (grpo.turn_penalty: `--invalid-penalty` for a turn without the action tags, and
    `--inadmissible-penalty` if set) that every other arm's advantages carry too. Why keep it: the
    penalty is part of the update, not of the credit — GRPO, ProVer, GiGPO … all subtract it — and
    without it nothing in exact credit pushes back on malformed text while the step limit does not
    bind (A* of a wasted turn is ≈ 0). At a large learning rate the pushed-up `key` token then spread
    to `take key` in keyless rooms and on to untagged `key key key …` within two updates (results/LOG.md,
    "Why oracle collapses at ×10"); the arm is the positive control, so it must share the update."""
    orc = make_oracle(run)
    a_star = orc.advantages(groups)
    cfg = run.cfg
    for g, group in enumerate(groups):
        for i, tr in enumerate(group):
            for t, turn in enumerate(tr.turns):
                base = adv[g][i][t] if add else -grpo.turn_penalty(turn, cfg.invalid_penalty, cfg.inadmissible_penalty)
                adv[g][i][t] = base + (cfg.lam if add else 1.0) * a_star[g][i][t]
    roots = [tn.state for gr in groups for tr in gr for tn in tr.turns]
    return _stats(orc, roots)


def oracle_add(groups, adv, run) -> dict:
    """GRPO + λ·A* on every turn."""
    return _exact(groups, adv, run, add=True)


def oracle_alone(groups, adv, run) -> dict:
    """A* alone: perfect credit for the sampling policy (no outcome term)."""
    return _exact(groups, adv, run, add=False)


def exact_estimator(orc: oracle.Oracle):
    """A drop-in for verify.estimate: Δ = V^π(s_{r+1}) − V^π(s_ℓ) exactly (SE 0, no continuations).
    V^π(s_{r+1}) = Q^π(s_r, a_r) (the move is deterministic given the turn's text), which also covers
    a segment that ends the episode."""
    def estimate(agent, envs, traj, start, end, K, temperature, seed=0, crn=False, k_max=0, z=1.0, fresh=False):
        pre = orc.values([traj.turns[start].state])[0]
        post = orc.turn_q(traj.turns[end].state, traj.turns[end].action)
        return verify.Verification(post - pre, 0.0, pre, post, 0, [], [])
    return estimate


def prover_exact(groups, adv, run, plus: bool = False) -> dict:
    """ProVer's judge, segment, scope and credit rule, with the exact ΔV instead of Δ̂."""
    orc = make_oracle(run)
    fn = prover_options.plus_credit if plus else credit_fn("prover")      # as --method prover/prover-plus run it
    out = fn(groups, adv, run, estimate=exact_estimator(orc))
    out.update({k: v for k, v in _stats(orc, []).items() if k != "oracle/bound_max"})
    return out


def prover_plus_exact(groups, adv, run) -> dict:
    """prover-plus (every mixed group, the judged success, matched scope) with the exact ΔV:
    prover-plus → prover-plus-exact isolates prover-plus's estimation noise."""
    return prover_exact(groups, adv, run, plus=True)


# Revisions of an arm's credit, for the studies that keep finished runs (bench/credit_phase.py records it
# in each run's protocol, so a summary made under an earlier revision is refused, never mixed in).
# oracle 2: keeps the update's format penalty (see `_exact`); revision-1 runs are in git history.
REVISION = {"oracle": 2}
