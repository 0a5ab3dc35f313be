"""vine — Monte Carlo reference credit for any env with snapshot/restore (VinePPO's estimator).

What it estimates: the advantage of every turn under the current policy π. With the episode outcome
R as the only return (γ = 1; a running score, as WebShop's or keydoor's apples, is part of R, so it
telescopes the same way):

    Q^π(s_t, a_t) = E[V^π(s_{t+1}) | s_t, a_t]          (the env's step; a random one averages out)
    Â_t = V̂(s_{t+1}) − V̂(s_t),   V̂(s) = (1/K) Σ_k R_k   K current-policy continuations from restored s
    V̂(s_T) = R                    (the final state: its value is the outcome, no continuation; where
                                   the last step is random, as keydoor's door, R is one draw of it and
                                   the last turn's SE leaves that draw out)
    SE(Â_t) = sqrt(s²(s_{t+1})/K + s²(s_t)/K)              s² the unbiased sample variance

E[Â_t | trajectory] = A^π(s_t, a_t): the continuations are the policy's own, from exactly restored
states (rollout.continue_from redraws an env's remaining randomness per continuation). The SE
shrinks as 1/√K; at K = 4 and V ≈ 0.5 it is ≈ 0.35 per turn. Adjacent turns share their state's
V̂ (one set of continuations per state), so Σ_t Â_t telescopes to R − V̂(s_0).

Subsampling (`--vine-turns m`): a long trajectory costs T·K continuations of up to T steps each. With
m > 0, m distinct turns of each trajectory are drawn uniformly (seeded), each credited (T/m)·Â_t and
the others 0: every turn is in the sample with probability m/T, so Σ_t credit_t ∇log π(a_t|s_t) stays
unbiased for Σ_t Â_t ∇log π (more variance, fewer continuations: 2m states instead of T).

As a method (`--method vine`): A_t = credit_t − pen_t in every group (no GRPO term; the update's
format penalty kept, as every arm keeps it), all groups — all-success and all-failure groups too,
where GRPO has nothing. Continuations are counted under tokens/verify and env_steps/verify (policy
tokens, as ProVer's). It is the benchmarks' positive control and the reference of
bench/benchmark_gradient.py, not a method from the paper.
Leaves out: VinePPO's token-level (per reasoning step) credit — here a step is an env turn;
de-duplicating equal states across trajectories (their hidden env state may differ).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from methods.common import penalised, seed_for
from rollout import continue_from, outcome

CHUNK = 512          # continuations per batched call (bounds the spare envs one call needs)


@dataclass
class TurnCredit:
    t: int
    adv: float          # Â_t = V̂(s_{t+1}) − V̂(s_t)
    se: float           # its standard error (independent continuations on both sides)
    weight: float       # T/m under subsampling, else 1: the turn's credit is weight · adv
    halves: tuple[float, float] | None = None   # Â_t from the first and from the last K/2 continuations (K even)


def _mean_var(x: list[float]) -> tuple[float, float]:
    m = sum(x) / len(x)
    return m, (sum((v - m) ** 2 for v in x) / (len(x) - 1) if len(x) > 1 else 0.0)


def state_outcomes(agent, envs_for, states: list, K: int, temperature: float, seed: int) -> list[list[float]]:
    """The K continuations' outcomes of each state, in batched calls of ≤ CHUNK episodes.
    `envs_for(n)` returns n spare envs of the states' split."""
    per = max(1, CHUNK // K)
    out: list[list[float]] = []
    for c in range(0, len(states), per):
        part = states[c:c + per]
        finals = continue_from(agent, envs_for(len(part) * K), part, K, temperature, hash((seed, c)) & 0x7FFFFFFF)
        wins = [outcome(f.info, agent.reward) for f in finals]
        out += [wins[j * K:(j + 1) * K] for j in range(len(part))]
    return out


def state_values(agent, envs_for, states: list, K: int, temperature: float, seed: int) -> list[tuple[float, float]]:
    """(V̂, s²) of each state from K continuations."""
    return [_mean_var(w) for w in state_outcomes(agent, envs_for, states, K, temperature, seed)]


def pick_turns(T: int, m: int, rng: random.Random) -> list[int]:
    """m distinct turns of T, uniformly (every turn with probability m/T); m = 0 or m ≥ T: all."""
    return list(range(T)) if m <= 0 or m >= T else sorted(rng.sample(range(T), m))


def turn_credit(agent, envs_for, trajs: list, K: int, temperature: float, seed: int, m: int = 0) -> list[list[TurnCredit]]:
    """Â_t with its SE for the picked turns of each trajectory (all of a batch in one pass)."""
    rng = random.Random(seed)
    picks = [pick_turns(len(tr.turns), m, rng) for tr in trajs]
    need: dict[tuple[int, int], int] = {}          # (trajectory, state index) → position in `starts`
    starts = []
    for j, (tr, ts) in enumerate(zip(trajs, picks)):
        for t in ts:
            for s in (t, t + 1):
                if s < len(tr.turns) and (j, s) not in need:
                    need[(j, s)] = len(starts)
                    starts.append(tr.turns[s].state)
    wins = state_outcomes(agent, envs_for, starts, K, temperature, seed)
    out = []
    for j, (tr, ts) in enumerate(zip(trajs, picks)):
        def v(s, part=slice(None)):   # (V̂, s²/K) of state s from the continuations `part`; the final state is the outcome
            if s == len(tr.turns):
                return tr.R, 0.0
            w = wins[need[(j, s)]][part]
            mean, var = _mean_var(w)
            return mean, var / len(w)

        def half(t, h):               # Â_t from half h of the continuations (the same half on both sides)
            part = slice(0, K // 2) if h == 0 else slice(K // 2, K)
            return v(t + 1, part)[0] - v(t, part)[0]
        w = len(tr.turns) / len(ts) if ts else 0.0
        out.append([TurnCredit(t, v(t + 1)[0] - v(t)[0], math.sqrt(v(t + 1)[1] + v(t)[1]), w,
                               (half(t, 0), half(t, 1)) if K % 2 == 0 else None) for t in ts])
    return out


def advantages(groups, cr: list[list[TurnCredit]], cfg, value=lambda c: c.adv) -> list:
    """adv[g][i][t] = weight·value(credit of turn t) − pen_t on the picked turns, −pen_t on the others."""
    adv, j = [], 0
    for grp in groups:
        adv.append([])
        for tr in grp:
            a = [0.0] * len(tr.turns)
            for c in cr[j]:
                a[c.t] = c.weight * value(c)
            adv[-1].append([penalised(x, tn, cfg) for x, tn in zip(a, tr.turns)])
            j += 1
    return adv


def batch_credit(groups, run) -> list[list[TurnCredit]]:
    """The credit of every trajectory of the update's groups (flattened in group order), seeded per step."""
    cfg = run.cfg
    trajs = [tr for grp in groups for tr in grp]
    return turn_credit(run.agent, run.envs, trajs, cfg.vine_k, cfg.temperature, seed_for(run, 9, groups), cfg.vine_turns)


def credit(groups, adv, run) -> dict:
    """A_t = weight·Â_t − pen_t on the picked turns, −pen_t on the others; every group."""
    cr = batch_credit(groups, run)
    adv[:] = advantages(groups, cr, run.cfg)
    ses = [c.se for row in cr for c in row]
    return {"vine/turns": len(ses), "vine/se_mean": sum(ses) / max(1, len(ses))}
