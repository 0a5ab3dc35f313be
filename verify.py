"""VERIFY: the judge's segment is not trusted — its advantage is measured.

A proposed segment (ℓ, r) of a successful trajectory is a temporally extended action. With no
intermediate reward and γ = 1 its advantage under the current policy π is

    A_seg = V^π(s_post) − V^π(s_pre),     s_pre = state before turn ℓ,  s_post = state after turn r

(s_post exists because segments are non-terminal). We restore the exact agent context (prompt
history) and env state at each boundary and sample K current-policy continuations from each, with
the episode's remaining step budget:

    Δ̂ = mean_k R_post,k − mean_k R_pre,k,      SE(Δ̂) = sqrt(s²_post/K + s²_pre/K)

R the episode outcome (success; WebShop's score under --reward score), s² the unbiased sample
variance. Given the segment, Δ̂ is unbiased for A_seg because restoring is exact (an env with
randomness left redraws it per continuation, so V averages over it). Toy example: 2/4 succeed
from s_ℓ, 3/4 from s_{r+1}: Δ̂ = +0.25.

What it does not guarantee: at K = 8 and success rates near 0.5, SE ≈ 0.25, as large as a typical
bonus, so the rule Δ̂ > 0 gives zero-value segments a positive expected bonus; the SE is reported
with every estimate (segments.md). Options beyond the paper (off by default; see `estimate`):
  --verify-crn     common random numbers: continuation k of each side shares sampling seeds and
                   env draws; Δ̂ = mean of the paired differences d_k, SE = sqrt(s²_d / K)
  --verify-k-max   adaptive K: rounds of K per side until |Δ̂| − z·SE > 1e-9 (`clears`) or K_max
  --verify-estimate fresh (default with --verify-k-max): Δ̂ from a second, independent batch of
                   the chosen k (the stopping rounds' own Δ̂ is biased towards large |Δ̂|)
`alternatives` (for --negative-credit): Â(a′) = mean_k R_alt,k − mean_k R_pre,k for a failure's
different action at the same prompt view, against the same K pre outcomes (paired under CRN).

Every continuation token and env step is counted under tokens/verify and env_steps/verify.
Leaves out: value baselines or control variates beyond CRN; training on the continuations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rollout import Agent, AgentState, Trajectory, continue_from, outcome, run_episodes


@dataclass
class Verification:
    delta: float            # Δ̂ = SR(post) − SR(pre)
    se: float               # its standard error (paired under CRN)
    sr_pre: float
    sr_post: float
    k: int                  # continuations per side (all rounds)
    pre: list[float]        # outcomes of the continuations from s_pre
    post: list[float]       # ... and from s_post (or from an alternative's state)
    paired: bool = False    # CRN: pre[k] and post[k] share seeds and env draws; `se` is the paired SE
    se_unpaired: float | None = None   # under CRN, the SE the independent formula would give (for comparison)
    rounds: int = 1         # adaptive K: rounds of continuations used (both batches under `fresh`)
    id0: int = 0            # CRN: the episode id of pre[0] (the fresh batch starts after the stopping batch)
    k_stop: int = 0         # fresh: continuations per side the stopping batch used (as many again are spent)
    delta_stop: float | None = None   # fresh: the stopping batch's own Δ̂ (biased; kept for comparison)


def _var(x: list[float]) -> float:
    if len(x) < 2:
        return 0.0
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def compare(pre: list[float], post: list[float], paired: bool = False, rounds: int = 1) -> Verification:
    """Δ̂ and its SE from the two sides' outcomes (paired: the SE of the mean paired difference)."""
    k = len(pre)
    assert k == len(post) and k > 0
    sr_pre, sr_post = sum(pre) / k, sum(post) / k
    se_ind = math.sqrt(_var(pre) / k + _var(post) / k)
    if not paired:
        return Verification(sr_post - sr_pre, se_ind, sr_pre, sr_post, k, list(pre), list(post), rounds=rounds)
    d = [b - a for a, b in zip(pre, post)]
    return Verification(sr_post - sr_pre, math.sqrt(_var(d) / k), sr_pre, sr_post, k, list(pre), list(post),
                        paired=True, se_unpaired=se_ind, rounds=rounds)


def _crn_outcomes(agent: Agent, envs: list, starts: list[AgentState], ids: list[int], temperature: float,
                  seed: int, align: str = "step") -> list[float]:
    """Continuation ids[j] from every start, in start-major order, with common random numbers:
    `run_episodes` with fresh_env_randomness off seeds an episode's sampling by (seed, episode id,
    turn) and its env by (seed, episode id), so the same id on two starts gives both the same
    random numbers. `align` "step" (default) indexes the sampling seeds by the episode's absolute
    step, so a pre-side continuation that replays the segment meets the post side's numbers from
    the step where their states can coincide; "turn" (the first version) by the turns played since
    the start, which misaligns the two sides by the segment's length."""
    n = len(ids) * len(starts)
    assert len(envs) >= n
    _, finals = run_episodes(agent, envs[:n], [s for s in starts for _ in ids], temperature, seed, "verify",
                             keep_states=False, fresh_env_randomness=False, episode_ids=[k for _ in starts for k in ids],
                             absolute_steps=align == "step")
    return [outcome(f.info, agent.reward) for f in finals]


# Rounding tolerance of `clears`: Δ̂ − z·SE is a difference of two rounded floats
TOL = 1e-9


def clears(delta: float, se: float, z: float) -> bool:
    """Δ̂ beyond z·SE by more than rounding: the one rule adaptive K stops on (with |Δ̂|) and
    --credit-test se|shrink credit on (prover.credit_decision). Strict, so the boundary Δ̂ = z·SE —
    common under CRN with small rounds (one discordant pair of two: Δ̂ = SE = 0.5) — neither stops
    the rounds nor earns credit; with a non-strict stop it stopped them and was then refused credit."""
    return delta - z * se > TOL


def estimate(agent: Agent, envs: list, traj: Trajectory, start_turn: int, end_turn: int, K: int,
             temperature: float, seed: int, crn: bool = False, k_max: int = 0, z: float = 1.0,
             crn_align: str = "step", fresh: bool = False) -> Verification:
    """Δ̂ for turns [start_turn, end_turn] (inclusive) of `traj`. `envs` needs ≥ 2K envs of the
    trajectory's split; both sides run in one batch (2K episodes). The defaults are the paper's
    single round of K independent continuations per side.

    `crn` (--verify-crn): continuation k of both sides uses episode id k, so its sampling seed
    hash((seed, k, step)) — step counted from the episode's start, so the sides agree at every
    absolute step — and its env draw (a function of (seed, k)) are shared. Var(Δ̂) =
    (σ²_post + σ²_pre − 2·Cov)/K shrinks where both sides face the same luck (keydoor's door draw).
    `k_max` (--verify-k-max) with `z` (--credit-z): rounds of K per side until `clears(|Δ̂|, SE, z)`
    or k_max; Δ̂ = 0 never stops early (under CRN most small rounds have every d_k = 0, SE = 0),
    so a segment with no effect pays for all k_max. Each round has its own seeds (CRN: episode ids
    K·n … K·(n+1) − 1; else hash((seed, n)), round 0 being the default call). The pooled Δ̂ of
    the stopping rounds is biased towards large |Δ̂| (the rounds that stop are those whose noise
    cleared z·SE; bench/adaptive_bias.py measures it); `fresh` (--verify-estimate fresh) takes Δ̂
    and SE from a second batch of k per side, independent of the first, so E[Δ̂ | k] = A_seg."""
    assert 0 <= start_turn <= end_turn < len(traj.turns) - 1, "segment must be non-terminal"
    s_pre = traj.turns[start_turn].state
    s_post = traj.turns[end_turn + 1].state
    assert s_pre is not None and s_post is not None, "trajectory was rolled out without restore handles"
    assert k_max == 0 or k_max >= K, "k_max must be 0 (off) or >= K"
    def batch(first: int, n: int, rnd: int) -> list[float]:
        """n continuations per side (round `rnd`; CRN: episode ids first … first + n − 1)."""
        if crn:
            return _crn_outcomes(agent, envs, [s_pre, s_post], list(range(first, first + n)), temperature, seed, crn_align)
        # round 0 is the paper's call; later rounds get their own seed (fresh samples and draws)
        finals = continue_from(agent, envs, [s_pre, s_post], n, temperature,
                               seed if rnd == 0 else hash((seed, rnd)) & 0x7FFFFFFF, purpose="verify")
        return [outcome(f.info, agent.reward) for f in finals]    # R = success (or score: --reward)

    pre: list[float] = []
    post: list[float] = []
    rounds = 0
    while True:
        n = K if k_max == 0 else min(K, k_max - len(pre))
        out = batch(len(pre), n, rounds)
        pre += out[:n]
        post += out[n:]
        rounds += 1
        v = compare(pre, post, paired=crn, rounds=rounds)
        if k_max == 0 or len(pre) >= k_max or clears(abs(v.delta), v.se, z):
            break
    if k_max == 0 or not fresh:
        return v
    # the stopping rule chose k on these outcomes, which biases their Δ̂; a second batch of k per
    # side, independent of the first (next episode ids / round seeds), is unbiased given k
    pre2: list[float] = []
    post2: list[float] = []
    while len(pre2) < v.k:
        n = min(K, v.k - len(pre2))
        out = batch(v.k + len(pre2), n, rounds)
        pre2 += out[:n]
        post2 += out[n:]
        rounds += 1
    f = compare(pre2, post2, paired=crn, rounds=rounds)
    f.id0, f.k_stop, f.delta_stop = v.k, v.k, v.delta
    return f


def alternatives(agent: Agent, envs: list, base: Verification, alt_states: list[AgentState], temperature: float,
                 seed: int) -> list[Verification]:
    """Â(a′) for each alternative's after-state against the shared V̂(s_pre) of `base` (its
    `pre` outcomes): base.k continuations from each, paired with `base.pre` when base is (CRN).
    `envs` needs ≥ base.k · len(alt_states) envs; all alternatives run in one batch."""
    if not alt_states:
        return []
    k = base.k
    if base.paired:
        out = _crn_outcomes(agent, envs, alt_states, list(range(base.id0, base.id0 + k)), temperature, seed)
    else:
        finals = continue_from(agent, envs, alt_states, k, temperature,
                               hash((seed, 0, 0xA17)) & 0x7FFFFFFF, purpose="verify")
        out = [outcome(f.info, agent.reward) for f in finals]
    return [compare(base.pre, out[j * k:(j + 1) * k], paired=base.paired) for j in range(len(alt_states))]

