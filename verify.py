"""VERIFY: the judge's segment is not trusted — its advantage is measured.

A proposed segment (ℓ, r) of a successful trajectory is a temporally extended action. With no
intermediate reward and γ = 1 its advantage under the current policy π is

    A_seg = V^π(s_post) − V^π(s_pre),     s_pre = state before turn ℓ,  s_post = state after turn r

(s_post exists because segments are non-terminal). `estimate` restores the exact agent context
(prompt history) and env state at each boundary and samples K current-policy continuations from
each, with the episode's remaining step budget, all 2K in one batch:

    Δ̂ = mean_k R_post,k − mean_k R_pre,k,      SE(Δ̂) = sqrt(s²_post/K + s²_pre/K)

R the episode outcome (success; WebShop's score under --reward score), s² the unbiased sample
variance. Given the segment, Δ̂ is unbiased for A_seg because restoring is exact (an env with
randomness left redraws it per continuation, so V averages over it). Toy example: 2/4 succeed
from s_ℓ, 3/4 from s_{r+1}: Δ̂ = +0.25.

What it does not guarantee: at K = 8 and success rates near 0.5, SE ≈ 0.25, as large as a typical
bonus, so the rule Δ̂ > 0 gives zero-value segments a positive expected bonus; the SE is reported
with every estimate (segments.md).

Every continuation token and env step is counted under tokens/verify and env_steps/verify.
Leaves out: common random numbers, adaptive K and the failures' alternative actions (options
beyond the paper: methods/verify_options.py, built on `estimate` and `compare`); value baselines
or control variates; training on the continuations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rollout import Agent, AgentState, Trajectory, continue_from, outcome


@dataclass
class Verification:
    delta: float            # Δ̂ = SR(post) − SR(pre)
    se: float               # its standard error (paired under CRN)
    sr_pre: float
    sr_post: float
    k: int                  # continuations per side (all rounds)
    pre: list[float]        # outcomes of the continuations from s_pre
    post: list[float]       # ... and from s_post (or from an alternative's state)
    # set by the options beyond the paper (methods/verify_options.py); the paper's values otherwise
    paired: bool = False    # CRN: pre[k] and post[k] share seeds and env draws; `se` is the paired SE
    se_unpaired: float | None = None   # under CRN, the SE the independent formula would give (for comparison)
    rounds: int = 1         # adaptive K: rounds of continuations used (both batches under `fresh`)
    id0: int = 0            # CRN: the episode id of pre[0] (the fresh batch starts after the stopping batch)
    k_stop: int = 0         # fresh: continuations per side the stopping batch used (as many again are spent)
    delta_stop: float | None = None   # fresh: the stopping batch's own Δ̂ (biased; kept for comparison)


def variance(x: list[float]) -> float:
    """The unbiased sample variance s² (0 for fewer than two values)."""
    if len(x) < 2:
        return 0.0
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def compare(pre: list[float], post: list[float]) -> Verification:
    """Δ̂ and its SE from the two sides' outcomes (K each)."""
    k = len(pre)
    assert k == len(post) and k > 0
    sr_pre, sr_post = sum(pre) / k, sum(post) / k
    se = math.sqrt(variance(pre) / k + variance(post) / k)
    return Verification(sr_post - sr_pre, se, sr_pre, sr_post, k, list(pre), list(post))


def boundaries(traj: Trajectory, start_turn: int, end_turn: int) -> tuple[AgentState, AgentState]:
    """(s_pre, s_post): the restore handles before turn ℓ and after turn r."""
    assert 0 <= start_turn <= end_turn < len(traj.turns) - 1, "segment must be non-terminal"
    s_pre, s_post = traj.turns[start_turn].state, traj.turns[end_turn + 1].state
    assert s_pre is not None and s_post is not None, "trajectory was rolled out without restore handles"
    return s_pre, s_post


def estimate(agent: Agent, envs: list, traj: Trajectory, start_turn: int, end_turn: int, K: int,
             temperature: float, seed: int) -> Verification:
    """Δ̂ ± SE for turns [start_turn, end_turn] (inclusive) of `traj`: K independent continuations
    from each side. `envs` needs ≥ 2K envs of the trajectory's split."""
    s_pre, s_post = boundaries(traj, start_turn, end_turn)
    finals = continue_from(agent, envs, [s_pre, s_post], K, temperature, seed, purpose="verify")   # K per start
    R = [outcome(f.info, agent.reward) for f in finals]        # R = success (or score: --reward)
    return compare(R[:K], R[K:])
