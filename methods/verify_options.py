"""Verification beyond the paper: common random numbers, adaptive K, and the failures' alternatives.

Built on verify.py (the paper's Δ̂ = mean_k R_post,k − mean_k R_pre,k from K independent
continuations per side); off by default, each behind its flag (methods/prover_options.py):
  --verify-crn     common random numbers: continuation k of each side shares its sampling seeds and
                   env draws; Δ̂ = mean of the paired differences d_k = R_post,k − R_pre,k, SE =
                   sqrt(s²_d / K). Var(Δ̂) = (σ²_post + σ²_pre − 2·Cov)/K shrinks where both sides
                   face the same luck (keydoor's door draw).
  --verify-k-max   adaptive K: rounds of K per side until |Δ̂| − z·SE > 1e-9 (`clears`) or K_max
  --verify-estimate fresh (default with --verify-k-max): Δ̂ from a second, independent batch of
                   the chosen k (the stopping rounds' own Δ̂ is biased towards large |Δ̂|)
`alternatives` (for --negative-credit): Â(a′) = mean_k R_alt,k − mean_k R_pre,k for a failure's
different action at the same prompt view, against the same K pre outcomes (paired under CRN).

Every continuation token and env step is counted under tokens/verify and env_steps/verify, as in
the paper's estimate. Leaves out: value baselines or control variates beyond CRN.
"""
from __future__ import annotations

import math

import verify
from rollout import Agent, AgentState, Trajectory, continue_from, outcome, run_episodes
from verify import Verification

# Rounding tolerance of `clears`: Δ̂ − z·SE is a difference of two rounded floats
TOL = 1e-9


def clears(delta: float, se: float, z: float) -> bool:
    """Δ̂ beyond z·SE by more than rounding: the one rule adaptive K stops on (with |Δ̂|) and
    --credit-test se|shrink credit on (prover_options.credit_decision). Strict, so the boundary
    Δ̂ = z·SE — common under CRN with small rounds (one discordant pair of two: Δ̂ = SE = 0.5) —
    neither stops the rounds nor earns credit: a non-strict stop would end the rounds on a Δ̂ the
    credit test then refuses."""
    return delta - z * se > TOL


def compare(pre: list[float], post: list[float], paired: bool = False, rounds: int = 1) -> Verification:
    """verify.compare; `paired` (CRN): the SE of the mean paired difference, sqrt(s²_d / K), with
    the independent formula's SE kept as `se_unpaired`."""
    v = verify.compare(pre, post)
    v.rounds = rounds
    if paired:
        d = [b - a for a, b in zip(pre, post)]
        v.se, v.se_unpaired, v.paired = math.sqrt(verify.variance(d) / v.k), v.se, True
    return v


def crn_outcomes(agent: Agent, envs: list, starts: list[AgentState], ids: list[int], temperature: float,
                 seed: int) -> list[float]:
    """Continuation ids[j] from every start, in start-major order, with common random numbers:
    `run_episodes` with fresh_env_randomness off seeds an episode's sampling by (seed, episode id,
    the episode's absolute step) and its env by (seed, episode id), so the same id on two starts
    gives both the same random numbers — and a pre-side continuation that replays the segment meets
    the post side's numbers from the step where their states can coincide."""
    n = len(ids) * len(starts)
    assert len(envs) >= n
    _, finals = run_episodes(agent, envs[:n], [s for s in starts for _ in ids], temperature, seed, "verify",
                             keep_states=False, fresh_env_randomness=False, episode_ids=[k for _ in starts for k in ids],
                             absolute_steps=True)
    return [outcome(f.info, agent.reward) for f in finals]


def estimate(agent: Agent, envs: list, traj: Trajectory, start_turn: int, end_turn: int, K: int,
             temperature: float, seed: int, crn: bool = False, k_max: int = 0, z: float = 1.0,
             fresh: bool = False) -> Verification:
    """verify.estimate with the options; crn False and k_max 0 is the paper's single round.

    `crn` (--verify-crn): continuation k of both sides uses episode id k (`crn_outcomes`).
    `k_max` (--verify-k-max) with `z` (--credit-z): rounds of K per side until `clears(|Δ̂|, SE, z)`
    or k_max; Δ̂ = 0 never stops early (under CRN most small rounds have every d_k = 0, SE = 0),
    so a segment with no effect pays for all k_max. Each round has its own seeds (CRN: episode ids
    K·n … K·(n+1) − 1; else hash((seed, n)), round 0 being the paper's call). The pooled Δ̂ of
    the stopping rounds is biased towards large |Δ̂| (the rounds that stop are those whose noise
    cleared z·SE; bench/adaptive_bias.py measures it); `fresh` (--verify-estimate fresh) takes Δ̂
    and SE from a second batch of k per side, independent of the first, so E[Δ̂ | k] = A_seg."""
    s_pre, s_post = verify.boundaries(traj, start_turn, end_turn)
    assert k_max == 0 or k_max >= K, "k_max must be 0 (off) or >= K"

    def batch(first: int, n: int, rnd: int) -> list[float]:
        """n continuations per side, pre then post (round `rnd`; CRN: episode ids first … first + n − 1)."""
        if crn:
            return crn_outcomes(agent, envs, [s_pre, s_post], list(range(first, first + n)), temperature, seed)
        v = verify.estimate(agent, envs, traj, start_turn, end_turn, n, temperature,
                            seed if rnd == 0 else hash((seed, rnd)) & 0x7FFFFFFF)
        return v.pre + v.post

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
        out = crn_outcomes(agent, envs, alt_states, list(range(base.id0, base.id0 + k)), temperature, seed)
    else:
        finals = continue_from(agent, envs, alt_states, k, temperature,
                               hash((seed, 0, 0xA17)) & 0x7FFFFFFF, purpose="verify")
        out = [outcome(f.info, agent.reward) for f in finals]
    return [compare(base.pre, out[j * k:(j + 1) * k], paired=base.paired) for j in range(len(alt_states))]
