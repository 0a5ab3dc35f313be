"""Verification: the judge's segment is not trusted — its advantage is measured.

A proposed segment (ℓ, r) of a successful trajectory is a temporally extended action. With no
intermediate reward and γ = 1 its advantage under the current policy π is

    A_seg = V^π(s_post) − V^π(s_pre),     s_pre = state before turn ℓ,  s_post = state after turn r

(the state after turn r is the state before turn r+1, which exists because segments are
non-terminal). We restore the exact agent context (prompt history) and env state at each boundary
and sample K current-policy continuations from each, with the episode's remaining step budget:

    Δ̂ = mean_k R_post,k − mean_k R_pre,k,      SE(Δ̂) = sqrt(s²_post/K + s²_pre/K)

with R the episode outcome (binary success; WebShop's score in [0, 1] under --reward score) and
s² the unbiased sample variance. Given the segment, Δ̂ is an unbiased
estimate of A_seg when restoring is exact — which our snapshots guarantee (agent context and env
state are restored exactly; an env with randomness left redraws it per continuation, so V(s) averages
over it rather than over one fixed draw — see `rollout.run_episodes(fresh_env_randomness=...)`).

What it does not guarantee: with K = 8 and success rates near 0.5, SE ≈ 0.25, as large as a typical
bonus; thresholding at Δ̂ > 0 then gives zero-value segments a positive expected bonus. `margin`
in prover.py (credit only if Δ̂ > margin) is the knob for that; the SE is reported with every
estimate (segments.md) so a reader can judge.

Every continuation token and env step is counted under `tokens/verify` / `env_steps/verify`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rollout import Agent, Trajectory, continue_from, outcome


@dataclass
class Verification:
    delta: float            # Δ̂ = SR(post) − SR(pre)
    se: float               # its standard error
    sr_pre: float
    sr_post: float
    k: int
    pre: list[float]        # outcomes of the continuations from s_pre
    post: list[float]       # ... and from s_post


def _var(x: list[float]) -> float:
    if len(x) < 2:
        return 0.0
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def estimate(agent: Agent, envs: list, traj: Trajectory, start_turn: int, end_turn: int, K: int,
             temperature: float, seed: int) -> Verification:
    """Δ̂ for turns [start_turn, end_turn] (inclusive) of `traj`. `envs` needs ≥ 2K envs of the
    trajectory's split; both sides run in one batch (2K episodes) for speed."""
    assert 0 <= start_turn <= end_turn < len(traj.turns) - 1, "segment must be non-terminal"
    s_pre = traj.turns[start_turn].state
    s_post = traj.turns[end_turn + 1].state
    assert s_pre is not None and s_post is not None, "trajectory was rolled out without restore handles"
    finals = continue_from(agent, envs, [s_pre, s_post], K, temperature, seed, purpose="verify")
    pre = [outcome(f.info, agent.reward) for f in finals[:K]]     # R = success (or score: --reward)
    post = [outcome(f.info, agent.reward) for f in finals[K:]]
    sr_pre, sr_post = sum(pre) / K, sum(post) / K
    return Verification(delta=sr_post - sr_pre, se=math.sqrt(_var(pre) / K + _var(post) / K),
                        sr_pre=sr_pre, sr_post=sr_post, k=K, pre=pre, post=post)
