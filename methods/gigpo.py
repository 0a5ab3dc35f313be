"""gigpo — GiGPO (arXiv 2505.10978; verl-agent `gigpo/core_gigpo.py`), for every group:
    A_{i,t} = A^E_i + ω·A^S_{i,t} − pen_t
    A^E_i   = (R_i − mean_g R) / F             episode advantage (grpo.group_advantages: 0 if G = 1)
    R_{i,t} = γ^{T_i−1−t} · R_i                discounted step return, terminal-only reward, γ = 0.95
    A^S_{i,t} = (R_{i,t} − mean_{S(i,t)} R) / F   S(i,t) = anchor-state group: all turns of all
                                               trajectories of the group whose observation equals
                                               turn.obs (exact; or greedy difflib ratio ≥ threshold
                                               against each cluster's first member); singleton → 0
    F = 1 ("mean_norm", the repo's default) or std + 1e-6 ("mean_std_norm", unbiased std).
    OURS: the invalid penalty is each turn's own adjustment on the final advantage (as in grpo.py),
    not folded into the step returns, so with no repeated states GiGPO reduces exactly to GRPO.

Notation: a group is the G trajectories of one task; trajectory i has turns t = 0..T_i−1 and binary
outcome R_i = success (or WebShop's score with --reward score; rollout.outcome); `pen_t` = invalid_penalty · 1[turn t lacked <action> tags], or inadmissible_penalty if its action
was not admissible (grpo.turn_penalty, dev. 2).
What is ours, not the source's, is marked OURS.
"""
from __future__ import annotations

import difflib
import math

import torch

import grpo
from methods.common import penalised

EPS = 1e-6


def anchor_clusters(keys: list[str], similarity: float = 0.0) -> list[int]:
    """Cluster id per key: exact equality, or (similarity > 0) greedy clustering — join the first
    cluster whose *first member* has difflib ratio ≥ similarity, else open a new one."""
    ids: list[int] = []
    if similarity <= 0:
        index: dict[str, int] = {}
        for k in keys:
            ids.append(index.setdefault(k, len(index)))
        return ids
    heads: list[str] = []
    for k in keys:
        for c, h in enumerate(heads):
            if h == k or difflib.SequenceMatcher(None, h, k).ratio() >= similarity:
                ids.append(c)
                break
        else:
            heads.append(k)
            ids.append(len(heads) - 1)
    return ids


def _norm(xs: list[float], mode: str) -> list[float]:
    """(x − mean)/F over one step group; a singleton gives 0 (its own mean)."""
    if len(xs) == 1:
        return [0.0]
    m = sum(xs) / len(xs)
    if mode == "mean_norm":
        return [x - m for x in xs]
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return [(x - m) / (sd + EPS) for x in xs]


def gigpo_group(R: list[float], obs: list[list[str]], gamma: float = 0.95, omega: float = 1.0,
                mode: str = "mean_norm", similarity: float = 0.0) -> tuple[list[list[float]], dict]:
    """A^E + ω·A^S per turn for one group (penalty not included). R[i]: outcome; obs[i][t]: anchor."""
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"gigpo mode {mode!r}: use mean_norm | mean_std_norm")
    AE = grpo.group_advantages(torch.tensor([R], dtype=torch.float64), mode == "mean_std_norm")[0].tolist()
    flat = [(i, t) for i in range(len(R)) for t in range(len(obs[i]))]
    ret = {(i, t): gamma ** (len(obs[i]) - 1 - t) * R[i] for i, t in flat}          # Eq. 5, terminal reward
    cid = anchor_clusters([obs[i][t] for i, t in flat], similarity)
    members: dict[int, list[tuple[int, int]]] = {}
    for key, c in zip(flat, cid):
        members.setdefault(c, []).append(key)
    AS: dict[tuple[int, int], float] = {}
    for keys in members.values():
        for key, a in zip(keys, _norm([ret[k] for k in keys], mode)):
            AS[key] = a
    out = [[AE[i] + omega * AS[(i, t)] for t in range(len(obs[i]))] for i in range(len(R))]
    shared = [len(v) for v in members.values() if len(v) > 1]
    return out, {"step_groups": len(shared), "clusters": len(members), "shared_turns": sum(shared),
                 "abs_AS": sum(abs(a) for a in AS.values())}


def credit(groups, adv, run) -> dict:
    cfg = run.cfg
    st = {"step_groups": 0, "clusters": 0, "shared_turns": 0, "abs_AS": 0.0}
    n_turns = 0
    for g, grp in enumerate(groups):
        a, s = gigpo_group([tr.R for tr in grp], [[tn.obs for tn in tr.turns] for tr in grp],
                           cfg.gigpo_gamma, cfg.gigpo_omega, cfg.gigpo_mode, cfg.gigpo_similarity)
        for i, tr in enumerate(grp):
            adv[g][i] = [penalised(a[i][t], tn, cfg) for t, tn in enumerate(tr.turns)]
        for k in st:
            st[k] += s[k]
        n_turns += sum(len(tr.turns) for tr in grp)
    return {"gigpo/step_groups": st["step_groups"], "gigpo/clusters": st["clusters"],
            "gigpo/shared_turn_frac": st["shared_turns"] / max(1, n_turns),
            "gigpo/step_adv_abs_mean": st["abs_AS"] / max(1, n_turns)}
