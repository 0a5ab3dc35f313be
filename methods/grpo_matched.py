"""grpo-matched — GRPO at ProVer's budget (ProVer paper's "budget-matched GRPO").
    Extra rollouts from the tasks' start states join their groups (G grows), then GRPO advantages
    are recomputed. Budget per update: `matched_tokens` generated tokens if set, else
    `matched_extra` × this update's rollout tokens; converted to whole episodes with this update's
    mean tokens per episode, spread round-robin over the groups. OURS: the default 0.4 (about
    40%) is chosen to match ProVer's own overhead, (tokens/verify + tokens/judge) / tokens/rollout,
    with the tiny policy and the built-in judge on ALFWorld (see results/LOG.md, "grpo-matched's
    default budget") — not the paper's +2.4% (real LLMs, whose rollouts are much longer relative
    to the continuations). ProVer's overhead depends on the setting: measure it from the
    `tokens/*` metrics and pass --matched-extra or --matched-tokens.

Notation: a group is the G trajectories of one task; trajectory i has turns t = 0..T_i−1 and binary
outcome R_i = success (or WebShop's score with --reward score; rollout.outcome); `pen_t` = invalid_penalty · 1[turn t lacked <action> tags], or inadmissible_penalty if its action
was not admissible (grpo.turn_penalty, dev. 2).
What is ours, not the source's, is marked OURS.
"""
from __future__ import annotations

import grpo
from methods.common import seed_for
from rollout import make_trajectories, run_episodes, start_state


def matched_counts(n_groups: int, n_traj: int, rollout_tokens: int, extra: float, matched_tokens: int = 0) -> list[int]:
    """Extra episodes per group. Budget = matched_tokens, or extra × rollout_tokens; one episode
    costs rollout_tokens / n_traj on average; the count is rounded and dealt round-robin."""
    if n_groups == 0 or n_traj == 0 or rollout_tokens <= 0:
        return [0] * n_groups
    budget = matched_tokens if matched_tokens > 0 else extra * rollout_tokens
    n = int(round(budget / (rollout_tokens / n_traj)))
    return [n // n_groups + (k < n % n_groups) for k in range(n_groups)]


def credit(groups, adv, run) -> dict:
    cfg = run.cfg
    tok = sum(len(tn.action_ids) for grp in groups for tr in grp for tn in tr.turns)
    counts = matched_counts(len(groups), sum(len(g) for g in groups), tok, cfg.matched_extra, cfg.matched_tokens)
    envs = run.envs(sum(counts))
    starts, k = [], 0
    for grp, c in zip(groups, counts):
        for _ in range(c):
            starts.append(start_state(envs[k], grp[0].task))
            k += 1
    if starts:   # one batched call; they are rollouts (training data), so counted as such
        turns, finals = run_episodes(run.agent, envs[:k], starts, cfg.temperature, seed_for(run, 1, groups), purpose="rollout")
        k = 0
        for grp, c in zip(groups, counts):
            base = len(grp)
            for tr in make_trajectories(turns[k:k + c], finals[k:k + c], grp[0].group_id, grp[0].task,
                                        reward=run.agent.reward):
                tr.traj_id += base
                grp.append(tr)
            k += c
    adv[:] = grpo.trajectory_advantages(groups, cfg.norm_std, cfg.invalid_penalty, cfg.inadmissible_penalty)
    return {"matched/extra_episodes": sum(counts), "matched/group_size_mean": sum(len(g) for g in groups) / max(1, len(groups))}
